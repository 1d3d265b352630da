"""Was this message id stored? Asked of an Apache RocketMQ cluster's brokers by unique key.

The answer is FOUND, NOT_FOUND or UNKNOWN, and the resend pool acts on it: FOUND settles the
outbox entry without a send; NOT_FOUND and UNKNOWN both resend, but only NOT_FOUND may say the
resend cannot duplicate. FOUND therefore needs one record whose own ``UNIQ_KEY`` is the id and
whose topic is the message's (or, still waiting as a delayed message, whose ``REAL_TOPIC`` is);
a copy found stands whatever else failed (a cluster whose ACL refuses the admin requests or
the delay topics still finds stored messages). NOT_FOUND needs every one of these to hold, else
the answer is UNKNOWN:

- a NameServer answered the topic's route, and every broker group of it (of every NameServer
  that answered) has a master in the route, which was asked and answered each question;
- each master builds its index (``messageIndexEnable``);
- each master's index had caught up, before it was queried, with everything its commitlog held
  when the lookup began: its dispatcher indexes records just after they are stored (within
  milliseconds when it keeps up, later under load), so a message stored just before the lookup
  may not be in the index yet. The lookup reads where the commitlog ends, then waits, polling
  every ``dispatch_poll_interval_ms``, until the dispatcher is past that point (for half the
  lookup's time at most: the queries keep the rest, and may still find the message). A message
  the broker stores after the lookup began (a send still inside the broker past the sidecar's
  deadline and back-off) is not covered: RocketMQ bounds such a wait (its send queue's
  ``waitTimeMillsInSendQueue``) but cannot promise it;
- each master answered for the topic and for the two topics a delayed message waits under
  before its time (``rmq_sys_wheel_timer``, RocketMQ 5's timer, and ``SCHEDULE_TOPIC_XXXX``, the
  delay levels').

The time range asked starts where the message cannot have been stored before: the time inside
the id when it is RocketMQ 5's "V1" id (rocketbox's and the official RocketMQ 5 clients':
seconds since 2021), less ``clock_skew_max_ms`` (how far the broker's clock may be behind the
id's writer's) and a second more (an index entry keeps its store time in whole seconds after its
file's start, so the time it is matched by may be up to a second early); 0 for any other id. It
has no end (store time is the broker's clock).

Routes: a lookup first looks on the topic's route as the NameServers last gave it, when that was
asked at most ``ROUTE_CACHE_MS`` ago (route.py); a copy found there stands. "Not found" is only
trusted from a route requested after the lookup began: a route asked before may lack a broker
group that joined the topic since (the v2 endpoint, routing by its own newer view, may have sent
the message there) or list a master at its old address (a slave now, its index behind the new
master's). So a lookup that found nothing on an older route asks for the route again (one request
for every lookup waiting for one since it began), asks the masters it lists that were not asked
yet or could not say, and is then judged on that route's groups alone, as a lookup with no cache
would be. A copy found costs no NameServer round trip; "not found" one, shared by the lookups
under way.

Every step is bounded by ``lookup_timeout_ms``. A ``UniqKeyLookup`` (one per producer) keeps its
connections open and shares them among its lookups (pool.py), and shares their broker answers
(broker_query.py's ``BrokerAnswers``): where a commitlog ended is asked once for every lookup that
began before the request went out, ``messageIndexEnable`` is kept for a while.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import re
import time
from dataclasses import dataclass

from rocketbox_api.credentials import Credentials
from sidecar.channels import Endpoint
from sidecar.message_id import EPOCH_2021_S
from sidecar.remoting.broker_query import BrokerAnswers, CommitLogProgress, query_uniq_key
from sidecar.remoting.connection import RemotingConnection
from sidecar.remoting.errors import RemotingError
from sidecar.remoting.pool import CONNECTION_IDLE_MAX_MS, ConnectionPool
from sidecar.remoting.records import REAL_QUEUE_ID, REAL_TOPIC, StoredRecord
from sidecar.remoting.route import ROUTE_CACHE_MS, BrokerGroup, RouteCache

LOG = logging.getLogger(__name__)
TIMER_TOPIC = "rmq_sys_wheel_timer"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DELAY_TOPICS = (TIMER_TOPIC, SCHEDULE_TOPIC)
# NameServers in one --lookup-namesrv.
NAMESRV_MAX = 16
# Brokers whose answers are kept; past it the longest kept goes.
BROKERS_MAX = 1_024
LOOKUP_TIMEOUT_MS_DEFAULT = 3_000
DISPATCH_POLL_INTERVAL_MS_DEFAULT = 20
CLOCK_SKEW_MAX_MS_DEFAULT = 3_600_000
# An IndexFile entry's time: whole seconds after its file's first store time.
INDEX_TIME_GRANULARITY_MS = 1_000
_V1_ID = re.compile(r"01[0-9A-Fa-f]{32}")
_V1_SECONDS = slice(18, 26)


@dataclass(frozen=True, slots=True)
class UniqKeyLookupConfig:
    """Where and how the sidecar asks RocketMQ's brokers by unique key (``--lookup-namesrv``)."""

    namesrv: tuple[Endpoint, ...]
    lookup_timeout_ms: int = LOOKUP_TIMEOUT_MS_DEFAULT
    dispatch_poll_interval_ms: int = DISPATCH_POLL_INTERVAL_MS_DEFAULT
    clock_skew_max_ms: int = CLOCK_SKEW_MAX_MS_DEFAULT
    connection_idle_max_ms: int = CONNECTION_IDLE_MAX_MS

    def __post_init__(self) -> None:
        if not 1 <= len(self.namesrv) <= NAMESRV_MAX:
            raise ValueError(f"namesrv: 1 to {NAMESRV_MAX} NameServers, got {len(self.namesrv)}")
        for name in ("lookup_timeout_ms", "dispatch_poll_interval_ms", "connection_idle_max_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.clock_skew_max_ms < 0:
            raise ValueError(f"clock_skew_max_ms must be >= 0, got {self.clock_skew_max_ms}")


def parse_namesrv_addrs(text: str) -> tuple[Endpoint, ...]:
    """RocketMQ's ``namesrvAddr`` form: ``host:port`` separated by ``;``."""
    parts = [p.strip() for p in text.split(";") if p.strip()]
    if not 1 <= len(parts) <= NAMESRV_MAX:
        raise ValueError(f"{text!r}: 1 to {NAMESRV_MAX} NameServers as HOST:PORT;HOST:PORT")
    return tuple(Endpoint.parse(p) for p in parts)


class Verdict(enum.Enum):
    FOUND = "FOUND"
    NOT_FOUND = "NOT_FOUND"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class LookupResult:
    verdict: Verdict
    # FOUND: where (a delayed message still waiting: its real queue, queue offset -1).
    broker_name: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    # UNKNOWN: why.
    reason: str = ""


def begin_timestamp_ms(message_id: str, clock_skew_max_ms: int, now_ms: int) -> int:
    """The earliest store time to ask for (see the module's docstring)."""
    if not _V1_ID.fullmatch(message_id):
        return 0
    stamped_ms = (EPOCH_2021_S + int(message_id[_V1_SECONDS], 16)) * 1000
    if stamped_ms > now_ms + clock_skew_max_ms:
        return 0  # a time ahead of every clock: not a time to trust
    return max(0, stamped_ms - clock_skew_max_ms - INDEX_TIME_GRANULARITY_MS)


def match(records: list[StoredRecord], topic: str, message_id: str) -> StoredRecord | None:
    """The earliest stored copy of ``message_id`` in ``topic`` among a query's records."""
    copies = [
        r
        for r in records
        if r.message_id == message_id
        and (
            r.topic == topic or (r.topic in DELAY_TOPICS and r.properties.get(REAL_TOPIC) == topic)
        )
    ]
    return min(copies, key=lambda r: r.phy_offset, default=None)


class UniqKeyLookup:
    """Lookups by unique key sharing connections, routes and broker answers; ``close`` (or the
    ``async with`` block's end) closes its connections."""

    def __init__(self, config: UniqKeyLookupConfig, credentials: Credentials | None = None) -> None:
        self.config = config
        self._credentials = credentials
        self._pool = ConnectionPool(config.connection_idle_max_ms)
        self._routes = RouteCache(self._pool, config.namesrv, credentials)
        self._brokers: dict[Endpoint, BrokerAnswers] = {}

    async def __aenter__(self) -> UniqKeyLookup:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    @property
    def connected(self) -> tuple[Endpoint, ...]:
        """The NameServers and brokers a connection is open to."""
        return self._pool.addresses

    async def close(self) -> None:
        await self._pool.close()

    async def lookup(self, topic: str, message_id: str) -> LookupResult:
        """Ask the topic's brokers whether ``message_id`` of ``topic`` (as stored: a namespaced
        topic's full name) was stored. Never raises for the cluster's failures: they are
        UNKNOWN."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        asking = _Asking(
            message_id, topic, began + self.config.lookup_timeout_ms / 1000.0, began,
            begin_timestamp_ms(message_id, self.config.clock_skew_max_ms, int(time.time() * 1000)),
        )  # fmt: skip
        answers: dict[BrokerGroup, LookupResult] = {}
        not_before = began - ROUTE_CACHE_MS / 1000.0
        while True:
            # No timeout around it all: each step is bounded by the deadline and says where it
            # ran out.
            try:
                route = await self._routes.route(topic, not_before, asking.deadline)
            except (RemotingError, TimeoutError) as e:
                return _unknown(message_id, topic, f"no route of {topic}: {type(e).__name__}: {e}")
            # Asked again: a group that could not say on an older route (its connection may
            # have been one the broker was just closing).
            unasked = [
                g for g in route.groups if g not in answers or answers[g].verdict is Verdict.UNKNOWN
            ]
            # Every group's answer awaited before any is looked at: none is left running.
            outcomes = await asyncio.gather(
                *(self._ask_group(g, asking) for g in unasked), return_exceptions=True
            )
            for group, outcome in zip(unasked, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    raise outcome  # not the cluster's failure (those are UNKNOWN): a bug
                answers[group] = outcome
            found = [a for a in answers.values() if a.verdict is Verdict.FOUND]
            if found:
                return found[0]
            if route.requested_at >= began:
                return _judged(message_id, topic, [answers[g] for g in route.groups])
            not_before = began  # nothing found on an older route: ask for today's (see above)

    async def _ask_group(self, group: BrokerGroup, asking: _Asking) -> LookupResult:
        """One broker group's answer; its failures are UNKNOWN naming the broker."""
        if group.master is None:
            return LookupResult(
                Verdict.UNKNOWN, reason=f"{group.broker_name} has no master in the route"
            )
        try:
            connection = await self._pool.connection(group.master, asking.deadline)
            broker = self._brokers.get(group.master)
            if broker is None:
                if len(self._brokers) >= BROKERS_MAX:
                    del self._brokers[next(iter(self._brokers))]
                broker = self._brokers[group.master] = BrokerAnswers(self._credentials)
            return await _ask_master(connection, broker, group, self.config, asking)
        except (RemotingError, TimeoutError) as e:
            return LookupResult(
                Verdict.UNKNOWN, reason=f"{group.broker_name}: {type(e).__name__}: {e}"
            )


async def lookup_by_uniq_key(
    config: UniqKeyLookupConfig,
    topic: str,
    message_id: str,
    credentials: Credentials | None = None,
) -> LookupResult:
    """One lookup on connections of its own, closed when it ends (``UniqKeyLookup.lookup``)."""
    async with UniqKeyLookup(config, credentials) as lookup:
        return await lookup.lookup(topic, message_id)


@dataclass(frozen=True, slots=True)
class _Asking:
    """One lookup's question and its times (the event loop's)."""

    message_id: str
    topic: str
    deadline: float
    began: float
    begin_timestamp_ms: int


def _judged(message_id: str, topic: str, answers: list[LookupResult]) -> LookupResult:
    """NOT_FOUND when every group of a route requested since the lookup began said so."""
    if not answers:
        return _unknown(message_id, topic, f"the route of {topic} lists no broker")
    unknown = [a.reason for a in answers if a.verdict is Verdict.UNKNOWN]
    if unknown:
        return _unknown(message_id, topic, "; ".join(unknown))
    return LookupResult(Verdict.NOT_FOUND)


def _unknown(message_id: str, topic: str, reason: str) -> LookupResult:
    LOG.info(
        "RocketMQ's index could not say whether %s of %s was stored: %s",
        message_id, topic, reason, extra={"message_id": message_id, "topic": topic},
    )  # fmt: skip
    return LookupResult(Verdict.UNKNOWN, reason=reason)


async def _ask_master(
    connection: RemotingConnection,
    broker: BrokerAnswers,
    group: BrokerGroup,
    config: UniqKeyLookupConfig,
    asking: _Asking,
) -> LookupResult:
    """FOUND whatever else failed (a copy is a copy); NOT_FOUND only when nothing did. So a
    cluster whose ACL refuses the admin requests or the delay topics still finds stored
    messages."""
    deadline = asking.deadline
    enabled, progress = await asyncio.gather(
        broker.index_enabled(connection, deadline),
        broker.progress(connection, asking.began, deadline),
        return_exceptions=True,
    )
    problems = [e for e in (enabled, progress) if isinstance(e, BaseException)]
    if not isinstance(progress, BaseException):
        # Half the time left at most, so that the queries keep the rest.
        loop = asyncio.get_running_loop()
        wait_deadline = loop.time() + (deadline - loop.time()) / 2
        try:
            await _wait_dispatched(connection, broker, progress, config, (wait_deadline, deadline))
        except (RemotingError, TimeoutError) as e:
            problems.append(e)
    answers = await asyncio.gather(
        *(query_uniq_key(connection, t, asking.message_id, asking.begin_timestamp_ms, deadline,
                         broker.credentials)
          for t in (asking.topic, *DELAY_TOPICS)),
        return_exceptions=True,
    )  # fmt: skip
    records: list[StoredRecord] = []
    for answer in answers:
        if isinstance(answer, BaseException):
            problems.append(answer)
        else:
            records.extend(answer)
    copy = match(records, asking.topic, asking.message_id)
    if copy is not None:
        return _found(group, copy, asking.topic)
    if problems:
        raise problems[0]
    if not enabled:
        return LookupResult(
            Verdict.UNKNOWN, reason=f"{group.broker_name} builds no index (messageIndexEnable)"
        )
    return LookupResult(Verdict.NOT_FOUND)


def _found(group: BrokerGroup, copy: StoredRecord, topic: str) -> LookupResult:
    if copy.topic == topic:
        return LookupResult(Verdict.FOUND, group.broker_name, copy.queue_id, copy.queue_offset)
    # Still waiting under a delay topic: its real queue, and no offset there yet.
    real_queue_id = copy.properties.get(REAL_QUEUE_ID, "")
    queue_id = int(real_queue_id) if real_queue_id.isdigit() else -1
    return LookupResult(Verdict.FOUND, group.broker_name, queue_id, -1)


async def _wait_dispatched(
    connection: RemotingConnection,
    broker: BrokerAnswers,
    first: tuple[CommitLogProgress, float],
    config: UniqKeyLookupConfig,
    deadlines: tuple[float, float],
) -> None:
    """Until the dispatcher is past where the commitlog ended in ``first`` (an answer asked
    since the lookup began, and when: every record stored before the lookup began is then in
    the index). Each poll takes an answer asked after the last one, perhaps another lookup's.
    ``deadlines``: when to stop waiting (TimeoutError), and the lookup's own, which bounds a
    request under way then."""
    wait_deadline, deadline = deadlines
    progress, asked_at = first
    target = progress.max_offset
    loop = asyncio.get_running_loop()
    while progress.dispatched_offset < target:
        left_s = wait_deadline - loop.time()
        if left_s <= 0:
            raise TimeoutError(
                f"{connection.address}: the index stayed {target - progress.dispatched_offset} "
                f"bytes behind the commitlog's end {target}"
            )
        await asyncio.sleep(min(left_s, config.dispatch_poll_interval_ms / 1000.0))
        progress, asked_at = await broker.progress(
            connection, math.nextafter(asked_at, math.inf), deadline
        )
