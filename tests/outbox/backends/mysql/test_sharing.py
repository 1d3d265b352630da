"""The MySQL outbox shared by several sidecars, beyond the contract (tests/outbox/conformance/).

Against a real MariaDB (the test session's own), each test on tables of its own, this proves:
- two outboxes on one table (two sidecars) never claim the same entry from concurrent threads,
  and share one exact bound;
- FIFO across two outboxes claiming concurrently: only heads are ever claimed (a head that the
  other claimer holds locked does not make the next entry look like a head), a group never has
  two entries in flight, and its entries are claimed in seq order; a claim leaves alone a group
  whose lock another session holds, gives the locks it took back, and a requeue of a FIFO
  entry waits for that lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from outbox import (
    EntryState,
    OutboxFullError,
    OutboxLimits,
)
from outbox.backends.mysql.connection import group_lock_name
from outbox.backends.mysql.outbox import MySQLOutbox
from tests.outbox.backends.mysql.harness import (
    DEADLINE_S,
    OpenMySQL,
    run_threads,
)
from tests.outbox.entries import LEASE_MS, NOW_MS, TOPIC, entry, ids, message_id, receipt

pytestmark = pytest.mark.slow


def test_two_outboxes_on_one_table_never_claim_the_same_entry(open_mysql: OpenMySQL) -> None:
    sidecars = [open_mysql(), open_mysql()]
    entries_n = 1_200
    sidecars[0].put([entry(n) for n in range(entries_n)])
    got: list[list[str]] = []

    def claimer(ob: MySQLOutbox, owner: str) -> Callable[[], None]:
        mine: list[str] = []
        got.append(mine)

        def run() -> None:
            while batch := ob.claim_due(NOW_MS, 10, LEASE_MS, owner):
                mine.extend(ids(batch))

        return run

    run_threads([claimer(ob, f"s{s}t{t}") for s, ob in enumerate(sidecars) for t in range(4)])
    every = [i for mine in got for i in mine]
    assert len(every) == len(set(every)), "an entry was claimed twice"
    assert set(every) == {message_id(n) for n in range(entries_n)}
    assert sum(1 for mine in got if mine) > 1, "the claimers must have overlapped"


def test_two_outboxes_on_one_table_share_one_exact_bound(open_mysql: OpenMySQL) -> None:
    limits = OutboxLimits(outbox_entries_max=10, outbox_bytes_max=10_000)
    a, b = open_mysql(limits), open_mysql(limits)
    a.put([entry(n) for n in range(6)])
    b.put([entry(n) for n in range(6, 10)])
    with pytest.raises(OutboxFullError):
        a.put([entry(10)])
    assert b.mark_delivered(message_id(0), receipt(0))  # counted out by the other outbox
    a.put([entry(10)])
    with pytest.raises(OutboxFullError):
        b.put([entry(11)])
    assert a.stats(NOW_MS).pending == 10


def test_concurrent_puts_from_two_outboxes_never_pass_the_bound(open_mysql: OpenMySQL) -> None:
    limits = OutboxLimits(outbox_entries_max=100)
    sidecars = [open_mysql(limits), open_mysql(limits)]
    outcomes: list[str] = []

    def putter(ob: MySQLOutbox, first: int) -> Callable[[], None]:
        def run() -> None:
            for n in range(first, first + 30):
                try:
                    ob.put([entry(n)])
                    outcomes.append("stored")
                except OutboxFullError:
                    outcomes.append("full")

        return run

    run_threads([putter(ob, 1_000 * (2 * s + t)) for s, ob in enumerate(sidecars) for t in (0, 1)])
    assert outcomes.count("stored") == 100
    assert outcomes.count("full") == 20
    assert sidecars[1].stats(NOW_MS).pending == 100


def fifo_entries(groups_n: int, per_group: int) -> list[Any]:
    """Groups interleaved in put order, as concurrent senders spool them."""
    return [
        entry(g * 100 + k, group=f"group-{g}") for k in range(per_group) for g in range(groups_n)
    ]


def test_concurrent_claimers_take_only_fifo_heads(open_mysql: OpenMySQL) -> None:
    sidecars = [open_mysql(), open_mysql()]
    groups_n, per_group = 40, 5
    sidecars[0].put(fifo_entries(groups_n, per_group))
    got: list[str] = []
    lock = threading.Lock()

    def claimer(ob: MySQLOutbox, owner: str) -> Callable[[], None]:
        def run() -> None:
            # Small batches, so that claimers meet often: each finds heads the others hold
            # locked, and must not take the entries behind them.
            while batch := ob.claim_due(NOW_MS, 3, LEASE_MS, owner):
                with lock:
                    got.extend(ids(batch))

        return run

    run_threads([claimer(ob, f"s{s}t{t}") for s, ob in enumerate(sidecars) for t in range(3)])
    assert sorted(got) == sorted(message_id(g * 100) for g in range(groups_n))


def test_concurrent_claimers_keep_one_entry_in_flight_per_group_in_seq_order(
    open_mysql: OpenMySQL,
) -> None:
    sidecars = [open_mysql(), open_mysql()]
    groups_n, per_group = 12, 6
    sidecars[0].put(fifo_entries(groups_n, per_group))
    total = groups_n * per_group
    lock = threading.Lock()
    in_flight: dict[str, str] = {}
    claimed: dict[str, list[int]] = {}  # group → the n of its entries, in claim order
    delivered = [0]
    all_delivered = threading.Event()

    def claimer(ob: MySQLOutbox, owner: str) -> Callable[[], None]:
        def run() -> None:
            deadline = time.monotonic() + DEADLINE_S
            while not all_delivered.is_set():
                assert time.monotonic() < deadline, "the groups were not drained in time"
                batch = ob.claim_due(NOW_MS, 4, LEASE_MS, owner)
                with lock:
                    for e in batch:
                        group = e.message.message_group
                        assert group is not None
                        assert group not in in_flight, f"{group}: two entries in flight"
                        in_flight[group] = e.message_id
                        claimed.setdefault(group, []).append(int(e.message_id[10:], 16))
                for e in batch:
                    # Out of flight before the tombstone commits: the next one of the group
                    # can only be claimed after that.
                    with lock:
                        del in_flight[e.message.message_group or ""]
                    assert ob.mark_delivered(e.message_id, receipt(0))
                    with lock:
                        delivered[0] += 1
                        if delivered[0] == total:
                            all_delivered.set()
                if not batch:
                    all_delivered.wait(0.005)  # the heads are in flight elsewhere

        return run

    run_threads([claimer(ob, f"s{s}t{t}") for s, ob in enumerate(sidecars) for t in range(3)])
    assert claimed == {
        f"group-{g}": [g * 100 + k for k in range(per_group)] for g in range(groups_n)
    }


def test_a_claim_leaves_a_fifo_group_alone_while_another_session_holds_its_lock(
    open_mysql: OpenMySQL, engine: sa.Engine, table: str
) -> None:
    # The group's lock is what a claim or a requeue of the group in another process holds
    # until it commits: a claim that cannot take it at once leaves the group for later.
    ob = open_mysql()
    ob.put([entry(1, group="g"), entry(2, group="g"), entry(3)])
    name = group_lock_name("test", table, TOPIC, "g")
    with engine.connect() as other:
        assert other.execute(sa.select(sa.func.get_lock(name, 0))).scalar_one() == 1
        assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w1")) == [message_id(3)]
        assert other.execute(sa.select(sa.func.release_lock(name))).scalar_one() == 1
        assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w1")) == [message_id(1)]
        # The claim gave the lock back with its commit: nothing stays held on its connection.
        assert other.execute(sa.select(sa.func.get_lock(name, 0))).scalar_one() == 1
        other.execute(sa.select(sa.func.release_lock(name)))


def test_requeue_of_a_fifo_entry_waits_for_the_claims_of_its_group(
    open_mysql: OpenMySQL, engine: sa.Engine, table: str
) -> None:
    ob = open_mysql()
    ob.put([entry(1, group="g")])
    assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w1")) == [message_id(1)]
    assert ob.bury(message_id(1), "w1", "poison", NOW_MS)
    name = group_lock_name("test", table, TOPIC, "g")
    requeued: list[int] = []
    with engine.connect() as other:
        assert other.execute(sa.select(sa.func.get_lock(name, 0))).scalar_one() == 1
        requeue = threading.Thread(target=lambda: requeued.append(ob.requeue(None, NOW_MS)))
        requeue.start()
        try:
            deadline = time.monotonic() + DEADLINE_S
            while not other.execute(
                sa.text(
                    "SELECT COUNT(*) FROM information_schema.processlist "
                    "WHERE state = 'User lock' AND info LIKE :waiting"
                ),
                {"waiting": f"%{name}%"},
            ).scalar_one():
                assert time.monotonic() < deadline, "requeue never waited for the group lock"
                time.sleep(0.01)  # polling a condition, with the deadline above
            assert requeued == []
            still = ob.get(message_id(1))
            assert still is not None
            assert still.state is EntryState.DEAD
        finally:
            other.execute(sa.select(sa.func.release_lock(name)))
            requeue.join(timeout=DEADLINE_S)
    assert requeued == [1]
    assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w2")) == [message_id(1)]
