"""The checks a message passes at intake, before anything is sent or spooled.

They are RocketMQ's own limits (the proxy's defaults, shared/spec §5.4), applied here so that a
message the broker would refuse forever is refused at once, even while the broker is down: such a
message must be REJECTED, never spooled. Each error names the field and the limit.

``validate_message`` checks the message as intake sees it; ``validate_timestamp`` checks what
only the protobuf form has (a Timestamp's seconds and nanos), for the converter, before it
converts. Every per-field limit lives here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from outbox.entry import OutboxMessage
from rocketbox_api.names import NAME_PATTERN, TOPIC_LENGTH_MAX, is_topic_name
from rocketbox_api.protobuf_ranges import NANOS_MAX, TIMESTAMP_SECONDS_MAX, TIMESTAMP_SECONDS_MIN
from sidecar import clock
from sidecar.errors import SendRejectedError
from sidecar.message_id import APP_MESSAGE_ID_LENGTH_MAX

BODY_BYTES_MAX = 4 * 1024 * 1024
USER_PROPERTIES_MAX = 128
# Tag, keys and user properties together (RocketMQ's MESSAGE_PROPERTIES_TOO_LARGE).
PROPERTIES_BYTES_MAX = 16 * 1024
MESSAGE_GROUP_BYTES_MAX = 64
KEYS_MAX = 32
DELIVERY_AHEAD_MS_MAX = 24 * 3600 * 1000
# System topics a producer may not write (RocketMQ's reserved prefixes).
RESERVED_TOPIC_PREFIXES = ("rmq_sys_", "%RETRY%", "%DLQ%", "RMQ_SYS_")
# Property names RocketMQ reserves for itself (the broker refuses them as user properties).
RESERVED_PROPERTY_NAMES = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
        "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS", "__SHARDINGKEY", "__STARTDELIVERTIME", "__CRC32#",
    }
)  # fmt: skip


# One regex search runs in C: a loop over characters in Python cost every message microseconds.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
WHITESPACE = re.compile(r"\s")


def _no_control(field: str, value: str) -> None:
    if CONTROL_CHARACTERS.search(value):
        raise SendRejectedError(field, "must not contain control characters")


def validate_timestamp(field: str, seconds: int, nanos: int) -> None:
    """A google.protobuf.Timestamp's fields, checked before it is converted (converter.py): the
    conversion itself refuses a timestamp outside the range with an error naming no field."""
    if not TIMESTAMP_SECONDS_MIN <= seconds <= TIMESTAMP_SECONDS_MAX:
        raise SendRejectedError(
            field,
            f"seconds is {seconds}; google.protobuf.Timestamp allows {TIMESTAMP_SECONDS_MIN:,} "
            f"to {TIMESTAMP_SECONDS_MAX:,} (years 0001 to 9999)",
        )
    if not 0 <= nanos <= NANOS_MAX:
        raise SendRejectedError(
            field,
            f"nanos is {nanos}; google.protobuf.Timestamp allows 0 to {NANOS_MAX:,}",
        )


def validate_message(m: OutboxMessage, now_ms: int | None = None) -> None:
    """Raise SendRejectedError naming the first field that RocketMQ would refuse."""
    if not m.topic:
        raise SendRejectedError("topic", "is required")
    if len(m.topic) > TOPIC_LENGTH_MAX:
        raise SendRejectedError(
            "topic", f"is {len(m.topic)} characters; the limit is {TOPIC_LENGTH_MAX}"
        )
    if not is_topic_name(m.topic):
        raise SendRejectedError("topic", f"{m.topic!r} does not match {NAME_PATTERN.pattern}")
    if m.topic.startswith(RESERVED_TOPIC_PREFIXES):
        raise SendRejectedError("topic", f"{m.topic!r} is a system topic")
    if not m.body:
        raise SendRejectedError("body", "is empty (1 byte at least)")
    if len(m.body) > BODY_BYTES_MAX:
        raise SendRejectedError("body", f"is {len(m.body)} bytes; the limit is {BODY_BYTES_MAX}")
    if m.tag is not None:
        if not m.tag.strip():
            raise SendRejectedError("tag", "is blank")
        if "|" in m.tag:
            raise SendRejectedError("tag", "must not contain '|'")
        _no_control("tag", m.tag)
    if len(m.keys) > KEYS_MAX:
        raise SendRejectedError("keys", f"has {len(m.keys)} keys; the limit is {KEYS_MAX}")
    for key in m.keys:
        if not key.strip():
            raise SendRejectedError("keys", "a key is blank")
        if " " in key:
            raise SendRejectedError("keys", f"key {key!r} contains a space (the separator of keys)")
        _no_control("keys", key)
    if m.message_group is not None:
        group_bytes = len(m.message_group.encode())
        if not m.message_group.strip():
            raise SendRejectedError("message_group", "is blank")
        if group_bytes >= MESSAGE_GROUP_BYTES_MAX:
            raise SendRejectedError(
                "message_group",
                f"is {group_bytes} bytes; the limit is {MESSAGE_GROUP_BYTES_MAX - 1}",
            )
        _no_control("message_group", m.message_group)
        if m.delivery_timestamp_ms is not None:
            raise SendRejectedError(
                "delivery_time", "a FIFO message (message_group set) cannot also be delayed"
            )
    if m.delivery_timestamp_ms is not None:
        now = now_ms if now_ms is not None else clock.now_ms()
        if m.delivery_timestamp_ms - now > DELIVERY_AHEAD_MS_MAX:
            raise SendRejectedError(
                "delivery_time", f"is more than {DELIVERY_AHEAD_MS_MAX // 3_600_000} h ahead"
            )
    _validate_properties(m.properties, m)
    if not m.message_id.strip():
        raise SendRejectedError("message_id", "is blank")
    if len(m.message_id) > APP_MESSAGE_ID_LENGTH_MAX:
        raise SendRejectedError(
            "message_id",
            f"is {len(m.message_id)} characters; the limit is {APP_MESSAGE_ID_LENGTH_MAX}",
        )
    if WHITESPACE.search(m.message_id):
        raise SendRejectedError("message_id", "must not contain whitespace")
    _no_control("message_id", m.message_id)


def _validate_properties(properties: Mapping[str, str], m: OutboxMessage) -> None:
    if len(properties) > USER_PROPERTIES_MAX:
        raise SendRejectedError(
            "user_properties", f"has {len(properties)} entries; the limit is {USER_PROPERTIES_MAX}"
        )
    total = len((m.tag or "").encode()) + sum(len(k.encode()) for k in m.keys)
    for name, value in properties.items():
        if not name:
            raise SendRejectedError("user_properties", "a property name is empty")
        if name in RESERVED_PROPERTY_NAMES:
            raise SendRejectedError("user_properties", f"{name!r} is reserved by RocketMQ")
        _no_control("user_properties", name)
        _no_control("user_properties", value)
        total += len(name.encode()) + len(value.encode())
    if total > PROPERTIES_BYTES_MAX:
        raise SendRejectedError(
            "user_properties",
            f"tag, keys and properties are {total} bytes; the limit is {PROPERTIES_BYTES_MAX}",
        )
