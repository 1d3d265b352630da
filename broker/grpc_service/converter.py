"""apache.rocketmq.v2 messages to and from the store's model; protobuf types stop here."""

from __future__ import annotations

import hashlib
import ipaddress
import time

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.send_message import InboundMessage
from broker.store.codec.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    HostAddress,
    MessageExt,
    MessageExtBrokerInner,
)
from broker.topic_config import TopicMessageType
from rocketbox_api.message_rules import DELAY_LEVEL_PROPERTY

SECOND_MS = 1000
MINUTE_MS = 60 * SECOND_MS
# RocketMQ's messageDelayLevel "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".
DELAY_LEVELS_MS = (
    1 * SECOND_MS,
    5 * SECOND_MS,
    10 * SECOND_MS,
    30 * SECOND_MS,
    *(m * MINUTE_MS for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 60, 120)),
)


def timestamp_ms(ts: Timestamp) -> int:
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def to_timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(d: Duration) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def to_duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


# One entry per client connection seen (a parse per request cost more than the rest of the
# conversion); cleared when full, so a broker that sees many short connections stays bounded.
PEER_HOSTS_CACHED_MAX = 4_096
_peer_hosts: dict[str, HostAddress] = {}


def peer_host(peer: str) -> HostAddress:
    """gRPC's ``context.peer()`` ("ipv4:127.0.0.1:5555", "ipv6:[::1]:5555") as (ip, port)."""
    host = _peer_hosts.get(peer)
    if host is None:
        if len(_peer_hosts) >= PEER_HOSTS_CACHED_MAX:
            _peer_hosts.clear()
        host = _peer_hosts[peer] = _parse_peer(peer)
    return host


def _parse_peer(peer: str) -> HostAddress:
    _kind, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        return (host, int(port))
    except ValueError:
        return ("0.0.0.0", 0)  # noqa: S104 - unknown peer (unix socket): a placeholder


def to_inbound(
    msg: pb.Message, born_host: HostAddress, kind: TopicMessageType, now_ms: int | None = None
) -> InboundMessage:
    """The validated wire message (of type ``kind``) as a store message for its real topic."""
    sp = msg.system_properties
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    props = dict(msg.user_properties)
    props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    if sp.HasField("tag"):
        props[PROPERTY_TAGS] = sp.tag
    if sp.keys:
        props[PROPERTY_KEYS] = " ".join(sp.keys)
    group = sp.message_group if sp.HasField("message_group") else None
    if group is not None:
        props[PROPERTY_SHARDING_KEY] = group
    deliver_ms: int | None = None
    if sp.HasField("delivery_timestamp"):
        deliver_ms = timestamp_ms(sp.delivery_timestamp)
    level = props.pop(DELAY_LEVEL_PROPERTY, None)
    if level is not None and deliver_ms is None:
        deliver_ms = now + DELAY_LEVELS_MS[int(level) - 1]
        props[PROPERTY_DELAY_TIME_LEVEL] = level
    if deliver_ms is not None:
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    born_ms = timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else now
    inner = MessageExtBrokerInner(
        topic=msg.topic.name,
        body=bytes(msg.body),
        properties=props,
        born_timestamp_ms=born_ms,
        born_host=born_host,
    )
    return InboundMessage(inner, kind, sp.message_id, group, deliver_ms)


def message_type_of_stored(msg: MessageExt) -> int:
    props = msg.properties
    if PROPERTY_SHARDING_KEY in props:
        return int(pb.FIFO)
    if PROPERTY_TIMER_DELIVER_MS in props:
        return int(pb.DELAY)
    return int(pb.NORMAL)


def to_pb_message(
    msg: MessageExt,
    *,
    topic: str | None = None,
    message_type: int | None = None,
    namespace: str = "",
) -> pb.Message:
    """A stored message as the clients expect to receive it (docs/rocketmq-protocol.md §5.1, §5.3):
    MD5 digest in upper-case hex and an explicit IDENTITY encoding, without which the Python client
    drops it."""
    props = msg.properties
    sp = pb.SystemProperties(
        message_id=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(msg.body).hexdigest().upper()),  # noqa: S324 - the protocol's digest, not security
        body_encoding=pb.IDENTITY,
        message_type=message_type if message_type is not None else message_type_of_stored(msg),
        born_timestamp=to_timestamp(msg.born_timestamp_ms),
        born_host=msg.born_host[0],
        store_timestamp=to_timestamp(msg.store_timestamp_ms),
        store_host=f"{msg.store_host[0]}:{msg.store_host[1]}",
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
    )
    if PROPERTY_TAGS in props:
        sp.tag = props[PROPERTY_TAGS]
    sp.keys.extend(msg.keys)
    if PROPERTY_SHARDING_KEY in props:
        sp.message_group = props[PROPERTY_SHARDING_KEY]
    if PROPERTY_TIMER_DELIVER_MS in props:
        sp.delivery_timestamp.CopyFrom(to_timestamp(int(props[PROPERTY_TIMER_DELIVER_MS])))
    return pb.Message(
        topic=pb.Resource(resource_namespace=namespace, name=topic or msg.topic),
        user_properties=msg.user_properties,
        system_properties=sp,
        body=msg.body,
    )
