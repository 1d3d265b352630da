"""Protocol validation of messages sent over apache.rocketmq.v2 (the proxy's GrpcValidator and
SendMessageActivity checks), and of topic and group names.

Each check raises ProtocolError with the proxy's code and a message that names the field and the
limit (spec §5.4, §8.1). Nothing is stored for a request that fails here. Beyond the proxy's
checks: a message's type must agree with its properties (FIFO ⇔ message_group, DELAY ⇔ a
delivery time), its Timestamps must be well-formed, its delivery time no further back than
DELIVERY_TIME_PAST_MS_MAX, and its queue_id one of the topic's queues. Bounds on the rest of a
request are in request_limits.py.
"""

from __future__ import annotations

import re
import time

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.group_config import DLQ_TOPIC_PREFIX
from broker.grpc_service.protocol import Code, ProtocolError, shown
from broker.grpc_service.request_limits import timestamp_ms_of, validate_message_id
from broker.store.codec.message import SYSTEM_PROPERTY_NAMES
from broker.topic_config import SYSTEM_TOPIC_PREFIXES, TopicMessageType
from rocketbox_api.names import (
    GROUP_LENGTH_MAX,
    NAME_CHARACTERS,
    TOPIC_LENGTH_MAX,
    is_group_name,
    is_topic_name,
)

CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MESSAGE_GROUP_BYTES_MAX = 64
USER_PROPERTIES_COUNT_MAX = 128
# A delay message whose time has passed is delivered at once. One spooled by a sidecar through a
# long broker outage may be that late; one from years ago is a broken client.
DELIVERY_TIME_PAST_MS_MAX = 30 * 24 * 3600 * 1000
PROPERTIES_BYTES_MAX = 16 * 1024
# Names RocketMQ reserves for itself besides the store's (MessageConst.STRING_HASH_SET, abridged
# to those a client could plausibly collide with).
# DELAY is the one store property a client may set: RocketMQ's 18 delay levels (1..18).
DELAY_LEVEL_PROPERTY = "DELAY"
DELAY_LEVEL_MAX = 18
RESERVED_PROPERTY_NAMES = (SYSTEM_PROPERTY_NAMES - {DELAY_LEVEL_PROPERTY}) | {
    "WAIT",
    "RETRY_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "MSG_REGION",
    "TRACE_ON",
    "MAX_OFFSET",
    "MIN_OFFSET",
    "BUYER_ID",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "__STARTDELIVERTIME",
}

_TYPE_OF = {
    pb.NORMAL: TopicMessageType.NORMAL,
    pb.FIFO: TopicMessageType.FIFO,
    pb.DELAY: TopicMessageType.DELAY,
    pb.TRANSACTION: TopicMessageType.TRANSACTION,
}


def validate_topic(name: str, allow_dead_letter: bool = False) -> None:
    """Sends go to application topics only; consumers may also read ``%DLQ%<group>``."""
    if not is_topic_name(name):
        raise ProtocolError(Code.ILLEGAL_TOPIC, _topic_name_fault(name))
    if name.startswith(SYSTEM_TOPIC_PREFIXES) and not (
        allow_dead_letter and name.startswith(DLQ_TOPIC_PREFIX)
    ):
        raise ProtocolError(Code.ILLEGAL_TOPIC, f"topic {name!r} is a system topic")


def validate_group(name: str) -> None:
    if not is_group_name(name):
        raise ProtocolError(
            Code.ILLEGAL_CONSUMER_GROUP,
            f"group {shown(name)}: 1..{GROUP_LENGTH_MAX} characters of {NAME_CHARACTERS}",
        )


def _topic_name_fault(name: str) -> str:
    """How a name that is_topic_name refused breaks the rule."""
    if not name:
        return f"topic is empty (1..{TOPIC_LENGTH_MAX} characters)"
    if len(name) > TOPIC_LENGTH_MAX:
        return f"topic is {len(name)} characters (limit {TOPIC_LENGTH_MAX})"
    return f"topic {shown(name)}: only characters {NAME_CHARACTERS}"


def message_type_of(msg: pb.Message) -> TopicMessageType:
    kind = _TYPE_OF.get(msg.system_properties.message_type)
    if kind is None:
        raise ProtocolError(
            Code.BAD_REQUEST,
            "message_type: one of NORMAL, FIFO, DELAY, TRANSACTION "
            f"(got {_type_name(msg.system_properties.message_type)})",
        )
    return kind


def _type_name(value: int) -> str:
    try:
        return str(pb.MessageType.Name(value))
    except ValueError:  # an enum value this protocol version does not know
        return str(value)


def validate_message(
    msg: pb.Message,
    body_bytes_max: int,
    delay_ms_max: int,
    queue_nums: int,
    now_ms: int | None = None,
) -> TopicMessageType:
    """The message's type, once every check passed. ``queue_nums``: the topic's queue count,
    which ``queue_id`` must be below. The topic is the caller's to check (validate_topic), once
    a request: every message of a request has the same."""
    sp = msg.system_properties
    validate_message_id(sp.message_id)
    if not msg.body:
        raise ProtocolError(Code.MESSAGE_BODY_EMPTY, "body is empty (1 byte at least)")
    if len(msg.body) > body_bytes_max:
        raise ProtocolError(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"body is {len(msg.body)} bytes (limit message_size_bytes_max={body_bytes_max})",
        )
    if not 0 <= sp.queue_id < queue_nums:
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"system_properties.queue_id {sp.queue_id} is not a queue of topic "
            f"{msg.topic.name!r} (0..{queue_nums - 1})",
        )
    _validate_properties(msg)
    kind = message_type_of(msg)
    _validate_type(msg, kind)
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    if sp.HasField("born_timestamp"):
        timestamp_ms_of(sp.born_timestamp, "born_timestamp", Code.BAD_REQUEST)
    if sp.HasField("delivery_timestamp"):
        deliver_ms = timestamp_ms_of(
            sp.delivery_timestamp, "delivery_timestamp", Code.ILLEGAL_DELIVERY_TIME
        )
        if deliver_ms > now + delay_ms_max:
            raise ProtocolError(
                Code.ILLEGAL_DELIVERY_TIME,
                f"delivery_timestamp is {(deliver_ms - now) // 1000} s ahead "
                f"(limit delay_ms_max={delay_ms_max})",
            )
        if deliver_ms < now - DELIVERY_TIME_PAST_MS_MAX:
            raise ProtocolError(
                Code.ILLEGAL_DELIVERY_TIME,
                f"delivery_timestamp is {(now - deliver_ms) // 1000} s in the past "
                f"(limit DELIVERY_TIME_PAST_MS_MAX={DELIVERY_TIME_PAST_MS_MAX})",
            )
    return kind


def _validate_type(msg: pb.Message, kind: TopicMessageType) -> None:
    """A message's type agrees with its properties, as the clients build them (spec §5.1)."""
    sp = msg.system_properties
    has_group = sp.HasField("message_group")
    if kind is TopicMessageType.FIFO and not has_group:
        raise ProtocolError(
            Code.ILLEGAL_MESSAGE_GROUP, "message_group is required for a FIFO message"
        )
    if has_group and kind is not TopicMessageType.FIFO:
        raise ProtocolError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"message_group is set on a {kind.value} message (only FIFO messages have one)",
        )
    has_delivery_time = sp.HasField("delivery_timestamp")
    if kind is TopicMessageType.DELAY and not (
        has_delivery_time or DELAY_LEVEL_PROPERTY in msg.user_properties
    ):
        raise ProtocolError(
            Code.ILLEGAL_DELIVERY_TIME,
            "delivery_timestamp (or a DELAY level property) is required for a DELAY message",
        )
    if has_delivery_time and kind is not TopicMessageType.DELAY:
        raise ProtocolError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"delivery_timestamp is set on a {kind.value} message (only DELAY messages have one)",
        )


def _validate_properties(msg: pb.Message) -> None:
    sp = msg.system_properties
    props_bytes = 0
    if sp.HasField("tag"):
        tag = sp.tag
        if not tag.strip() or "|" in tag or CONTROL_CHARACTERS.search(tag):
            raise ProtocolError(
                Code.ILLEGAL_MESSAGE_TAG,
                f"tag {shown(tag)}: not blank, no '|', no control characters",
            )
        props_bytes += len(tag.encode())
    for key in sp.keys:
        if not key.strip() or CONTROL_CHARACTERS.search(key) or " " in key:
            raise ProtocolError(
                Code.ILLEGAL_MESSAGE_KEY,
                f"key {shown(key)}: not blank, no spaces or control characters",
            )
        props_bytes += len(key.encode())
    if sp.HasField("message_group"):
        group = sp.message_group
        if (
            not group.strip()
            or len(group.encode()) >= MESSAGE_GROUP_BYTES_MAX
            or CONTROL_CHARACTERS.search(group)
        ):
            raise ProtocolError(
                Code.ILLEGAL_MESSAGE_GROUP,
                f"message_group {shown(group)}: 1..{MESSAGE_GROUP_BYTES_MAX - 1} bytes, "
                "no control characters",
            )
    if len(msg.user_properties) > USER_PROPERTIES_COUNT_MAX:
        raise ProtocolError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"user_properties has {len(msg.user_properties)} entries "
            f"(limit {USER_PROPERTIES_COUNT_MAX})",
        )
    for name, value in msg.user_properties.items():
        if not name or name in RESERVED_PROPERTY_NAMES:
            raise ProtocolError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {shown(name)} is a reserved name",
            )
        if CONTROL_CHARACTERS.search(name) or CONTROL_CHARACTERS.search(value):
            raise ProtocolError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {shown(name)}: no control characters in name or value",
            )
        if name == DELAY_LEVEL_PROPERTY and not (
            len(value) <= 2
            and value.isascii()
            and value.isdigit()
            and 1 <= int(value) <= DELAY_LEVEL_MAX
        ):
            raise ProtocolError(
                Code.ILLEGAL_DELIVERY_TIME,
                f"user property DELAY {shown(value)}: a delay level 1..{DELAY_LEVEL_MAX}",
            )
        props_bytes += len(name.encode()) + len(value.encode())
    if props_bytes > PROPERTIES_BYTES_MAX:
        raise ProtocolError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"tag, keys and user properties are {props_bytes} bytes (limit {PROPERTIES_BYTES_MAX})",
        )
