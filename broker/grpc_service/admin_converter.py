"""Admin requests and answers: validation of admin inputs, and store/broker types to
``rocketbox.admin.v1`` messages. Protobuf types of the admin API stop here and in the servicer."""

from __future__ import annotations

from collections.abc import Iterable

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.consumer_progress import QueueProgress
from broker.group_config import (
    GroupConfig,
    validate_group_name,
)
from broker.ha.replication import HAState
from broker.store.codec.message import (
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    HostAddress,
    MessageExt,
)
from broker.store.errors import MessageIllegalError
from broker.topic_config import (
    TopicConfig,
    TopicMessageType,
    validate_topic_name,
)
from rocketbox_api.admin.v1 import broker_admin_pb2 as apb
from rocketbox_api.message_rules import MESSAGE_ID_LENGTH_MAX

# A business key is stored inside the KEYS property, which is bounded by the properties limit.
QUERY_KEY_BYTES_MAX = 16 * 1024
QUERY_MAX_NUM_DEFAULT = 32
# Bodies in one answer; the broker sends at most grpc_receive_message_bytes_max (16 MiB), and the
# CLI receives at most 32 MiB. The first message is always included (a body is at most 4 MiB).
RESPONSE_BODIES_BYTES_MAX = 8 * 1024 * 1024

TO_PB_TYPE = {
    TopicMessageType.NORMAL: apb.MESSAGE_TYPE_NORMAL,
    TopicMessageType.FIFO: apb.MESSAGE_TYPE_FIFO,
    TopicMessageType.DELAY: apb.MESSAGE_TYPE_DELAY,
    TopicMessageType.TRANSACTION: apb.MESSAGE_TYPE_TRANSACTION,
    TopicMessageType.MIXED: apb.MESSAGE_TYPE_MIXED,
}
FROM_PB_TYPE = {v: k for k, v in TO_PB_TYPE.items()} | {
    apb.MESSAGE_TYPE_UNSPECIFIED: TopicMessageType.MIXED
}
TO_PB_CLIENT_TYPE = {
    pb.PUSH_CONSUMER: apb.CLIENT_TYPE_PUSH_CONSUMER,
    pb.SIMPLE_CONSUMER: apb.CLIENT_TYPE_SIMPLE_CONSUMER,
    pb.PULL_CONSUMER: apb.CLIENT_TYPE_PULL_CONSUMER,
}
_RESET_TARGETS = frozenset(
    {apb.RESET_TARGET_FIRST, apb.RESET_TARGET_LAST, apb.RESET_TARGET_TIMESTAMP}
)
# Properties StoredMessage shows as fields of their own, and the record's checksum.
_PROPERTIES_AS_FIELDS = frozenset(
    {
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_SHARDING_KEY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_CRC32,
    }
)


def validate_message_id(msg_id: str) -> None:
    if not msg_id.strip():
        raise MessageIllegalError("message_id", f"1..{MESSAGE_ID_LENGTH_MAX} characters", "blank")
    if len(msg_id) > MESSAGE_ID_LENGTH_MAX:
        raise MessageIllegalError(
            "message_id", f"{MESSAGE_ID_LENGTH_MAX} characters", f"is {len(msg_id)} long"
        )
    if not msg_id.isprintable():
        raise MessageIllegalError("message_id", "no control characters", f"{msg_id!r}")


def validate_reset(request: apb.ResetOffsetRequest) -> None:
    validate_group_name(request.group)
    validate_topic_name(request.topic, allow_system=True)
    if request.to not in _RESET_TARGETS:
        raise MessageIllegalError("to", "FIRST, LAST or TIMESTAMP", f"is {request.to}")
    timestamp_wanted = request.to == apb.RESET_TARGET_TIMESTAMP
    if request.HasField("timestamp_ms") != timestamp_wanted:
        raise MessageIllegalError(
            "timestamp_ms",
            "required with RESET_TARGET_TIMESTAMP, refused with the others",
            "is given" if request.HasField("timestamp_ms") else "is missing",
        )
    if request.timestamp_ms < 0:
        raise MessageIllegalError("timestamp_ms", ">= 0", f"is {request.timestamp_ms}")


def within_budget(found: Iterable[MessageExt]) -> tuple[list[apb.StoredMessage], bool]:
    """The messages whose bodies fit in RESPONSE_BODIES_BYTES_MAX (the first always), and
    whether some were left out."""
    out: list[apb.StoredMessage] = []
    body_bytes = 0
    for msg in found:
        body_bytes += len(msg.body)
        if out and body_bytes > RESPONSE_BODIES_BYTES_MAX:
            return out, True
        out.append(to_pb_stored_message(msg))
    return out, False


# -- converters ------------------------------------------------------------------------------
def to_pb_topic(tc: TopicConfig) -> apb.Topic:
    return apb.Topic(
        name=tc.topic_name, queue_nums=tc.queue_nums, message_type=TO_PB_TYPE[tc.message_type]
    )


def to_pb_group(gc: GroupConfig) -> apb.Group:
    return apb.Group(
        name=gc.group_name,
        orderly=gc.consume_message_orderly,
        retry_max_times=gc.retry_max_times,
        broadcast=gc.consume_broadcast_enable,
    )


def format_host(host: HostAddress) -> str:
    ip, port = host
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def to_pb_topic_progress(topic: str, queues: Iterable[QueueProgress]) -> apb.GroupTopicProgress:
    return apb.GroupTopicProgress(
        topic=topic,
        queues=[
            apb.GroupQueueProgress(
                queue_id=q.queue_id,
                min_queue_offset=q.min_queue_offset,
                max_queue_offset=q.max_queue_offset,
                consume_offset=q.consume_offset,
                lag=q.lag,
                inflight_count=q.inflight_count,
            )
            for q in queues
        ],
    )


def to_pb_stored_message(msg: MessageExt) -> apb.StoredMessage:
    props = msg.properties
    user = msg.user_properties
    out = apb.StoredMessage(
        message_id=msg.msg_id or "",
        topic=msg.topic,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        phy_offset=msg.commit_log_offset,
        store_size_bytes=msg.store_size,
        store_timestamp_ms=msg.store_timestamp_ms,
        born_timestamp_ms=msg.born_timestamp_ms,
        born_host=format_host(msg.born_host),
        store_host=format_host(msg.store_host),
        keys=msg.keys,
        user_properties=user,
        system_properties={
            k: v for k, v in props.items() if k not in user and k not in _PROPERTIES_AS_FIELDS
        },
        reconsume_times=msg.reconsume_times,
        body=msg.body,
    )
    if msg.tags is not None:
        out.tag = msg.tags
    if PROPERTY_SHARDING_KEY in props:
        out.message_group = props[PROPERTY_SHARDING_KEY]
    deliver_ms = props.get(PROPERTY_TIMER_DELIVER_MS)
    if deliver_ms is not None and deliver_ms.isdigit():
        out.delivery_timestamp_ms = int(deliver_ms)
    return out


def to_pb_ha_state(ha: HAState) -> apb.GetHAStateResponse:
    return apb.GetHAStateResponse(
        role=ha.role.value,
        max_phy_offset=ha.max_phy_offset,
        ha_address=ha.ha_address or "",
        slaves=[
            apb.HASlave(address=s.address, ack_offset=s.ack_offset, lag_bytes=s.lag_bytes)
            for s in ha.slaves
        ],
        master_ha_address=ha.master_ha_address or "",
        master_connected=ha.master_connected,
        behind_master_bytes=ha.behind_master_bytes,
    )
