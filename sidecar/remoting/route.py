"""A topic's brokers, as a RocketMQ NameServer answers GET_ROUTEINFO_BY_TOPIC.

The answer's body is TopicRouteData as JSON::

    {"brokerDatas": [{"brokerName": "broker-a", "cluster": "DefaultCluster",
                      "brokerAddrs": {"0": "10.0.0.5:10911", "1": "10.0.0.6:10911"}}, ...],
     "queueDatas": [{"brokerName": "broker-a", "readQueueNums": 8, "writeQueueNums": 8,
                     "perm": 6, "topicSysFlag": 0}, ...], ...}

``brokerAddrs`` maps a broker id to its remoting address; id 0 is the group's master, the one
producers' messages are written to. A NameServer older than 4.9.4 writes that map as fastjson
does by default, its numeric keys unquoted (``{0:"10.0.0.5:10911"}``): not JSON, so such keys
are quoted before parsing. Newer ones answer standard JSON to a request that carries version
4.9.4 or later, or ``acceptStandardJsonOnly``; this client sends both.

With several NameServers (``host:port;host:port``, RocketMQ's ``namesrvAddr``) every one is
asked and their brokers are put together: each broker registers with each NameServer on its own
schedule, so one may not list a broker another does. A NameServer that cannot be asked is left
out; at least one must answer.

``RouteCache`` keeps each topic's last route with the time its request went out, as RocketMQ's
clients keep routes and ask again every 30 s (``pollNameServerInterval``): a lookup looks for a
copy on a route up to ``ROUTE_CACHE_MS`` old, and asks for one requested since it began before
it trusts "not found" (lookup.py says why). Requests go over the pool's connections.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable
from dataclasses import dataclass

from rocketbox_api.credentials import Credentials
from sidecar.channels import Endpoint
from sidecar.remoting.errors import RemotingAnswerError, RemotingError, RemotingProtocolError
from sidecar.remoting.pool import ConnectionPool
from sidecar.remoting.protocol import GET_ROUTEINFO_BY_TOPIC, SUCCESS, request
from sidecar.remoting.shared import SharedAnswer

MASTER_ID = 0
# How old a route a lookup may look for a copy on: RocketMQ's clients' route refresh interval.
ROUTE_CACHE_MS = 30_000
# Topics whose route is kept; past it the longest kept goes.
ROUTE_TOPICS_MAX = 1_024
# A JSON string literal, and a bare object key (after "{" or "," outside any string).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BARE_KEY = re.compile(r"([{,]\s*)([-+.\w]+)(\s*:)")


@dataclass(frozen=True, slots=True)
class BrokerGroup:
    broker_name: str
    # The master's remoting address; None when the route lists no master for the group (it is
    # down, or not registered yet with this NameServer).
    master: Endpoint | None


def loads_fastjson(text: str) -> object:
    """JSON, accepting fastjson's unquoted object keys (``{0:"a"}``) as well."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    parts: list[str] = []
    at = 0
    for literal in _STRING.finditer(text):
        parts.append(_BARE_KEY.sub(r'\1"\2"\3', text[at : literal.start()]))
        parts.append(literal.group())
        at = literal.end()
    parts.append(_BARE_KEY.sub(r'\1"\2"\3', text[at:]))
    return json.loads("".join(parts))


def parse_route(body: bytes, address: str) -> tuple[BrokerGroup, ...]:
    """The broker groups of a TopicRouteData body."""
    try:
        route = loads_fastjson(body.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise RemotingProtocolError(f"{address}: the route does not decode: {e}") from e
    datas = route.get("brokerDatas") if isinstance(route, dict) else None
    if not isinstance(datas, list):
        raise RemotingProtocolError(f"{address}: the route has no brokerDatas list")
    groups = []
    for data in datas:
        name = data.get("brokerName") if isinstance(data, dict) else None
        addrs = data.get("brokerAddrs") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name or not isinstance(addrs, dict):
            raise RemotingProtocolError(f"{address}: a brokerData without name or addresses")
        master = None
        for broker_id, broker_address in addrs.items():
            if str(broker_id).strip() == str(MASTER_ID) and isinstance(broker_address, str):
                try:
                    master = Endpoint.parse(broker_address)
                except ValueError as e:
                    raise RemotingProtocolError(f"{address}: broker {name}: {e}") from e
        groups.append(BrokerGroup(name, master))
    return tuple(groups)


async def route_of(
    pool: ConnectionPool,
    address: Endpoint,
    topic: str,
    deadline: float,
    credentials: Credentials | None,
) -> tuple[BrokerGroup, ...]:
    """One NameServer's route of ``topic``; RemotingAnswerError when it has none
    (TOPIC_NOT_EXIST) or refuses."""
    fields = {"topic": topic, "acceptStandardJsonOnly": "true"}
    connection = await pool.connection(address, deadline)
    answer = await connection.invoke(
        request(GET_ROUTEINFO_BY_TOPIC, fields, credentials=credentials), deadline
    )
    if answer.code != SUCCESS:
        raise RemotingAnswerError(str(address), GET_ROUTEINFO_BY_TOPIC, answer.code, answer.remark)
    return parse_route(answer.body, str(address))


async def brokers_of(
    pool: ConnectionPool,
    namesrv: tuple[Endpoint, ...],
    topic: str,
    deadline: float,
    credentials: Credentials | None,
) -> tuple[BrokerGroup, ...]:
    """Every broker group any of the NameServers lists for ``topic`` (one entry per name and
    master address: during a master's change both may be listed, and both are asked); the first
    NameServer's error when none answers."""
    answers = await asyncio.gather(
        *(route_of(pool, a, topic, deadline, credentials) for a in namesrv),
        return_exceptions=True,
    )
    groups: dict[tuple[str, Endpoint | None], BrokerGroup] = {}
    answered = False
    for answer in answers:
        if isinstance(answer, RemotingError | TimeoutError):
            continue
        if isinstance(answer, BaseException):
            raise answer
        answered = True
        for group in answer:
            groups[(group.broker_name, group.master)] = group
    if not answered:
        first = answers[0]
        assert isinstance(first, BaseException)
        raise first
    # A group one NameServer lists without a master and another with one has that master.
    mastered = {name for name, master in groups if master is not None}
    return tuple(g for g in groups.values() if g.master or g.broker_name not in mastered)


@dataclass(frozen=True, slots=True)
class Route:
    groups: tuple[BrokerGroup, ...]
    # The event loop's time when its request went out: the NameServers' view is no older.
    requested_at: float


class RouteCache:
    """Each topic's route, shared by the lookups (shared.py)."""

    def __init__(
        self, pool: ConnectionPool, namesrv: tuple[Endpoint, ...], credentials: Credentials | None
    ) -> None:
        self._pool = pool
        self._namesrv = namesrv
        self._credentials = credentials
        self._routes: dict[str, SharedAnswer[tuple[BrokerGroup, ...]]] = {}

    async def route(self, topic: str, not_before: float, deadline: float) -> Route:
        """A route of ``topic`` requested at or after ``not_before`` (a loop time)."""
        shared = self._routes.get(topic)
        if shared is None:
            if len(self._routes) >= ROUTE_TOPICS_MAX:
                del self._routes[next(iter(self._routes))]
            shared = self._routes[topic] = SharedAnswer()

        def ask() -> Awaitable[tuple[BrokerGroup, ...]]:
            return brokers_of(self._pool, self._namesrv, topic, deadline, self._credentials)

        groups, requested_at = await shared.get(ask, not_before, deadline)
        return Route(groups, requested_at)
