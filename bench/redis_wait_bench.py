"""What ``wait_replicas=1`` (WAIT after every write) costs a Redis outbox, beside no WAIT in the
same run.

    .venv/bin/python bench/redis_wait_bench.py [--entries N] [--rounds R] [--threads T ...]

Starts a master and a replica of its own (redis-server on free ports, in a temporary directory,
no persistence: this machine's default; both stopped at the end), then for each round and each
put concurrency T, in turn without and with WAIT (the order alternates round by round, so that
the machine's drift falls on both alike), on a fresh key prefix:
- puts: N entries of 1 KiB, one entry a ``put`` call, from T threads (T = 1: every put pays a
  round trip, and with WAIT its replica's acknowledgement; more threads share group commits);
- drain: the same N entries claimed CLAIM_BATCH at a time and marked delivered in one call each,
  in one thread, as the resend pool does.
Prints, per T and mode, the median of the rounds in entries a second, the ratio WAIT / no WAIT,
and the load average before and after (the machine is shared: compare the ratios, not the
absolute figures).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from outbox import DeliveryReceipt, OutboxEntry, OutboxMessage, SpoolCause, open_outbox
from outbox.outbox import Outbox

BODY = os.urandom(1024)
NOW_MS = 1_700_000_000_000
CLAIM_BATCH = 100
START_DEADLINE_S = 30.0
WAIT_TIMEOUT_MS = 1_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(directory: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    directory.mkdir(parents=True)
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
         "--save", "", "--appendonly", "no", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, socket_timeout=1.0)
    deadline = time.monotonic() + START_DEADLINE_S
    try:
        while time.monotonic() < deadline:
            try:
                info = client.info("replication")
            except redis.ConnectionError:
                time.sleep(0.05)
                continue
            if not args or info.get("master_link_status") == "up":
                return proc, port
            time.sleep(0.05)
    finally:
        client.close()
    proc.kill()
    raise SystemExit(f"redis-server {' '.join(args)} on port {port} did not start")


def entry(n: int) -> OutboxEntry:
    return OutboxEntry(
        message=OutboxMessage(topic="BenchTopic", body=BODY, message_id=f"bench-{n:09d}"),
        cause=SpoolCause.UNAVAILABLE,
        created_ms=NOW_MS,
        next_send_time_ms=NOW_MS,
    )


def put_rate(outbox: Outbox, entries: int, threads: int) -> float:
    """Entries a second put one a call by ``threads`` threads."""

    def putter(t: int) -> None:
        for n in range(t, entries, threads):
            outbox.put([entry(n)])

    workers = [threading.Thread(target=putter, args=(t,)) for t in range(threads)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return entries / (time.perf_counter() - started)


def drain_rate(outbox: Outbox, entries: int) -> float:
    receipt = DeliveryReceipt(queue_id=0, queue_offset=1, delivered_ms=NOW_MS)
    started = time.perf_counter()
    drained = 0
    while claimed := outbox.claim_due(NOW_MS, CLAIM_BATCH, 60_000, "bench"):
        outbox.mark_delivered_many([(e.message_id, receipt) for e in claimed])
        drained += len(claimed)
    if drained != entries:
        raise SystemExit(f"drained {drained} of {entries} entries")
    return entries / (time.perf_counter() - started)


def measure(port: int, prefix: str, options: str, entries: int, threads: int) -> list[float]:
    """[puts a second, drained a second] of an outbox of its own; its keys deleted after."""
    admin = redis.Redis(port=port)
    try:
        with open_outbox(f"redis://127.0.0.1:{port}/0?prefix={prefix}{options}") as outbox:
            return [put_rate(outbox, entries, threads), drain_rate(outbox, entries)]
    finally:
        for key in admin.scan_iter(match=f"{prefix}:*", count=1000):
            admin.delete(key)
        admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="redis-wait-bench-"))
    print(f"{args.entries} entries of 1 KiB, {args.rounds} rounds, put threads {args.threads}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    master, port = start_server(root / "master")
    replica, _ = start_server(root / "replica", "--replicaof", "127.0.0.1", str(port))
    modes = {"no WAIT": "", "WAIT 1": f"&wait_replicas=1&wait_timeout_ms={WAIT_TIMEOUT_MS}"}
    results: dict[tuple[int, str], list[list[float]]] = {}
    try:
        for r in range(args.rounds):
            for threads in args.threads:
                order = list(modes) if r % 2 == 0 else list(reversed(modes))
                for n, mode in enumerate(order):
                    prefix = f"bench{r}_{threads}_{n}"
                    rates = measure(port, prefix, modes[mode], args.entries, threads)
                    results.setdefault((threads, mode), []).append(rates)
    finally:
        for proc in (replica, master):
            proc.terminate()
            proc.wait(timeout=START_DEADLINE_S)
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'put threads':>11} {'mode':>8} {'puts/s':>9} {'drain/s':>9}")
    medians: dict[tuple[int, str], list[float]] = {}
    for (threads, mode), runs in results.items():
        medians[threads, mode] = [statistics.median(run[k] for run in runs) for k in (0, 1)]
        put, drain = medians[threads, mode]
        print(f"{threads:>11} {mode:>8} {put:>9,.0f} {drain:>9,.0f}")
    for threads in args.threads:
        before, after = medians[threads, "no WAIT"], medians[threads, "WAIT 1"]
        print(
            f"put threads {threads}: WAIT / no WAIT puts x{after[0] / before[0]:.2f}, "
            f"drain x{after[1] / before[1]:.2f}"
        )
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
