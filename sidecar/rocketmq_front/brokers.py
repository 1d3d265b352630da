"""Which broker a front call goes to: a directory broker name → real endpoint, and the receipt
handles that carry a broker's name.

The app sees one endpoint, the front's; behind it may be several broker groups (a cluster's
QueryRoute answers queues on every group, each with its own endpoints). The front learns each
group's real endpoint from the original routes and assignments it relays, before they are
rewritten to name the front: QueryRoute's (route.py: ``upstream.directory.learn_queues(
response.message_queues)`` on the broker's answer), QueryAssignment's (forward.py), and the
routes of the topics a client's Settings name (telemetry.py: ``learn_topics``). A call that
names a message queue (ReceiveMessage, PullMessage, the offsets: ``message_queue.broker.name``)
then goes to that group's endpoint; a name not known yet is looked up once in the topic's route
(``resolve``).

Receipt handles (AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) carry no
broker name in rocketbox's broker, so a message received from a group other than the home one
leaves the front with its handle prefixed ``<broker name>|`` and comes back to that group with
the prefix stripped. Handles of the home group, and every handle while one broker is known,
pass unchanged: with one broker, nothing is parsed at all.

Invariants: the directory holds at most BROKERS_MAX names (a cluster has a handful of groups;
more is a route we cannot trust, and the oldest name is dropped); the home endpoint is always
where a call goes when nothing in it names another.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from sidecar.channels import Endpoint

LOG = logging.getLogger(__name__)

# Broker groups the front tells apart: far more than a cluster has.
BROKERS_MAX = 256
# Topics whose route the front looked up itself (``learn_topics``): the oldest is forgotten.
TOPICS_LOOKED_UP_MAX = 10_000
# Between a handle's broker name and the broker's own handle. Never in rocketbox's handles
# (digits, dots, hex) nor in RocketMQ's (space-separated numbers and names).
HANDLE_SEPARATOR = "|"
MASTER_ID = 0

RouteLookup = Callable[[pb.Resource], Awaitable[Iterable[pb.MessageQueue]]]


def endpoint_of(endpoints: pb.Endpoints) -> Endpoint | None:
    """The first address of a route's endpoints (None: the route names none)."""
    if not endpoints.addresses:
        return None
    address = endpoints.addresses[0]
    return Endpoint(address.host, address.port)


class BrokerDirectory:
    """Broker name → real endpoint, learned from the routes the front relays."""

    def __init__(self, home: Endpoint) -> None:
        self.home = home
        self._endpoints: dict[str, Endpoint] = {}
        self._names_by_endpoint: dict[Endpoint, str] = {}
        self._lookup: RouteLookup | None = None
        # (namespace, topic) looked up by ``learn_topics``, oldest first.
        self._looked_up: dict[tuple[str, str], None] = {}

    def set_lookup(self, lookup: RouteLookup) -> None:
        """How to ask the home broker for a topic's route when a name is not known yet."""
        self._lookup = lookup

    @property
    def several(self) -> bool:
        """More than one broker group known: calls and handles must be parsed to be routed."""
        return len(self._endpoints) > 1

    def learn_queues(self, queues: Iterable[pb.MessageQueue]) -> None:
        """Record each master's endpoint (a route's or an assignment's queues, as the broker
        answered them: before any rewriting)."""
        for queue in queues:
            broker = queue.broker
            if broker.id != MASTER_ID or not broker.name:
                continue
            endpoint = endpoint_of(broker.endpoints)
            if endpoint is None or self._endpoints.get(broker.name) == endpoint:
                continue
            if broker.name not in self._endpoints and len(self._endpoints) >= BROKERS_MAX:
                oldest = next(iter(self._endpoints))
                self._names_by_endpoint.pop(self._endpoints.pop(oldest), None)
                LOG.warning("more than %d broker groups routed: forgot %s", BROKERS_MAX, oldest)
            moved = self._endpoints.get(broker.name)
            if moved is not None:  # the group is served elsewhere now (its slave, a new master)
                self._names_by_endpoint.pop(moved, None)
            self._endpoints[broker.name] = endpoint
            self._names_by_endpoint[endpoint] = broker.name

    async def learn_topics(self, topics: Iterable[pb.Resource]) -> None:
        """Look up the routes of topics a client names in its Settings (a consumer's
        subscriptions), once per topic, so that its first receive already finds its group's
        endpoint. A lookup that fails is tried again at the topic's next mention."""
        if self._lookup is None:
            return
        for topic in topics:
            key = (topic.resource_namespace, topic.name)
            if key in self._looked_up:
                continue
            if len(self._looked_up) >= TOPICS_LOOKED_UP_MAX:
                del self._looked_up[next(iter(self._looked_up))]
            self._looked_up[key] = None
            try:
                self.learn_queues(await self._lookup(topic))
            except grpc.aio.AioRpcError as e:
                del self._looked_up[key]
                LOG.debug("the route of %s could not be looked up: %s", topic.name, e.code())

    def known(self, name: str) -> Endpoint | None:
        return self._endpoints.get(name)

    async def resolve(self, name: str, topic: pb.Resource) -> Endpoint:
        """Where a call naming broker ``name`` (of a queue of ``topic``) goes: its endpoint,
        looked up in the topic's route once if not known yet; home when it is still unknown."""
        endpoint = self._endpoints.get(name)
        if endpoint is None and name and self._lookup is not None:
            self.learn_queues(await self._lookup(topic))
            endpoint = self._endpoints.get(name)
        return endpoint or self.home

    def endpoints(self) -> list[Endpoint]:
        """Every known group's endpoint, the home one first."""
        return [self.home, *(e for e in self._names_by_endpoint if e != self.home)]

    def is_home(self, endpoint: Endpoint) -> bool:
        return endpoint == self.home

    def name_of(self, endpoint: Endpoint) -> str | None:
        return self._names_by_endpoint.get(endpoint)

    # -- receipt handles ----------------------------------------------------------------------
    def handle_out(self, endpoint: Endpoint, handle: str) -> str:
        """A handle the broker at ``endpoint`` gave, as the app is to see it."""
        name = self._names_by_endpoint.get(endpoint)
        if endpoint == self.home or name is None or HANDLE_SEPARATOR in name or not handle:
            return handle
        return f"{name}{HANDLE_SEPARATOR}{handle}"

    def handle_in(self, handle: str) -> tuple[Endpoint, str]:
        """Where an app's handle goes, and the broker's own handle to send there."""
        name, separator, rest = handle.partition(HANDLE_SEPARATOR)
        if separator:
            endpoint = self._endpoints.get(name)
            if endpoint is not None:
                return endpoint, rest
        return self.home, handle
