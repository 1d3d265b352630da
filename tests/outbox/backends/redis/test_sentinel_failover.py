"""A Sentinel outbox (``redis+sentinel://``) through a forced failover (SENTINEL FAILOVER) under
load (tests/outbox/backends/redis/load.py: a putter, a claimer/deliverer, readiness checks once a
second as the sidecar's), on a master, one replica and three Sentinels of the test's own
(tests/redis_servers.py). Every write acknowledged before the failover starts is on the replica
(a marker written after them is WAITed for), so what a failover may lose was acknowledged during
it, between the SENTINEL FAILOVER and the old master replicating from the new one.

- With ``wait_replicas=1``: nothing acknowledged is lost (every acknowledged put is delivered and
  DELIVERED in the outbox), nothing is sent twice; writes are refused while no replica
  acknowledges them (the old master's, once its replica was promoted; the new master's until the
  old one replicates from it); an entry whose delivered mark was refused comes back maybe stored
  and is found in the broker, not sent again.
- Without it, as the Redis backend's docstring says: the failover may lose acknowledged puts and
  claims and delivered marks; every acknowledged put lost, and every entry sent twice (its claim
  lost, so claimed again as new), was acknowledged, or first sent, during the failover, and the
  outbox is whole again after it (nothing pending, the same instances).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from outbox import EntryState
from tests.outbox.backends.redis.load import OutboxLoad, Record, summary
from tests.redis_servers import RedisSentinelServers

pytestmark = pytest.mark.slow
LOG = logging.getLogger(__name__)
LOAD_DEADLINE_S = 90.0
WAIT_TIMEOUT_MS = 300
# The load notes the time of an answer after the call returns, on a thread a busy machine may
# run late: an answer noted this long after the failover ended still came during it.
WINDOW_GRACE_S = 1.0


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinelServers]:
    with RedisSentinelServers(tmp_path_factory.mktemp("sentinel"), replicas=1) as servers:
        yield servers


@dataclass
class FailoverRun:
    record: Record
    # The failover's start and end, time.monotonic().
    window: tuple[float, float]
    # Each acknowledged put's state in the outbox after the drain (None: gone).
    states: dict[str, EntryState | None]

    def outside(self, ids: set[str]) -> set[str]:
        """Those of ``ids`` acknowledged outside the window."""
        return {m for m in ids if not self.window[0] <= self.record.acked_puts[m] <= self.window[1]}


def failover_under_load(sentinel: RedisSentinelServers, query: str) -> FailoverRun:
    with OutboxLoad(sentinel.url(query)) as load:
        load.wait_for(
            "300 puts acknowledged and 100 entries delivered",
            lambda r: len(r.acked_puts) >= 300 and len(r.acked_marks) >= 100,
            LOAD_DEADLINE_S,
        )
        master = sentinel.master()
        # Everything acknowledged so far is on the replica once a write after it is.
        pipe: Any = master.client.pipeline(transaction=False)  # untyped commands
        pipe.set("failover-marker", b"1")
        pipe.execute_command("WAIT", 1, 10_000)
        assert pipe.execute()[1] == 1
        start = time.monotonic()
        sentinel.failover()
        end = time.monotonic() + WINDOW_GRACE_S
        acked = len(load.record.acked_puts)
        load.wait_for(
            "300 more puts acknowledged after the failover",
            lambda r: len(r.acked_puts) >= acked + 300,
            LOAD_DEADLINE_S,
        )
        load.drain(LOAD_DEADLINE_S)
        found = {m: load.deliverer.get(m) for m in load.record.acked_puts}
    states = {m: e.state if e is not None else None for m, e in found.items()}
    return FailoverRun(load.record, (start, end), states)


def test_with_wait_replicas_a_failover_loses_nothing_acknowledged(
    sentinel: RedisSentinelServers,
) -> None:
    run = failover_under_load(
        sentinel, f"prefix=failover_wait&wait_replicas=1&wait_timeout_ms={WAIT_TIMEOUT_MS}"
    )
    record = run.record
    LOG.info("failover with wait_replicas=1: %s", summary(record, run.window))
    assert set(record.acked_puts) <= set(record.sends), "acknowledged puts never sent"
    assert {m for m, state in run.states.items() if state is not EntryState.DELIVERED} == set()
    assert not record.duplicated()
    assert record.refused_puts, "no write was refused while no replica acknowledged"
    assert record.refused_marks <= record.found_in_index | set(record.acked_marks)


def test_without_wait_a_failover_may_lose_what_it_acknowledged_during_it(
    sentinel: RedisSentinelServers,
) -> None:
    run = failover_under_load(sentinel, "prefix=failover_nowait")
    record = run.record
    gone = {m for m, state in run.states.items() if state is None}
    never_sent = set(record.acked_puts) - set(record.sends)
    LOG.info(
        "failover without WAIT: %s; acknowledged puts gone from the outbox %d (never sent %d)",
        summary(record, run.window), len(gone), len(never_sent),
    )  # fmt: skip
    assert never_sent <= gone
    assert not run.outside(gone), "lost puts acknowledged outside the failover"
    for m in record.duplicated():
        assert run.window[0] <= record.first_sent[m] <= run.window[1], f"{m} sent twice"
