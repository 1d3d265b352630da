"""What the RocksDB outbox's synced claims cost a drain, beside unsynced claims in the same run.

    .venv/bin/python bench/outbox_claim_bench.py [--entries N] [--rounds R] [--claim-batch B ...]
                                                 [--dir DIR]

For each claim batch size B and each round, in turn with and without the claims' fsync (the
order alternates round by round, so that the machine's drift falls on both alike): a fresh
outbox in DIR (default: a temporary directory on the disk under /tmp) is filled with N entries
of 1 KiB (not timed), then drained as the resend pool drains it, in one thread: claim_due of B
entries, then mark_delivered_many of them in resend batches of RESEND_BATCH entries (the pool's
``RESEND_BATCH_MESSAGES_MAX``), until nothing is due. No broker: this is the outbox's own cost,
the worst case for the fsync, which a real drain overlaps with its sends.

Prints, per B and mode, the median of the rounds: claims+deliveries a second (entries claimed
and delivered a second), the process's CPU per entry, the WAL fsyncs per round (RocksDB's
``rocksdb.wal.synced``), the ratio synced/unsynced and the drain time each claim's fsync added;
with the load average before and after (the machine is shared: compare the ratio, not the
absolute figures).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from outbox import DeliveryReceipt, OutboxEntry, OutboxLimits, OutboxMessage, SpoolCause
from outbox.backends.rocksdb.outbox import RocksDBOutbox

BODY = os.urandom(1024)
NOW_MS = 1_700_000_000_000
LEASE_MS = 30_000
PUT_BATCH = 500
RESEND_BATCH = 128
WAL_SYNCS = "rocksdb.wal.synced"
MODES = ("synced", "unsynced")


def entry(n: int) -> OutboxEntry:
    return OutboxEntry(
        message=OutboxMessage(topic="BenchTopic", body=BODY, message_id=f"bench-{n:09d}"),
        cause=SpoolCause.UNAVAILABLE,
        created_ms=NOW_MS - 60_000,
        next_send_time_ms=NOW_MS - 1_000,
    )


def drain_once(
    directory: Path, entries: int, claim_batch: int, sync_claims: bool
) -> dict[str, float]:
    """One fresh outbox filled and drained; its rate, CPU per entry and fsyncs."""
    outbox = RocksDBOutbox(
        directory,
        OutboxLimits(outbox_entries_max=2 * entries, outbox_bytes_max=1 << 40),
        statistics=True,
        reserve_bytes=0,
        sync_claims=sync_claims,
    )
    try:
        for start in range(0, entries, PUT_BATCH):
            outbox.put([entry(n) for n in range(start, min(entries, start + PUT_BATCH))])
        receipt = DeliveryReceipt(queue_id=0, queue_offset=1, delivered_ms=NOW_MS)
        syncs = outbox.ticker(WAL_SYNCS)
        drained = 0
        cpu, wall = time.process_time(), time.perf_counter()
        while batch := outbox.claim_due(NOW_MS, claim_batch, LEASE_MS, "bench"):
            for i in range(0, len(batch), RESEND_BATCH):
                delivered = [(e.message_id, receipt) for e in batch[i : i + RESEND_BATCH]]
                outbox.mark_delivered_many(delivered)
            drained += len(batch)
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        assert drained == entries, (drained, entries)
        return {
            "rate": drained / wall,
            "cpu_us": cpu / drained * 1e6,
            "fsyncs": outbox.ticker(WAL_SYNCS) - syncs,
        }
    finally:
        outbox.close()
        shutil.rmtree(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--claim-batch", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="outbox-claim-bench-", dir=args.dir))
    load_before = os.getloadavg()
    print(f"{args.entries} entries of 1 KiB, {args.rounds} rounds, in {root}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}")
    try:
        for claim_batch in args.claim_batch:
            runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
            for r in range(args.rounds):
                for mode in MODES if r % 2 == 0 else reversed(MODES):
                    runs[mode].append(
                        drain_once(root / "outbox", args.entries, claim_batch, mode == "synced")
                    )
            medians = {
                mode: {k: statistics.median(run[k] for run in runs[mode]) for k in runs[mode][0]}
                for mode in MODES
            }
            for mode in MODES:
                m = medians[mode]
                spread = sorted(round(run["rate"]) for run in runs[mode])
                print(
                    f"claim batch {claim_batch:4d} {mode:8s}: "
                    f"{m['rate']:9,.0f} claims+deliveries/s "
                    f"(rounds {spread}), {m['cpu_us']:5.1f} us CPU/entry, "
                    f"{m['fsyncs']:.0f} WAL fsyncs/drain"
                )
            synced, unsynced = medians["synced"], medians["unsynced"]
            extra_s = args.entries / synced["rate"] - args.entries / unsynced["rate"]
            print(
                f"claim batch {claim_batch:4d} synced/unsynced rate: "
                f"{synced['rate'] / unsynced['rate']:.2f} "
                f"({extra_s / synced['fsyncs'] * 1e3:.2f} ms of drain time per claim fsync)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
