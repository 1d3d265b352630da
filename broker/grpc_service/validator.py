"""Protocol validation of messages sent over apache.rocketmq.v2 (the proxy's GrpcValidator and
SendMessageActivity checks), and of topic and group names.

The rules are the table the sidecar checks too (rocketbox_api/message_rules.py), so that what a
sidecar spooled is taken when it is sent again; this broker's own limits (its body size and
delay) flow in. Each check raises ProtocolError with the proxy's code and a message that names
the field and the limit (docs/rocketmq-protocol.md §5.4, §8.1). Nothing is stored for a request that
fails here. Beyond the table, what only the wire has: a message's type must agree with its
properties (FIFO ⇔ message_group, DELAY ⇔ a delivery time or a DELAY level), its Timestamps must be
well-formed, and its queue_id one of the topic's queues. Bounds on the rest of a request are in
request_limits.py.
"""

from __future__ import annotations

import time

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.grpc_service.protocol import Code, ProtocolError
from broker.grpc_service.request_limits import timestamp_ms_of
from broker.store.codec.message import SYSTEM_PROPERTY_NAMES
from broker.topic_config import TopicMessageType
from rocketbox_api.message_rules import (
    DELAY_LEVEL_PROPERTY,
    RESERVED_PROPERTY_NAMES,
    Fault,
    group_fault,
    message_fault,
    topic_fault,
)

# What the store manages is never a client's to set (the DELAY level aside, see the table).
assert SYSTEM_PROPERTY_NAMES <= RESERVED_PROPERTY_NAMES, "a store property is not reserved"

_TYPE_OF = {
    pb.NORMAL: TopicMessageType.NORMAL,
    pb.FIFO: TopicMessageType.FIFO,
    pb.DELAY: TopicMessageType.DELAY,
    pb.TRANSACTION: TopicMessageType.TRANSACTION,
}
# The table names fields as the sidecar's API does; the wire names one otherwise.
_WIRE_FIELD = {"delivery_time": "delivery_timestamp"}


def _refusal(fault: Fault) -> ProtocolError:
    field = _WIRE_FIELD.get(fault.field, fault.field)
    return ProtocolError(Code.Value(fault.code), f"{field}: {fault.reason}")


def validate_topic(name: str, allow_dead_letter: bool = False) -> None:
    """Sends go to application topics only; consumers may also read ``%DLQ%<group>``."""
    fault = topic_fault(name, allow_dead_letter)
    if fault is not None:
        raise _refusal(fault)


def validate_group(name: str) -> None:
    fault = group_fault(name)
    if fault is not None:
        raise _refusal(fault)


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
    """The message's type, once every check passed: its Timestamps well-formed, the table's
    rules (rocketbox_api/message_rules.py) with this broker's body and delay limits, then what
    only the wire has. ``queue_nums``: the topic's queue count, which ``queue_id`` must be below.
    The topic is the caller's to check (validate_topic), once a request: every message of a
    request has the same."""
    sp = msg.system_properties
    if sp.HasField("born_timestamp"):
        timestamp_ms_of(sp.born_timestamp, "born_timestamp", Code.BAD_REQUEST)
    deliver_ms = None
    if sp.HasField("delivery_timestamp"):
        deliver_ms = timestamp_ms_of(
            sp.delivery_timestamp, "delivery_timestamp", Code.ILLEGAL_DELIVERY_TIME
        )
    fault = message_fault(
        body_bytes=len(msg.body),
        tag=sp.tag if sp.HasField("tag") else None,
        keys=sp.keys,
        message_group=sp.message_group if sp.HasField("message_group") else None,
        delivery_ms=deliver_ms,
        properties=msg.user_properties,
        message_id=sp.message_id,
        now_ms=now_ms if now_ms is not None else time.time_ns() // 1_000_000,
        body_bytes_max=body_bytes_max,
        delivery_ahead_ms_max=delay_ms_max,
        delay_level_allowed=True,
    )
    if fault is not None:
        raise _refusal(fault)
    if not 0 <= sp.queue_id < queue_nums:
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"system_properties.queue_id {sp.queue_id} is not a queue of topic "
            f"{msg.topic.name!r} (0..{queue_nums - 1})",
        )
    kind = message_type_of(msg)
    _validate_type(msg, kind)
    return kind


def _validate_type(msg: pb.Message, kind: TopicMessageType) -> None:
    """A message's type agrees with its properties, as the clients build them
    (docs/rocketmq-protocol.md §5.1)."""
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
