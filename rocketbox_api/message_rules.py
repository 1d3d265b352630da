"""RocketMQ's message rules: the one table that the sidecar's intake (sidecar/validation.py), the
broker's gRPC edge (broker/grpc_service/validator.py) and its store (broker/store/validation.py)
check messages against.

Why one table: a message the sidecar answers SPOOLED is sent again when the broker is back, so
the sidecar must refuse at once (REJECTED) every message the broker would refuse for ever. When
the two kept their own copies of the rules they drifted, and such messages were spooled, then
buried DEAD. Now both call ``message_fault`` (and ``topic_fault``), and a property test sends
them the same messages (tests/rocketbox_api/test_message_rules.py).

The rules are RocketMQ 5's: the proxy's checks and defaults (GrpcValidator,
SendMessageActivity), the property names MessageConst reserves (its STRING_HASH_SET, as of
5.3.3), and the system topic prefixes. In the order they are checked (the first fault is the one
named), with the Code the proxy answers:

- topic: 1..TOPIC_LENGTH_MAX characters of NAME_CHARACTERS, not a system topic: none of
  SYSTEM_TOPIC_PREFIXES nor SYSTEM_TOPIC_NAMES (TopicValidator's set, TBW102 among them), in a
  namespace too (ILLEGAL_TOPIC);
- body: 1..BODY_BYTES_MAX bytes, the broker's ``message_size_bytes_max`` (MESSAGE_BODY_EMPTY,
  MESSAGE_BODY_TOO_LARGE);
- tag: not blank, no '|', no control characters (ILLEGAL_MESSAGE_TAG);
- keys: at most KEYS_COUNT_MAX, each not blank, without spaces or control characters
  (ILLEGAL_MESSAGE_KEY);
- message_group: not blank, at most MESSAGE_GROUP_BYTES_MAX bytes of UTF-8, no control
  characters (ILLEGAL_MESSAGE_GROUP);
- delivery_time: not on a FIFO message (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE); at most
  DELIVERY_AHEAD_MS_MAX ahead, the broker's ``delay_ms_max``, and DELIVERY_PAST_MS_MAX behind
  (ILLEGAL_DELIVERY_TIME);
- user_properties: at most USER_PROPERTIES_COUNT_MAX, and with the tag and keys at most
  USER_PROPERTIES_BYTES_MAX bytes (MESSAGE_PROPERTIES_TOO_LARGE); names not empty and none of
  RESERVED_PROPERTY_NAMES, no control characters in names or values
  (ILLEGAL_MESSAGE_PROPERTY_KEY);
- message_id: 1..MESSAGE_ID_LENGTH_MAX characters, no whitespace or control characters
  (ILLEGAL_MESSAGE_ID).

A consumer group's name (``group_fault``, ILLEGAL_CONSUMER_GROUP): 1..GROUP_LENGTH_MAX characters
of NAME_CHARACTERS, none of SYSTEM_GROUP_PREFIXES.

Control characters are Java's ``Character.isISOControl``, which the proxy applies: C0, DEL and
C1 (U+0080..U+009F). Blank means nothing but whitespace.

Beyond RocketMQ: a group named with the prefix of a retry or dead-letter topic (RocketMQ's charset
lets one through, but its retry topic would be ``%RETRY%%RETRY%x``, and a namespace is put inside
such a prefix, making it another group), KEYS_COUNT_MAX (each key is an index entry), the past
bound of a delivery time (a delay message whose time has passed is delivered at once; one a
sidecar spooled through a long outage may be that late, one from years ago is a broken client),
and the message id's characters. One exception is rocketbox's broker's own: it takes RocketMQ's
18 delay levels as a user property DELAY (``delay_level_allowed``), which a RocketMQ proxy
refuses as reserved. The sidecar refuses it too, since it may be sending to a RocketMQ cluster.

Where the broker's limit is configurable, the default is here and the broker passes its value
in. A fault's ``reason`` names the value and the limit; a count or size over its limit reads
"is N <unit>; the limit is M" (the sidecar's RocketMQ front tells a property that is too large
from an illegal one by these words). A value is quoted cut (``shown``), so that no answer grows
with the request. A leaf module: the sidecar and the broker both import it, and it imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rocketbox_api.names import (
    GROUP_LENGTH_MAX,
    NAME_CHARACTERS,
    NAME_PATTERN,
    NAMESPACE_SEPARATOR,
    TOPIC_LENGTH_MAX,
)

MIB = 1024 * 1024
HOUR_MS = 3600 * 1000
DAY_MS = 24 * HOUR_MS

BODY_BYTES_MAX = 4 * MIB
KEYS_COUNT_MAX = 32
# RocketMQ's maxMessageGroupSize is 64, refused from 64 on: at most 63 bytes.
MESSAGE_GROUP_BYTES_MAX = 63
USER_PROPERTIES_COUNT_MAX = 128
# Tag, keys, user property names and values together, in UTF-8 (RocketMQ's maxUserPropertySize).
USER_PROPERTIES_BYTES_MAX = 16 * 1024
DELIVERY_AHEAD_MS_MAX = 24 * HOUR_MS
DELIVERY_PAST_MS_MAX = 30 * DAY_MS
# RocketMQ treats ids as opaque non-blank strings; bounded so that an app-given id fits the
# broker's index key and the outbox's columns, and an answer that echoes ids stays small.
MESSAGE_ID_LENGTH_MAX = 128

RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"
# Topics the broker keeps for itself (retry, dead letter, timers, transactions).
SYSTEM_TOPIC_PREFIXES = (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX, "rmq_sys_", "RMQ_SYS_",
                         "SCHEDULE_TOPIC")  # fmt: skip
# RocketMQ's TopicValidator.SYSTEM_TOPIC_SET (5.3): topics its brokers keep, which its proxy
# refuses to clients ("cannot access system topic"). TBW102 is the template auto-created topics
# are copied from; some of the rest a prefix above covers already.
SYSTEM_TOPIC_NAMES = frozenset(
    {
        "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC",
    }
)  # fmt: skip
# RocketMQ's system consumer groups (MixAll.CID_RMQ_SYS_PREFIX, "cannot use system consumer
# group"), and the prefixes of the topics a group's name makes (the module docstring).
SYSTEM_GROUP_PREFIXES = ("CID_RMQ_SYS_", RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)
SYSTEM_GROUP_RULE = f"no prefix of {', '.join(SYSTEM_GROUP_PREFIXES)}"

DELAY_LEVEL_PROPERTY = "DELAY"
DELAY_LEVEL_MAX = 18
# What RocketMQ's MessageConst.STRING_HASH_SET reserves (5.3.3), and the names RocketMQ and
# rocketbox's broker write besides: a user property of one of these names is refused.
RESERVED_PROPERTY_NAMES = frozenset(
    {
        # MessageConst.STRING_HASH_SET
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
        "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
        "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
        "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
        "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
        "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
        "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
        "__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#",
        # Written by RocketMQ's broker and proxy: transaction checks, the message group.
        "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRANSACTION_CHECK_TIMES", "__SHARDINGKEY",
        # A start delivery time some RocketMQ distributions read.
        "__STARTDELIVERTIME",
    }
)  # fmt: skip

# One regex search runs in C: a loop over characters in Python cost every message microseconds.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
WHITESPACE = re.compile(r"\s")
_NO_CONTROL = "must not contain control characters (C0, DEL or C1)"
# A value quoted in a fault: enough to recognise it.
SHOWN_CHARS_MAX = 64


def shown(value: str) -> str:
    """``value`` quoted for an error message, cut to SHOWN_CHARS_MAX with its length said: an
    answer that echoed a value whole could outgrow what gRPC lets an error carry."""
    if len(value) <= SHOWN_CHARS_MAX:
        return repr(value)
    return f"{value[:SHOWN_CHARS_MAX]!r}… ({len(value)} characters)"


@dataclass(frozen=True, slots=True)
class Fault:
    """The first rule a message breaks: its field (as the sidecar's API names it), the Code a
    RocketMQ proxy answers it with (its name in apache.rocketmq.v2), and why."""

    field: str
    code: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def name_fault(name: str, length_max: int) -> tuple[str, str] | None:
    """How ``name`` (a topic or group) breaks RocketMQ's name rule, as (limit, detail); None when
    it keeps it. A name over its length is told by its length, never quoted whole."""
    if not name:
        return f"1..{length_max} characters", "is empty"
    if len(name) > length_max:
        return f"{length_max} characters", f"is {len(name)} characters long"
    if NAME_PATTERN.fullmatch(name) is None:
        return f"characters {NAME_CHARACTERS}", f"{shown(name)} has a character outside the set"
    return None


def topic_fault(topic: str, dead_letter_allowed: bool = False) -> Fault | None:
    """A topic a message may be sent to (consumers may also read ``%DLQ%<group>``)."""
    fault = name_fault(topic, TOPIC_LENGTH_MAX)
    if fault is not None:
        limit, detail = fault
        return Fault("topic", "ILLEGAL_TOPIC", f"{detail} (limit: {limit})")
    if is_system_topic(topic) and not (dead_letter_allowed and topic.startswith(DLQ_TOPIC_PREFIX)):
        return Fault("topic", "ILLEGAL_TOPIC", f"{shown(topic)} is a system topic")
    return None


def is_system_topic(topic: str) -> bool:
    """RocketMQ's system topics, also as the NAME of a stored ``NAMESPACE%NAME``: its proxy never
    puts a system topic in a namespace, so it refuses TBW102 whatever the client's namespace."""
    return _reserved(topic, SYSTEM_TOPIC_PREFIXES, SYSTEM_TOPIC_NAMES)


def group_fault(group: str) -> Fault | None:
    """A consumer group's name (stored, with its namespace) a client may use."""
    fault = name_fault(group, GROUP_LENGTH_MAX)
    if fault is not None:
        limit, detail = fault
        return Fault("group", "ILLEGAL_CONSUMER_GROUP", f"{detail} (limit: {limit})")
    if is_system_group(group):
        reason = f"{shown(group)} is a system group (limit: {SYSTEM_GROUP_RULE})"
        return Fault("group", "ILLEGAL_CONSUMER_GROUP", reason)
    return None


def is_system_group(group: str) -> bool:
    """As ``is_system_topic``: RocketMQ's proxy never namespaces a system group either."""
    return _reserved(group, SYSTEM_GROUP_PREFIXES)


def _reserved(name: str, prefixes: tuple[str, ...], names: frozenset[str] = frozenset()) -> bool:
    bare = name.rpartition(NAMESPACE_SEPARATOR)[2]
    return name.startswith(prefixes) or bare.startswith(prefixes) or bare in names


def message_fault(
    *,
    body_bytes: int,
    tag: str | None,
    keys: Sequence[str],
    message_group: str | None,
    delivery_ms: int | None,
    properties: Mapping[str, str],
    message_id: str,
    now_ms: int,
    body_bytes_max: int = BODY_BYTES_MAX,
    delivery_ahead_ms_max: int = DELIVERY_AHEAD_MS_MAX,
    delay_level_allowed: bool = False,
) -> Fault | None:
    """The first rule of the table (but the topic's: ``topic_fault``) the message breaks, or
    None. ``now_ms`` is read only for a delivery time. The broker passes its configured body and
    delay limits, and ``delay_level_allowed`` (module docstring)."""
    if not body_bytes:
        return Fault("body", "MESSAGE_BODY_EMPTY", "is empty (1 byte at least)")
    if body_bytes > body_bytes_max:
        return Fault(
            "body",
            "MESSAGE_BODY_TOO_LARGE",
            f"is {body_bytes} bytes; the limit is {body_bytes_max}",
        )
    fault = _tag_fault(tag) if tag is not None else None
    if fault is None and keys:
        fault = _keys_fault(keys)
    if fault is None and message_group is not None:
        fault = _message_group_fault(message_group, delivery_ms is not None)
    if fault is None and delivery_ms is not None:
        fault = _delivery_fault(delivery_ms, now_ms, delivery_ahead_ms_max)
    if fault is None:
        fault = _properties_fault(properties, tag, keys, delay_level_allowed)
    if fault is None:
        fault = message_id_fault(message_id)
    return fault


def _tag_fault(tag: str) -> Fault | None:
    if not tag.strip():
        return Fault("tag", "ILLEGAL_MESSAGE_TAG", "is blank")
    if "|" in tag:
        return Fault("tag", "ILLEGAL_MESSAGE_TAG", f"{shown(tag)} must not contain '|'")
    if CONTROL_CHARACTERS.search(tag):
        return Fault("tag", "ILLEGAL_MESSAGE_TAG", f"{shown(tag)} {_NO_CONTROL}")
    return None


def _keys_fault(keys: Sequence[str]) -> Fault | None:
    if len(keys) > KEYS_COUNT_MAX:
        return Fault(
            "keys", "ILLEGAL_MESSAGE_KEY", f"has {len(keys)} keys; the limit is {KEYS_COUNT_MAX}"
        )
    for key in keys:
        if not key.strip():
            return Fault("keys", "ILLEGAL_MESSAGE_KEY", "a key is blank")
        if " " in key:
            return Fault(
                "keys",
                "ILLEGAL_MESSAGE_KEY",
                f"key {shown(key)} contains a space (the separator of keys)",
            )
        if CONTROL_CHARACTERS.search(key):
            return Fault("keys", "ILLEGAL_MESSAGE_KEY", f"key {shown(key)} {_NO_CONTROL}")
    return None


def _message_group_fault(group: str, delayed: bool) -> Fault | None:
    if not group.strip():
        return Fault("message_group", "ILLEGAL_MESSAGE_GROUP", "is blank")
    group_bytes = len(group.encode())
    if group_bytes > MESSAGE_GROUP_BYTES_MAX:
        return Fault(
            "message_group",
            "ILLEGAL_MESSAGE_GROUP",
            f"is {group_bytes} bytes; the limit is {MESSAGE_GROUP_BYTES_MAX}",
        )
    if CONTROL_CHARACTERS.search(group):
        return Fault("message_group", "ILLEGAL_MESSAGE_GROUP", f"{shown(group)} {_NO_CONTROL}")
    if delayed:
        return Fault(
            "delivery_time",
            "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
            "a FIFO message (message_group set) cannot also be delayed",
        )
    return None


def _delivery_fault(delivery_ms: int, now_ms: int, ahead_ms_max: int) -> Fault | None:
    if delivery_ms - now_ms > ahead_ms_max:
        return Fault(
            "delivery_time",
            "ILLEGAL_DELIVERY_TIME",
            f"is {delivery_ms - now_ms} ms ahead; the limit is {ahead_ms_max} "
            f"({ahead_ms_max / HOUR_MS:g} h)",
        )
    if now_ms - delivery_ms > DELIVERY_PAST_MS_MAX:
        return Fault(
            "delivery_time",
            "ILLEGAL_DELIVERY_TIME",
            f"is {now_ms - delivery_ms} ms in the past; the limit is {DELIVERY_PAST_MS_MAX} "
            f"({DELIVERY_PAST_MS_MAX // DAY_MS} days)",
        )
    return None


def _properties_fault(
    properties: Mapping[str, str],
    tag: str | None,
    keys: Sequence[str],
    delay_level_allowed: bool,
) -> Fault | None:
    if len(properties) > USER_PROPERTIES_COUNT_MAX:
        return Fault(
            "user_properties",
            "MESSAGE_PROPERTIES_TOO_LARGE",
            f"has {len(properties)} entries; the limit is {USER_PROPERTIES_COUNT_MAX}",
        )
    total = len(tag.encode()) if tag is not None else 0
    for key in keys:
        total += len(key.encode())
    for name, value in properties.items():
        fault = _property_fault(name, value, delay_level_allowed)
        if fault is not None:
            return fault
        total += len(name.encode()) + len(value.encode())
    if total > USER_PROPERTIES_BYTES_MAX:
        return Fault(
            "user_properties",
            "MESSAGE_PROPERTIES_TOO_LARGE",
            f"tag, keys and properties are {total} bytes; the limit is {USER_PROPERTIES_BYTES_MAX}",
        )
    return None


def _property_fault(name: str, value: str, delay_level_allowed: bool) -> Fault | None:
    if not name:
        return Fault("user_properties", "ILLEGAL_MESSAGE_PROPERTY_KEY", "a property name is empty")
    if name in RESERVED_PROPERTY_NAMES:
        if delay_level_allowed and name == DELAY_LEVEL_PROPERTY:
            return _delay_level_fault(value)
        return Fault(
            "user_properties",
            "ILLEGAL_MESSAGE_PROPERTY_KEY",
            f"{shown(name)} is a property name RocketMQ reserves",
        )
    if CONTROL_CHARACTERS.search(name) or CONTROL_CHARACTERS.search(value):
        return Fault(
            "user_properties",
            "ILLEGAL_MESSAGE_PROPERTY_KEY",
            f"property {shown(name)}: its name and value {_NO_CONTROL}",
        )
    return None


def _delay_level_fault(value: str) -> Fault | None:
    if (
        len(value) <= 2
        and value.isascii()
        and value.isdigit()
        and 1 <= int(value) <= DELAY_LEVEL_MAX
    ):
        return None
    return Fault(
        "user_properties",
        "ILLEGAL_DELIVERY_TIME",
        f"DELAY {shown(value)} is not a delay level (1..{DELAY_LEVEL_MAX})",
    )


def message_id_fault(message_id: str) -> Fault | None:
    if not message_id.strip():
        return Fault("message_id", "ILLEGAL_MESSAGE_ID", "is blank")
    if len(message_id) > MESSAGE_ID_LENGTH_MAX:
        return Fault(
            "message_id",
            "ILLEGAL_MESSAGE_ID",
            f"is {len(message_id)} characters; the limit is {MESSAGE_ID_LENGTH_MAX}",
        )
    if WHITESPACE.search(message_id):
        return Fault("message_id", "ILLEGAL_MESSAGE_ID", f"{shown(message_id)} contains whitespace")
    if CONTROL_CHARACTERS.search(message_id):
        return Fault("message_id", "ILLEGAL_MESSAGE_ID", f"{shown(message_id)} {_NO_CONTROL}")
    return None
