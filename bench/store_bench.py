"""Store append throughput beside the raw disk, measured in the same run.

    .venv/bin/python bench/store_bench.py [--messages N] [--writers W] [--dir DIR]

Appends 1 KiB messages (each with a message id, so the index is built too) in-process:
- ASYNC_FLUSH, W concurrent writers, one message per put, and again with 32-message puts;
- SYNC_FLUSH with group commit, W' concurrent writers (many puts share one fsync), one message
  per put and 32-message puts;
Writers are asyncio tasks on one event loop: the broker's shape (grpc.aio handlers);
and prints msgs/s and MB/s beside the raw-disk baseline for each: plain sequential writes of the
same records, with fdatasync after each batch of the size group commit achieved (SYNC) or at the
end only (ASYNC). "readable" is the rate at which messages became readable through the consume
queues and the index (dispatch caught up). The heap check counts Python's allocated blocks after
half and after all of an ASYNC run: flat means no per-message memory is kept.

Ratios matter more than the absolute figures: this machine is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.store.codec.message import MessageExtBrokerInner
from broker.store.config import MIB, FlushDiskType, MessageStoreConfig
from broker.store.message_store import DefaultMessageStore

BODY = os.urandom(1024)
TOPIC = "BenchTopic"
QUEUES = 8
READY_DEADLINE_S = 120.0


@dataclass
class Figure:
    name: str
    messages: int
    seconds: float
    record_bytes: int
    note: str = ""
    # Process CPU (every thread, user + system) per message while the puts ran: the robust
    # figure on a shared machine, where msgs/s moves with the other load.
    cpu_us_per_msg: float | None = None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def line(self, baseline: Figure | None = None) -> str:
        mb_s = self.messages * self.record_bytes / self.seconds / 1e6
        text = f"{self.name:<44} {self.rate:>10,.0f} msgs/s {mb_s:>8.1f} MB/s"
        if baseline is not None:
            text += f"   {self.rate / baseline.rate:>6.2f}x raw"
        if self.cpu_us_per_msg is not None:
            text += f"   {self.cpu_us_per_msg:>5.1f} µs CPU/msg"
        return text + (f"   {self.note}" if self.note else "")


def messages(count: int, tag: str) -> list[MessageExtBrokerInner]:
    return [
        MessageExtBrokerInner(
            TOPIC,
            BODY,
            n % QUEUES,
            properties={"UNIQ_KEY": f"{tag}{n:026X}"[:34]},
            born_timestamp_ms=1,
            born_host=("127.0.0.1", 50000),
        )
        for n in range(count)
    ]


def open_store(root: Path, flush: FlushDiskType, segment_mib: int) -> DefaultMessageStore:
    config = MessageStoreConfig(
        root,
        mapped_file_size_commit_log_bytes=segment_mib * MIB,
        flush_disk_type=flush,
        hash_slot_num=1_000_000,
        index_num_max=4_000_000,
    )
    store = DefaultMessageStore(config, ("127.0.0.1", 10911))
    store.start()
    # Startup prepares the first segment; a broker takes traffic once it is up.
    allocator = store.commit_log.allocator
    deadline = time.monotonic() + READY_DEADLINE_S
    while allocator is not None and not allocator.prepared_count and time.monotonic() < deadline:
        time.sleep(0.01)
    return store


def bench_writers(
    root: Path,
    flush: FlushDiskType,
    msgs: list[MessageExtBrokerInner],
    writers: int,
    batch: int,
    segment_mib: int,
) -> tuple[Figure, Figure, int]:
    """``writers`` concurrent asyncio tasks (the broker's shape: gRPC handlers on one event
    loop), each putting its share ``batch`` messages at a time. Returns the put figure, the
    readable figure and the messages per fsync (0 under ASYNC_FLUSH)."""
    store = open_store(root, flush, segment_mib)
    per = len(msgs) // writers
    failures: list[str] = []

    async def writer(w: int) -> None:
        mine = msgs[w * per : (w + 1) * per]
        if batch == 1:
            for msg in mine:
                [r] = await store.async_put_messages([msg])
                if not r.ok:
                    failures.append(r.status.value)
            return
        for i in range(0, len(mine), batch):
            for r in await store.async_put_messages(mine[i : i + batch]):
                if not r.ok:
                    failures.append(r.status.value)

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        return time.perf_counter() - start

    start = time.perf_counter()
    cpu_start_s = process_cpu_s()
    elapsed = asyncio.run(run())
    cpu_s = process_cpu_s() - cpu_start_s
    if not store.wait_dispatched(READY_DEADLINE_S):
        raise SystemExit("dispatch did not catch up")
    readable = time.perf_counter() - start
    fsyncs = store.group_commit_flush_count
    n = per * writers
    record_bytes = store.max_phy_offset // n
    store.shutdown()
    shutil.rmtree(root)
    if failures:
        raise SystemExit(f"{len(failures)} puts failed: {set(failures)}")
    label = f"{flush.value} {writers} writers x {batch}/put"
    note = f"{n / fsyncs:.0f} msgs/fsync" if fsyncs else ""
    return (
        Figure(label, n, elapsed, record_bytes, note, cpu_s / n * 1e6),
        Figure("  readable (dispatched)", n, readable, record_bytes),
        round(n / fsyncs) if fsyncs else 0,
    )


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def raw_disk(root: Path, count: int, record_bytes: int, fsync_every: int) -> Figure:
    """Plain sequential writes of ``record_bytes`` records; fdatasync every ``fsync_every``
    records (0: once at the end). The physical limit our log is compared with."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "raw.log"
    record = os.urandom(record_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        if fsync_every <= 0:
            for _ in range(count):
                os.write(fd, record)
            os.fdatasync(fd)
        else:
            batch = record * fsync_every
            for _ in range(count // fsync_every):
                os.write(fd, batch)
                os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    how = f"fdatasync every {fsync_every}" if fsync_every > 0 else "one fdatasync at the end"
    n = count if fsync_every <= 0 else count // fsync_every * fsync_every
    return Figure(f"raw disk: sequential writes, {how}", n, elapsed, record_bytes)


def heap_check(root: Path, count: int, segment_mib: int) -> str:
    store = open_store(root, FlushDiskType.ASYNC_FLUSH, segment_mib)
    blocks = []
    for half in (messages(count // 2, "A"), messages(count // 2, "B")):
        for msg in half:
            store.put_messages([msg])
        del half
        store.wait_dispatched(READY_DEADLINE_S)
        gc.collect()
        blocks.append(sys.getallocatedblocks())
    store.shutdown()
    shutil.rmtree(root)
    growth = blocks[1] - blocks[0]
    return (
        f"Python heap: {blocks[0]:,} blocks after {count // 2:,} messages, {blocks[1]:,} after "
        f"{count:,} ({growth:+,} blocks, {growth / (count // 2):+.3f} per message)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--sync-writers", type=int, default=256)
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rocketbox-bench-", dir=args.dir))
    n = args.messages
    from broker.store import commit_log  # noqa: PLC0415 - only to say which build runs

    build = "compiled by mypyc" if commit_log.__file__.endswith(".so") else "interpreted"
    print(f"store_bench: {n:,} messages of {len(BODY)} B, {os.cpu_count()} cores, dir {base}")
    print(f"store implementation: {build} ({commit_log.__file__})")
    load_start = os.getloadavg()[0]
    rows: list[tuple[Figure, Figure | None]] = []
    try:
        msgs = messages(n, "M")
        async_runs = [
            bench_writers(
                base / f"a{b}", FlushDiskType.ASYNC_FLUSH, msgs, args.writers, b, args.segment_mib
            )
            for b in (1, 32)
        ]
        rec = async_runs[0][0].record_bytes
        raw_async = raw_disk(base / "raw", n, rec, 0)
        rows.append((raw_async, None))
        for put_fig, readable_fig, _ in async_runs:
            rows += [(put_fig, raw_async), (readable_fig, raw_async)]
        sync_n = n // 2
        for writers, b in ((args.sync_writers, 1), (args.sync_writers // 8, 32)):
            put_fig, readable_fig, per_fsync = bench_writers(
                base / f"s{b}",
                FlushDiskType.SYNC_FLUSH,
                msgs[:sync_n],
                writers,
                b,
                args.segment_mib,
            )
            raw = raw_disk(base / "raw", sync_n, rec, max(1, per_fsync))
            rows += [(raw, None), (put_fig, raw), (readable_fig, raw)]
        heap = heap_check(base / "heap", min(n, 200_000), args.segment_mib)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    for fig, baseline in rows:
        print(fig.line(baseline))
    print(heap)
    # The machine may be shared: the load says how far to trust the rates (CPU/msg less so).
    load_end = os.getloadavg()[0]
    print(f"load average (1 min): {load_start:.2f} at the start, {load_end:.2f} at the end")


if __name__ == "__main__":
    main()
