"""The MySQL outbox's counters are its totals: ``<table>_counters`` agrees with a count of the
entries whatever two outboxes sharing the table did, and an outbox from before them gets them.

Against a real MariaDB (the test session's own), each test on tables of its own, this proves:
- after every step of a seeded random sequence of every change there is (put, claim,
  reschedule, bury, release, deliver, requeue, retry_now, purge, expire_leases), made by either
  of two outboxes on one table, the counters' sums are the PENDING, DEAD and DELIVERED entries
  and the body bytes that a GROUP BY over the table counts, and ``stats`` says the same (with
  ``in_flight`` and the oldest PENDING entry as the table has them);
- the same after two threads, each with an outbox of its own, made such changes at once;
- an outbox from before the counters ``dead`` and ``delivered`` (and ``ix_state_created``, and
  the stats row): a reader's open adds the columns and its ``stats`` counts the entries
  meanwhile; a writer's open counts them, exactly, with a delivery committed just before.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa

from outbox import EntryState, open_outbox
from outbox.backends.mysql.outbox import MySQLOutbox
from tests.outbox.backends.mysql.harness import OpenMySQL, run_threads
from tests.outbox.entries import NOW_MS, entry, message_id, receipt

pytestmark = pytest.mark.slow

STEPS = 150
THREAD_STEPS = 120
OWNERS = ("s0/a", "s1/b")  # two sidecars' incarnations
GROUPS = (None, None, "g1", "g2")


@dataclass
class Script:
    """A seeded random sequence of changes, over outboxes sharing one table."""

    rng: random.Random
    outboxes: list[MySQLOutbox]
    ids: itertools.count[int]
    now_ms: int = NOW_MS
    claimed: list[tuple[str, str]] = field(default_factory=list)  # (message id, owner)
    made: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def step(self) -> str:
        """One random change; returns its name."""
        rng, ob = self.rng, self.rng.choice(self.outboxes)
        self.now_ms += rng.randrange(0, 3_000)
        now = self.now_ms
        op = rng.choice(
            ["put", "put", "claim", "claim", "reschedule", "bury", "release", "deliver",
             "deliver", "requeue", "retry_now", "purge", "expire_leases"]
        )  # fmt: skip
        if op == "put":
            with self.lock:
                new = [next(self.ids) for _ in range(rng.randrange(1, 6))]
                self.made.extend(new)
            ob.put(
                [
                    entry(n, next_send_time_ms=now + rng.randrange(-2_000, 4_000),
                          group=rng.choice(GROUPS), body=b"x" * rng.randrange(0, 300),
                          created_ms=now - rng.randrange(0, 10_000))
                    for n in new
                ]
            )  # fmt: skip
        elif op == "claim":
            owner = rng.choice(OWNERS)
            got = ob.claim_due(now, rng.randrange(1, 6), rng.randrange(500, 5_000), owner)
            self.claimed.extend((e.message_id, owner) for e in got)
        elif op in ("reschedule", "bury", "release") and self.claimed:
            message, owner = self.claimed.pop(rng.randrange(len(self.claimed)))
            if op == "reschedule":
                later = now + rng.randrange(0, 3_000)
                ob.reschedule(message, owner, later, "again", now, maybe_stored=rng.random() < 0.3)
            elif op == "bury":
                ob.bury(message, owner, "poison", now)
            else:
                ob.release(message, owner)
        elif op == "deliver":
            some = [message_id(n) for n in self.pick(rng.randrange(1, 5))]
            ob.mark_delivered_many([(i, receipt(n)) for n, i in enumerate(some + some[:1])])
        elif op == "requeue":
            ob.requeue(None if rng.random() < 0.2 else self.ids_of(3), now)
        elif op == "retry_now":
            ob.retry_now(self.ids_of(3), now)
        elif op == "purge":
            state = rng.choice([EntryState.DELIVERED, EntryState.DEAD])
            ob.purge(state, now - rng.randrange(0, 5_000))
        elif op == "expire_leases":
            ob.expire_leases(rng.choice(OWNERS).split("/")[0] + "/", now)
        return op

    def pick(self, k: int) -> list[int]:
        with self.lock:
            return self.rng.sample(self.made, min(k, len(self.made)))

    def ids_of(self, k: int) -> list[str]:
        return [message_id(n) for n in self.pick(k)]


@dataclass(frozen=True)
class Counted:
    """A GROUP BY's totals over the entries, and the counters' sums, of one snapshot."""

    pending: int
    dead: int
    delivered: int
    body_bytes: int
    in_flight: int
    oldest_ms: int | None
    counters: tuple[int, int, int, int]  # entries (PENDING + DEAD), body bytes, dead, delivered


def counted(engine: sa.Engine, table: str, now_ms: int) -> Counted:
    with engine.connect() as conn:
        conn.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        by_state = {
            row.state: row
            for row in conn.execute(
                sa.text(
                    "SELECT state, COUNT(*) AS n, COALESCE(SUM(body_size), 0) AS body_bytes, "
                    "MIN(created_ms) AS oldest, SUM(lease_until_ms > :now) AS leased "
                    f"FROM `{table}` GROUP BY state"
                ),
                {"now": now_ms},
            )
        }
        sums = conn.execute(
            sa.text(
                "SELECT SUM(entries), SUM(body_bytes), SUM(dead), SUM(delivered) "
                f"FROM `{table}_counters`"
            )
        ).one()
        conn.rollback()

    def of(state: str, column: str) -> int:
        row = by_state.get(state)
        return int(getattr(row, column)) if row is not None else 0

    pending = by_state.get("PENDING")
    return Counted(
        pending=of("PENDING", "n"),
        dead=of("DEAD", "n"),
        delivered=of("DELIVERED", "n"),
        body_bytes=of("PENDING", "body_bytes") + of("DEAD", "body_bytes"),
        in_flight=of("PENDING", "leased"),
        oldest_ms=int(pending.oldest) if pending is not None else None,
        counters=(int(sums[0]), int(sums[1]), int(sums[2]), int(sums[3])),
    )


def check(ob: MySQLOutbox, engine: sa.Engine, table: str, now_ms: int, after: str) -> Counted:
    exact = counted(engine, table, now_ms)
    held = exact.pending + exact.dead
    assert exact.counters == (held, exact.body_bytes, exact.dead, exact.delivered), after
    stats = ob.stats(now_ms)
    assert (stats.pending, stats.dead, stats.delivered, stats.bytes, stats.in_flight) == (
        exact.pending, exact.dead, exact.delivered, exact.body_bytes, exact.in_flight,
    ), after  # fmt: skip
    assert stats.oldest_pending_created_ms == exact.oldest_ms, after
    return exact


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_counters_are_a_count_after_every_change_of_two_outboxes(
    seed: int, open_mysql: OpenMySQL, engine: sa.Engine, table: str
) -> None:
    script = Script(random.Random(seed), [open_mysql(), open_mysql()], itertools.count())
    seen: set[str] = set()
    most = [0, 0, 0, 0]  # the most PENDING, in flight, DEAD, DELIVERED entries at a time
    for step in range(STEPS):
        op = script.step()
        seen.add(op)
        exact = check(script.outboxes[0], engine, table, script.now_ms, f"step {step}: {op}")
        now = (exact.pending, exact.in_flight, exact.dead, exact.delivered)
        most = [max(pair) for pair in zip(most, now, strict=True)]
    assert len(seen) == 10, f"the sequence made only {sorted(seen)}"
    assert min(most) > 0, most


def test_the_counters_are_a_count_after_two_outboxes_changed_it_at_once(
    open_mysql: OpenMySQL, engine: sa.Engine, table: str
) -> None:
    ids = itertools.count()
    scripts = [Script(random.Random(100 + i), [open_mysql()], ids) for i in range(2)]
    # One list of ids put, so that each may deliver, requeue or retry what the other put.
    scripts[1].made, scripts[1].lock = scripts[0].made, scripts[0].lock

    def run(script: Script) -> None:
        for _ in range(THREAD_STEPS):
            script.step()

    run_threads([functools.partial(run, s) for s in scripts])
    now_ms = max(s.now_ms for s in scripts)
    check(scripts[0].outboxes[0], engine, table, now_ms, "both threads' changes")


def test_an_outbox_from_before_its_counters_gets_them_counted_by_a_writers_open(
    url: str, table: str, engine: sa.Engine, open_mysql: OpenMySQL
) -> None:
    old = open_mysql()
    old.put([entry(n, body=b"b" * 10 * n) for n in range(1, 7)])
    assert old.mark_delivered(message_id(1), receipt(1))
    claimed = old.claim_due(NOW_MS, 1, 60_000, "s0/a")
    assert old.bury(claimed[0].message_id, "s0/a", "poison", NOW_MS)
    with engine.begin() as conn:  # as a former release left it
        conn.exec_driver_sql(
            f"ALTER TABLE `{table}_counters` DROP COLUMN dead, DROP COLUMN delivered"
        )
        conn.exec_driver_sql(f"DROP INDEX ix_state_created ON `{table}`")
        conn.exec_driver_sql(f"DROP TABLE `{table}_stats`")
    old.close()

    with open_outbox(url, create=False) as reader:
        stats = reader.stats(NOW_MS)  # counted from the entries meanwhile
    assert (stats.pending, stats.dead, stats.delivered, stats.bytes) == (4, 1, 1, 200)
    with engine.connect() as conn:
        assert conn.execute(
            sa.text(f"SELECT COUNT(*) FROM `{table}_counters` WHERE dead IS NULL")
        ).scalar_one() == 17  # fmt: skip
    # A delivery by a sidecar of this version before any writer counted: lost in NULL, and
    # counted by the writer's open all the same.
    mid = open_outbox(url, create=False)
    assert mid.mark_delivered(message_id(3), receipt(3))
    mid.close()

    writer = open_mysql()
    assert counted(engine, table, NOW_MS).counters == (4, 200 - 30, 1, 2)
    stats = writer.stats(NOW_MS)
    assert (stats.pending, stats.dead, stats.delivered, stats.bytes) == (3, 1, 2, 170)
    with engine.connect() as conn:
        indexes = {row[2] for row in conn.exec_driver_sql(f"SHOW INDEX FROM `{table}`")}
        stats_rows = conn.exec_driver_sql(f"SELECT COUNT(*) FROM `{table}_stats`").scalar_one()
    assert "ix_state_created" in indexes
    assert stats_rows == 1
