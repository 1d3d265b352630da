"""The MySQL outbox's stats read at a given depth, before and after its counters, in one run.

    .venv/bin/python bench/outbox_stats_bench.py [--rows N] [--rounds R] [--url URL]

Fills a table of its own (dropped at the end) through the outbox with N entries of 1 KiB
bodies, as a long-running outbox holds them: 60 % delivered tombstones, 5 % dead, the rest
pending, some of those leased. Then times, round-robin so that the machine's drift falls on
each alike, R times each:
- before: what ``stats`` ran until the counters (GROUP BY state over the whole table, then the
  first claimable entry on ``ix_due``), as SQL, on the same table;
- ``stats``: the exact read (``rocketbox outbox stats``) now: counters, the oldest entry by
  ``ix_state_created``, and the scan for ``in_flight`` and ``next_due_ms``;
- ``shared_stats`` by a sidecar that does not hold the scan's lease (every sidecar but one);
- ``shared_stats`` by the lease's holder once its figures are due (one sidecar an interval).
Prints each one's median and 90th percentile in ms, the database time per interval for S
sidecars sharing the outbox before and after, and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from outbox import OutboxEntry, OutboxLimits, OutboxMessage, SpoolCause, open_outbox
from outbox.backends.mysql.outbox import MySQLOutbox
from outbox.entry import DeliveryReceipt

URL_DEFAULT = "mysql+pymysql://root@127.0.0.1:3306/test"
BODY = os.urandom(1024)
NOW_MS = 1_700_000_000_000
PUT_BATCH = 1_000
INTERVAL_MS = 5_000
SIDECARS = (1, 4, 16)


def entry(n: int) -> OutboxEntry:
    return OutboxEntry(
        message=OutboxMessage(topic="BenchTopic", body=BODY, message_id=f"bench-{n:09d}"),
        cause=SpoolCause.UNAVAILABLE,
        created_ms=NOW_MS - 3_600_000 + n,
        next_send_time_ms=NOW_MS - 1_000 + n % 2_000,
        state_changed_ms=NOW_MS - 3_600_000 + n,
    )


def fill(ob: MySQLOutbox, rows: int) -> None:
    started = time.monotonic()
    for start in range(0, rows, PUT_BATCH):
        ob.put([entry(n) for n in range(start, min(rows, start + PUT_BATCH))])
    receipt = DeliveryReceipt(queue_id=0, queue_offset=1, delivered_ms=NOW_MS)
    delivered = int(rows * 0.60)
    for start in range(0, delivered, PUT_BATCH):
        ids = [f"bench-{n:09d}" for n in range(start, min(delivered, start + PUT_BATCH))]
        ob.mark_delivered_many([(i, receipt) for i in ids])
    dead = ob.claim_due(NOW_MS + 10_000, int(rows * 0.05), 60_000, "bench/dead")
    for e in dead:
        ob.bury(e.message_id, "bench/dead", "bench", NOW_MS)
    ob.claim_due(NOW_MS + 10_000, 200, 3_600_000, "bench/leased")  # in flight
    print(f"filled {rows} rows in {time.monotonic() - started:.1f} s: {ob.stats(NOW_MS)}")


def before(engine: sa.Engine, table: str) -> Callable[[], object]:
    """The statements ``stats`` ran before the counters, as its code built them."""
    by_state = (
        f"SELECT state, count(*), coalesce(sum(body_size), 0), "
        f"coalesce(sum(CASE WHEN lease_until_ms > {NOW_MS} THEN 1 ELSE 0 END), 0), "
        f"min(created_ms) FROM `{table}` GROUP BY state"
    )
    head = (
        f"(SELECT l.seq FROM `{table}` AS l WHERE l.topic = t.topic AND "
        "l.message_group = t.message_group AND l.state = 'PENDING' ORDER BY l.seq LIMIT 1)"
    )
    next_due = (
        f"SELECT t.due_ms FROM `{table}` AS t FORCE INDEX (ix_due) WHERE t.due_ms IS NOT NULL "
        f"AND (t.message_group IS NULL OR t.message_group = '' OR {head} = t.seq) "
        "ORDER BY t.due_ms, t.seq LIMIT 1"
    )

    def read() -> object:
        with engine.begin() as conn:
            return conn.exec_driver_sql(by_state).all(), conn.exec_driver_sql(next_due).all()

    return read


def timed(reads: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(rounds):
        for name, read in reads.items():
            started = time.perf_counter()
            read()
            times[name].append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--url", default=URL_DEFAULT)
    args = parser.parse_args()
    table = f"bench_stats_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(args.url)
    limits = OutboxLimits(outbox_entries_max=10 * args.rows, outbox_bytes_max=1 << 40)
    ob = open_outbox(f"{args.url}?table={table}", limits)
    assert isinstance(ob, MySQLOutbox)
    try:
        fill(ob, args.rows)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"ANALYZE TABLE `{table}`").all()
        clock = iter(range(NOW_MS, NOW_MS + 10**12, INTERVAL_MS))
        ob.shared_stats(NOW_MS, "holder", INTERVAL_MS)
        reads: dict[str, Callable[[], object]] = {
            "before: GROUP BY state + next due": before(engine, table),
            "stats (exact)": lambda: ob.stats(NOW_MS),
            "shared_stats, not the holder": lambda: ob.shared_stats(NOW_MS, "other", INTERVAL_MS),
            # Each call a new interval: the holder scans and publishes every time.
            "shared_stats, the holder scanning": lambda: ob.shared_stats(
                next(clock), "holder", INTERVAL_MS
            ),
        }
        load = os.getloadavg()
        times = timed(reads, args.rounds)
        medians = {name: statistics.median(t) for name, t in times.items()}
        print(f"\n{args.rows} rows, {args.rounds} rounds; load average {load[0]:.2f} "
              f"-> {os.getloadavg()[0]:.2f}")  # fmt: skip
        for name, t in times.items():
            p90 = statistics.quantiles(t, n=10)[-1]
            print(f"  {name:38s} median {medians[name]:8.2f} ms   p90 {p90:8.2f} ms")
        names = list(times)
        old, cheap, holder = medians[names[0]], medians[names[2]], medians[names[3]]
        print(f"\ndatabase time per {INTERVAL_MS} ms interval, S sidecars sharing the outbox:")
        for s in SIDECARS:
            after = holder + (s - 1) * cheap
            print(f"  S={s:2d}: before {s * old:8.1f} ms   after {after:8.1f} ms")
    finally:
        ob.close()
        with engine.begin() as conn:
            conn.exec_driver_sql(
                f"DROP TABLE IF EXISTS `{table}`, `{table}_counters`, `{table}_stats`"
            )
        engine.dispose()


if __name__ == "__main__":
    main()
