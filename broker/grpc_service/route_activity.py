"""Routes: QueryRoute's answer, and the queues QueryAssignment hands out.

A stand-alone broker (no ``namesrv_addr``) answers with its own queues alone. A broker of a
cluster answers as a RocketMQ 5 proxy does: the topic's queues across every group of its cluster
holding it, as the NameServers know them (asked in turn until one answers, the answer cached
ROUTE_CACHE_TTL_MS), each queue carrying its own group's name and its broker's endpoints, so the
clients spread sends over the groups and reach each broker directly. The queues come interleaved
by group (``interleaved``), so a client's retry on the next queue goes to another group, as
RocketMQ's producers avoid the broker that just failed. A topic the cluster does
not know is resolved here (auto-created when the broker allows it, TOPIC_NOT_FOUND otherwise),
registered at once, and asked for again. With no NameServer answering, the broker answers with
its own queues (logged, at most a line per interval): clients keep working on it.

A group whose master is gone from the NameServers while a slave of it is registered is routed at
that slave, READ only (RocketMQ's slave read). What to advertise follows the official clients:
the Python client's QueueSelector keeps, for producers, queues that are writable AND on a broker
whose id is 0 (``is_master_broker``), and for simple consumers queues that are readable AND on a
broker with id 0; it drops every queue of another id, a consumer's too. So the slave's queues
carry broker id 0 (MASTER_ID) with permission READ: consumers keep reading them, and producers
never pick them, which is what a slave that refuses writes needs.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.broker_outer_api import BrokerOuterAPI, NamesrvUnreachableError
from broker.config import MASTER_ID
from broker.errors import TopicNotFoundError
from broker.grpc_service.protocol import OK_STATUS, Code, ProtocolError, status
from broker.grpc_service.request_limits import validate_namespace
from broker.grpc_service.validator import validate_topic
from broker.send_message import SendMessageService
from broker.store.errors import MessageIllegalError
from broker.topic_config import TopicConfig, TopicMessageType
from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb
from rocketbox_api.rate_limited_log import RateLimitedLog

LOG = logging.getLogger(__name__)

# As a RocketMQ 5 proxy caches the NameServer's routes: a few seconds, so that a group that
# comes or goes is seen soon, and a QueryRoute storm costs one NameServer call per topic.
ROUTE_CACHE_TTL_MS = 3_000
ROUTE_CACHE_TOPICS_MAX = 4096

ACCEPTS = {
    TopicMessageType.NORMAL: [pb.NORMAL],
    TopicMessageType.FIFO: [pb.FIFO],
    TopicMessageType.DELAY: [pb.DELAY],
    TopicMessageType.TRANSACTION: [pb.TRANSACTION],
    TopicMessageType.MIXED: [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}
_MESSAGE_TYPES = {
    npb.MESSAGE_TYPE_NORMAL: TopicMessageType.NORMAL,
    npb.MESSAGE_TYPE_FIFO: TopicMessageType.FIFO,
    npb.MESSAGE_TYPE_DELAY: TopicMessageType.DELAY,
    npb.MESSAGE_TYPE_TRANSACTION: TopicMessageType.TRANSACTION,
}
_PERMISSIONS = {
    npb.PERMISSION_READ: pb.READ,
    npb.PERMISSION_WRITE: pb.WRITE,
    npb.PERMISSION_READ_WRITE: pb.READ_WRITE,
}


@dataclass(frozen=True, slots=True)
class GroupQueues:
    """One group's queues of a topic, and the broker that serves them."""

    broker_name: str
    address: str  # HOST:PORT
    permission: pb.Permission
    queue_nums: int
    message_type: TopicMessageType


def endpoints_of(address: str) -> pb.Endpoints:
    """HOST:PORT as a route's endpoints; a host name is DOMAIN_NAME (the official clients dial
    ``ipv4:<host>`` for IPv4, which a name is not)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        scheme = pb.IPv6 if ipaddress.ip_address(host).version == 6 else pb.IPv4
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


def groups_of(route: npb.GetRouteInfoByTopicResponse, cluster_name: str) -> list[GroupQueues]:
    """The route's groups of ``cluster_name`` that have a live broker, by broker name."""
    brokers = {b.broker_name: b for b in route.broker_datas if b.cluster_name == cluster_name}
    groups = []
    for q in route.queue_datas:
        data = brokers.get(q.broker_name)
        if data is None or not data.broker_addrs:
            continue
        permission = _PERMISSIONS.get(q.perm, pb.READ_WRITE)
        address = data.broker_addrs.get(MASTER_ID)
        if address is None:  # the master is gone: its lowest slave serves reads
            address = data.broker_addrs[min(data.broker_addrs)]
            permission = pb.READ
        message_type = _MESSAGE_TYPES.get(q.message_type, TopicMessageType.MIXED)
        groups.append(GroupQueues(q.broker_name, address, permission, q.queue_nums, message_type))
    return groups


def interleaved(per_group: list[list[pb.MessageQueue]]) -> list[pb.MessageQueue]:
    """Each group's first queue, then each group's second, and so on: neighbours in the route
    are on different groups wherever the queue counts allow. The official clients retry a
    failed send on the route's next queue, so a retry leaves the group that failed it."""
    longest = max((len(qs) for qs in per_group), default=0)
    return [qs[i] for i in range(longest) for qs in per_group if i < len(qs)]


class ClusterRoute:
    """A topic's groups in the broker's cluster, from the NameServers, cached."""

    def __init__(self, outer_api: BrokerOuterAPI, cluster_name: str) -> None:
        self._outer_api = outer_api
        self._cluster_name = cluster_name
        self._cache: dict[str, tuple[float, list[GroupQueues]]] = {}

    async def groups(self, topic: str, fresh: bool = False) -> list[GroupQueues]:
        """Empty when the cluster holds no queue of ``topic``; NamesrvUnreachableError."""
        now = time.monotonic()
        cached = self._cache.get(topic)
        if cached is not None and not fresh and now < cached[0]:
            return cached[1]
        route = await self._outer_api.get_route_info_by_topic(topic)
        groups = groups_of(route, self._cluster_name) if route is not None else []
        self._cache.pop(topic, None)
        if groups:
            while len(self._cache) >= ROUTE_CACHE_TOPICS_MAX:
                del self._cache[next(iter(self._cache))]  # the oldest entry
            self._cache[topic] = (now + ROUTE_CACHE_TTL_MS / 1000, groups)
        return groups


class RouteActivity:
    def __init__(
        self,
        sends: SendMessageService,
        broker: pb.Broker,
        cluster: ClusterRoute | None = None,
        register_now: Callable[[], Awaitable[bool]] | None = None,
        create_on_peers: Callable[[TopicConfig], Awaitable[None]] | None = None,
    ) -> None:
        """``create_on_peers``: a topic auto-created here is created on the cluster's other
        masters too (broker/cluster_topics.py)."""
        self._create_on_peers = create_on_peers
        self._sends = sends
        self._broker = broker
        self._cluster = cluster
        self._register_now = register_now
        self._unreachable = RateLimitedLog(LOG, logging.WARNING)

    async def query_route(self, request: spb.QueryRouteRequest) -> spb.QueryRouteResponse:
        try:
            # Consumers route to %DLQ%<group> too; sends to it are refused by send validation.
            validate_topic(request.topic.name, allow_dead_letter=True)
            validate_namespace(request.topic, "topic", Code.ILLEGAL_TOPIC)
            queues = await self.message_queues(request.topic)
        except ProtocolError as e:
            return spb.QueryRouteResponse(status=e.to_status())
        except TopicNotFoundError as e:
            return spb.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND, str(e)))
        except MessageIllegalError as e:
            return spb.QueryRouteResponse(status=status(Code.ILLEGAL_TOPIC, str(e)))
        return spb.QueryRouteResponse(status=OK_STATUS, message_queues=queues)

    async def message_queues(self, topic: pb.Resource) -> list[pb.MessageQueue]:
        """The topic's queues (a name already validated); TopicNotFoundError."""
        resource = pb.Resource(resource_namespace=topic.resource_namespace, name=topic.name)
        groups = await self._cluster_groups(topic.name) if self._cluster is not None else []
        if not groups:
            tc = self._sends.resolve_topic(topic.name)
            return [
                pb.MessageQueue(
                    topic=resource,
                    id=queue_id,
                    permission=pb.READ_WRITE,
                    broker=self._broker,
                    accept_message_types=ACCEPTS[tc.message_type],
                )
                for queue_id in range(tc.queue_nums)
            ]
        per_group: list[list[pb.MessageQueue]] = []
        for g in groups:
            # Broker id 0 whoever serves the group: see the module docstring (slave read).
            broker = pb.Broker(name=g.broker_name, id=MASTER_ID, endpoints=endpoints_of(g.address))
            per_group.append(
                [
                    pb.MessageQueue(
                        topic=resource,
                        id=queue_id,
                        permission=g.permission,
                        broker=broker,
                        accept_message_types=ACCEPTS[g.message_type],
                    )
                    for queue_id in range(g.queue_nums)
                ]
            )
        return interleaved(per_group)

    async def _cluster_groups(self, topic: str) -> list[GroupQueues]:
        """The cluster's groups of ``topic``; a topic it does not know is resolved here first
        (TopicNotFoundError when this broker cannot create it) and registered at once."""
        assert self._cluster is not None
        try:
            groups = await self._cluster.groups(topic)
            if groups:
                return groups
            tc = self._sends.resolve_topic(topic)
            if self._create_on_peers is not None:
                await self._create_on_peers(tc)
            if self._register_now is not None:
                await self._register_now()
            return await self._cluster.groups(topic, fresh=True)
        except NamesrvUnreachableError as e:
            self._unreachable.log("routes of %s from this broker alone: %s", topic, e)
            return []
