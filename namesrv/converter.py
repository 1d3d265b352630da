"""The NameServer's one converter: rocketbox.namesrv.v1 messages ↔ the route table's types, with
every field checked against its limit on the way in (RegistrationRefusedError names the field).
Protobuf types stop here."""

from __future__ import annotations

from namesrv.errors import RegistrationRefusedError
from namesrv.route_info import (
    MASTER_ID,
    BrokerLiveInfo,
    BrokerRegistration,
    Permission,
    QueueData,
    TopicRouteData,
)
from rocketbox_api.names import NAME_CHARACTERS, NAME_PATTERN, TOPIC_LENGTH_MAX, is_topic_name
from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb

# Cluster and broker names: the clients' charset, as long as a topic's.
BROKER_NAME_LENGTH_MAX = TOPIC_LENGTH_MAX
BROKER_ID_MAX = 1024
# HOST:PORT: a DNS name (253) and a port.
ADDRESS_LENGTH_MAX = 261
TOPICS_PER_REGISTRATION_MAX = 65_536
QUEUE_NUMS_MAX = 1024  # the broker's own limit (broker/topic_config.py)

ROLES = {
    npb.BROKER_ROLE_ASYNC_MASTER: "ASYNC_MASTER",
    npb.BROKER_ROLE_SYNC_MASTER: "SYNC_MASTER",
    npb.BROKER_ROLE_SLAVE: "SLAVE",
}
ROLE_VALUES = {name: value for value, name in ROLES.items()}
PERMISSIONS = {
    npb.PERMISSION_READ: Permission.READ,
    npb.PERMISSION_WRITE: Permission.WRITE,
    npb.PERMISSION_READ_WRITE: Permission.READ_WRITE,
}
PERMISSION_VALUES = {perm: value for value, perm in PERMISSIONS.items()}
MESSAGE_TYPES = {
    npb.MESSAGE_TYPE_NORMAL: "NORMAL",
    npb.MESSAGE_TYPE_FIFO: "FIFO",
    npb.MESSAGE_TYPE_DELAY: "DELAY",
    npb.MESSAGE_TYPE_TRANSACTION: "TRANSACTION",
    npb.MESSAGE_TYPE_MIXED: "MIXED",
}
MESSAGE_TYPE_VALUES = {name: value for value, name in MESSAGE_TYPES.items()}


def _refuse(field: str, why: str) -> RegistrationRefusedError:
    return RegistrationRefusedError(f"{field}: {why}")


def check_name(value: str, field: str) -> str:
    if not 1 <= len(value) <= BROKER_NAME_LENGTH_MAX or not NAME_PATTERN.fullmatch(value):
        raise _refuse(
            field,
            f"{value[:BROKER_NAME_LENGTH_MAX]!r} is not 1..{BROKER_NAME_LENGTH_MAX} characters "
            f"of {NAME_CHARACTERS}",
        )
    return value


def check_address(value: str, field: str, optional: bool = False) -> str | None:
    """HOST:PORT ("[::1]:9876" for IPv6) with a port in 1..65535."""
    if optional and not value:
        return None
    host, sep, port = value.rpartition(":")
    if (
        len(value) > ADDRESS_LENGTH_MAX
        or not sep
        or not host
        or not port.isdigit()
        or not 0 < int(port) <= 65535
    ):
        raise _refuse(
            field,
            f"{value[:ADDRESS_LENGTH_MAX]!r} is not HOST:PORT (at most {ADDRESS_LENGTH_MAX} "
            "characters, port 1..65535)",
        )
    return value


def check_broker_id(value: int, field: str = "broker_id") -> int:
    if not 0 <= value <= BROKER_ID_MAX:
        raise _refuse(field, f"{value} is outside 0..{BROKER_ID_MAX}")
    return value


def check_topic(value: str, field: str = "topic") -> str:
    if not is_topic_name(value) or not value:
        raise _refuse(
            field,
            f"{value[:TOPIC_LENGTH_MAX]!r} is not 1..{TOPIC_LENGTH_MAX} characters of "
            f"{NAME_CHARACTERS}",
        )
    return value


def registration_of(request: npb.RegisterBrokerRequest) -> BrokerRegistration:
    broker_name = check_name(request.broker_name, "broker_name")
    broker_id = check_broker_id(request.broker_id)
    role = ROLES.get(request.role)
    if role is None:
        raise _refuse("role", "ASYNC_MASTER, SYNC_MASTER or SLAVE")
    if (broker_id == MASTER_ID) != (role != "SLAVE"):
        raise _refuse(
            "role", f"{role} with broker_id {broker_id}: id 0 is a master's, 1+ a SLAVE's"
        )
    if len(request.topics) > TOPICS_PER_REGISTRATION_MAX:
        raise _refuse(
            "topics", f"{len(request.topics)} topics (limit {TOPICS_PER_REGISTRATION_MAX})"
        )
    if request.max_phy_offset < 0:
        raise _refuse("max_phy_offset", f"{request.max_phy_offset} is negative")
    address = check_address(request.broker_addr, "broker_addr")
    assert address is not None
    return BrokerRegistration(
        cluster_name=check_name(request.cluster_name, "cluster_name"),
        broker_name=broker_name,
        broker_id=broker_id,
        broker_addr=address,
        ha_server_addr=check_address(request.ha_server_addr, "ha_server_addr", optional=True),
        role=role,
        topics=tuple(
            _queue_data(t, broker_name, f"topics[{i}]") for i, t in enumerate(request.topics)
        ),
        max_phy_offset=request.max_phy_offset,
        data_version=(request.data_version.timestamp_ms, request.data_version.counter),
    )


def _queue_data(t: npb.TopicConfig, broker_name: str, field: str) -> QueueData:
    check_topic(t.topic_name, f"{field}.topic_name")
    if not 1 <= t.queue_nums <= QUEUE_NUMS_MAX:
        raise _refuse(f"{field}.queue_nums", f"{t.queue_nums} is outside 1..{QUEUE_NUMS_MAX}")
    perm = PERMISSIONS.get(t.perm)
    if perm is None:
        raise _refuse(f"{field}.perm", "READ, WRITE or READ_WRITE")
    message_type = MESSAGE_TYPES.get(t.message_type)
    if message_type is None:
        raise _refuse(f"{field}.message_type", "NORMAL, FIFO, DELAY, TRANSACTION or MIXED")
    return QueueData(t.topic_name, broker_name, t.queue_nums, perm, message_type)


def route_to_pb(route: TopicRouteData) -> npb.GetRouteInfoByTopicResponse:
    return npb.GetRouteInfoByTopicResponse(
        queue_datas=[
            npb.QueueData(
                broker_name=q.broker_name,
                queue_nums=q.queue_nums,
                perm=PERMISSION_VALUES[q.perm],
                message_type=MESSAGE_TYPE_VALUES[q.message_type],
            )
            for q in route.queue_datas
        ],
        broker_datas=[
            npb.BrokerData(
                cluster_name=b.cluster_name, broker_name=b.broker_name, broker_addrs=b.broker_addrs
            )
            for b in route.broker_datas
        ],
    )


def broker_info_to_pb(live: BrokerLiveInfo) -> npb.BrokerInfo:
    reg = live.registration
    return npb.BrokerInfo(
        cluster_name=reg.cluster_name,
        broker_name=reg.broker_name,
        broker_id=reg.broker_id,
        broker_addr=reg.broker_addr,
        ha_server_addr=reg.ha_server_addr or "",
        role=ROLE_VALUES[reg.role],
        max_phy_offset=reg.max_phy_offset,
        last_update_timestamp_ms=live.last_update_timestamp_ms,
        data_version=npb.DataVersion(timestamp_ms=reg.data_version[0], counter=reg.data_version[1]),
    )
