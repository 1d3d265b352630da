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

Connections live for one lookup only; every step is bounded by ``lookup_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
import time
from dataclasses import dataclass

from rocketbox_api.credentials import Credentials
from sidecar.channels import Endpoint
from sidecar.message_id import EPOCH_2021_S
from sidecar.remoting.broker_query import (
    CommitLogProgress,
    commit_log_progress,
    index_enabled,
    query_uniq_key,
)
from sidecar.remoting.connection import RemotingConnection, connect
from sidecar.remoting.errors import RemotingError
from sidecar.remoting.records import REAL_QUEUE_ID, REAL_TOPIC, StoredRecord
from sidecar.remoting.route import BrokerGroup, brokers_of

LOG = logging.getLogger(__name__)
TIMER_TOPIC = "rmq_sys_wheel_timer"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DELAY_TOPICS = (TIMER_TOPIC, SCHEDULE_TOPIC)
# NameServers in one --lookup-namesrv.
NAMESRV_MAX = 16
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

    def __post_init__(self) -> None:
        if not 1 <= len(self.namesrv) <= NAMESRV_MAX:
            raise ValueError(f"namesrv: 1 to {NAMESRV_MAX} NameServers, got {len(self.namesrv)}")
        for name in ("lookup_timeout_ms", "dispatch_poll_interval_ms"):
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


async def lookup_by_uniq_key(
    config: UniqKeyLookupConfig,
    topic: str,
    message_id: str,
    credentials: Credentials | None = None,
) -> LookupResult:
    """Ask the topic's brokers whether ``message_id`` of ``topic`` (as stored: a namespaced
    topic's full name) was stored. Never raises for the cluster's failures: they are UNKNOWN."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.lookup_timeout_ms / 1000.0
    begin_ms = begin_timestamp_ms(message_id, config.clock_skew_max_ms, int(time.time() * 1000))
    # No timeout around it all: each step is bounded by the deadline and says where it ran out.
    try:
        groups = await brokers_of(config.namesrv, topic, deadline, credentials)
    except (RemotingError, TimeoutError) as e:
        return _unknown(message_id, topic, f"no route of {topic}: {type(e).__name__}: {e}")
    if not groups:
        return _unknown(message_id, topic, f"the route of {topic} lists no broker")
    # Every group's answer awaited before any is looked at: none is left running.
    outcomes = await asyncio.gather(
        *(_ask_group(g, config, topic, message_id, begin_ms, deadline, credentials)
          for g in groups),
        return_exceptions=True,
    )  # fmt: skip
    answers = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome  # not the cluster's failure (those are UNKNOWN): a bug, said as one
        answers.append(outcome)
    found = [a for a in answers if a.verdict is Verdict.FOUND]
    if found:
        return found[0]
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


async def _ask_group(
    group: BrokerGroup,
    config: UniqKeyLookupConfig,
    topic: str,
    message_id: str,
    begin_ms: int,
    deadline: float,
    credentials: Credentials | None,
) -> LookupResult:
    """One broker group's answer; its failures are UNKNOWN naming the broker."""
    if group.master is None:
        return LookupResult(
            Verdict.UNKNOWN, reason=f"{group.broker_name} has no master in the route"
        )
    try:
        async with connect(group.master, deadline) as connection:
            return await _ask_master(
                connection, group, config, topic, message_id, begin_ms, deadline, credentials
            )
    except (RemotingError, TimeoutError) as e:
        return LookupResult(Verdict.UNKNOWN, reason=f"{group.broker_name}: {type(e).__name__}: {e}")


async def _ask_master(
    connection: RemotingConnection,
    group: BrokerGroup,
    config: UniqKeyLookupConfig,
    topic: str,
    message_id: str,
    begin_ms: int,
    deadline: float,
    credentials: Credentials | None,
) -> LookupResult:
    """FOUND whatever else failed (a copy is a copy); NOT_FOUND only when nothing did. So a
    cluster whose ACL refuses the admin requests or the delay topics still finds stored
    messages."""
    enabled, progress = await asyncio.gather(
        index_enabled(connection, deadline, credentials),
        commit_log_progress(connection, deadline, credentials),
        return_exceptions=True,
    )
    problems = [e for e in (enabled, progress) if isinstance(e, BaseException)]
    if not isinstance(progress, BaseException):
        # Half the time left at most, so that the queries keep the rest.
        loop = asyncio.get_running_loop()
        wait_deadline = loop.time() + (deadline - loop.time()) / 2
        try:
            await _wait_dispatched(
                connection, progress, config, (wait_deadline, deadline), credentials
            )
        except (RemotingError, TimeoutError) as e:
            problems.append(e)
    answers = await asyncio.gather(
        *(query_uniq_key(connection, t, message_id, begin_ms, deadline, credentials)
          for t in (topic, *DELAY_TOPICS)),
        return_exceptions=True,
    )  # fmt: skip
    records: list[StoredRecord] = []
    for answer in answers:
        if isinstance(answer, BaseException):
            problems.append(answer)
        else:
            records.extend(answer)
    copy = match(records, topic, message_id)
    if copy is not None:
        return _found(group, copy, topic)
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
    progress: CommitLogProgress,
    config: UniqKeyLookupConfig,
    deadlines: tuple[float, float],
    credentials: Credentials | None,
) -> None:
    """Until the dispatcher is past where the commitlog ended at ``progress`` (every record
    stored before the lookup began is then in the index). ``deadlines``: when to stop waiting
    (TimeoutError), and the lookup's own, which bounds a request under way then."""
    wait_deadline, deadline = deadlines
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
        progress = await commit_log_progress(connection, deadline, credentials)
