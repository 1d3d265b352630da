"""The reconciliation job on generated commitlogs, beside the sequential read of the same files.

    .venv/bin/python -m bench.reconcile_bench [--quick] [--sizes N,N,...] [--dir DIR]
        [--segment-mib MIB] [--master local[2]] [--json PATH]

For each size (default 1M and 10M records; ``--quick``: 100k and 1M), under ``--dir``:

- a commitlog of N records with 1 KiB bodies, written as the broker writes them
  (tests/reconcile/testdata.py: the codec's record, patched per record; the broker's default 1 GiB
  segments, blank padding, the last segment preallocated), 8 queues of one topic, message ids in
  the sidecar's format; a ledger acknowledging every record STORED (as the sidecar writes it),
  and an empty outbox export;
- the files written are flushed to the disk (``os.sync``, timed apart) before anything is
  timed: their writeback would otherwise run beside the first measurements;
- (read) the physical limit: every segment file read sequentially, 4 MiB at a time, one thread
  per core (the files were just written: this is mostly the page cache, as the scan sees it);
- (scan) the commitlog scan alone: the classification's map stage over the segments (scanned in
  Spark's tasks, cut into id buckets, written as files of them), no shuffle;
- (job) the whole job on the Spark engine, ``reconcile.job.run``: scan, ledger, outbox, the
  classification by message id (one shuffle), details/messages written as Parquet, the summary's
  aggregates; and the same job with the outbox alone (no ledger: half the rows to shuffle);
- (in process) the same job on the in-process engine, beside it, for sizes up to
  ``IN_PROCESS_SIZE_MAX`` (its tables are held in memory);
- every job's result is checked: N messages ok, nothing else (a wrong result exits 1).

One Spark session serves every measurement (its JVM start is reported apart); a job on a small
log runs first, so that the JIT has compiled Spark's code paths before anything is timed.
Records/s = N / seconds. Targets: the Spark job >= 400k records/s on local[2] at every size, and
its time growing linearly with N (the 10M / 1M time ratio at most 10).

Everything generated is deleted after each size and on SIGINT/SIGTERM (exit 130). Not enough free
disk under --dir exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench.process_control import load, removed_on_exit
from reconcile import spark_classify
from reconcile.commitlog_source import part_bytes, stats_accumulator
from reconcile.config import (
    DRILL_DOWN_IDS_MAX_DEFAULT,
    ENGINE_IN_PROCESS,
    ENGINE_SPARK,
    JobConfig,
    SparkSettings,
)
from reconcile.job import run
from reconcile.outcomes import BUCKET_MS_DEFAULT
from reconcile.parquet_parts import emptied
from reconcile.segment_scan import SCAN_BATCH_RECORDS_MAX, commitlog_dir, list_segments
from reconcile.session import quiet_pyspark, spark_session
from tests.reconcile.testdata import (
    BulkShape,
    bulk_record_bytes,
    segment_records_max,
    write_bulk_commitlog,
    write_bulk_ledger,
)

SIZES = (1_000_000, 10_000_000)
QUICK_SIZES = (100_000, 1_000_000)
WARM_UP_RECORDS = 200_000
BODY_BYTES = 1024
SEGMENT_MIB = 1024
READ_CHUNK_BYTES = 4 * 1024 * 1024
TARGET_RECORDS_PER_S = 400_000
# The in-process engine is measured up to this size: its own default limit (config.py), set by
# its memory at that size (docs/benchmarks.md).
IN_PROCESS_SIZE_MAX = 1_000_000
LINEAR_RATIO_MAX = 10.0
# Free disk beyond what the largest size needs: the job's own output and Spark's shuffle files.
DISK_HEADROOM_BYTES = 4 * 1024**3


class BenchError(Exception):
    """A measurement gave a wrong result."""


@dataclass
class SizeResult:
    records: int
    segments: int = 0
    log_bytes: int = 0
    generate_s: float = 0.0
    flush_s: float = 0.0  # os.sync() after generating: the writeback, before any timing
    read_s: float = 0.0
    scan_s: float = 0.0
    job_s: float = 0.0
    job_phases_s: dict[str, float] = field(default_factory=dict)
    job_without_ledger_s: float = 0.0
    in_process_s: float = 0.0  # 0: not measured (above IN_PROCESS_SIZE_MAX)
    in_process_phases_s: dict[str, float] = field(default_factory=dict)

    def rate(self, seconds: float) -> float:
        return self.records / seconds if seconds else 0.0


def generate(root: Path, count: int, segment_bytes: int) -> tuple[Path, Path, Path]:
    """The commitlog, a ledger acknowledging every record, and an empty outbox export."""
    shape = BulkShape(count=count, body_size_bytes=BODY_BYTES)
    store = root / "store"
    write_bulk_commitlog(store / "commitlog", shape, segment_bytes)
    ledger = root / "acks.jsonl"
    write_bulk_ledger(ledger, shape)
    outbox = root / "outbox.jsonl"
    outbox.write_text("")
    return store, ledger, outbox


def read_files(paths: list[Path]) -> float:
    """Seconds to read every file sequentially, one thread per core."""

    def read(path: Path) -> int:
        total = 0
        buf = bytearray(READ_CHUNK_BYTES)
        with path.open("rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
        return total

    began = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        read_bytes = sum(pool.map(read, paths))
    assert read_bytes == sum(p.stat().st_size for p in paths)
    return time.perf_counter() - began


def time_scan(spark: SparkSession, store: Path, exchange: Path) -> float:
    """The classification's map stage over the segments alone: scanned in Spark's tasks, cut
    into id buckets and written as files of them (under ``exchange``), without the shuffle."""
    emptied(exchange)
    segments = list_segments(commitlog_dir(store))
    sc = spark.sparkContext
    job = spark_classify.Classification(
        messages_dir="",
        acks_dir="",
        exchange_dir=str(exchange),
        buckets=spark_classify.bucket_count(
            sum(s.size_bytes for s in segments), sc.defaultParallelism, None
        ),
        bucket_ms=BUCKET_MS_DEFAULT,
        fold_copies=False,
        ledgers=False,
        ids_max=DRILL_DOWN_IDS_MAX_DEFAULT,
        batch_records_max=SCAN_BATCH_RECORDS_MAX,
    )
    units = spark_classify.units(
        segments, part_bytes(segments, sc.defaultParallelism), frozenset(), Path()
    )
    logs = [u for u in units if u[0] == spark_classify.KIND_LOG]
    stats = spark_classify.InputStats(*(stats_accumulator(spark) for _ in range(3)))
    began = time.perf_counter()
    spark_classify.mapped(sc, job, logs, stats).count()
    seconds = time.perf_counter() - began
    shutil.rmtree(exchange)
    return seconds


def time_job(
    spark: SparkSession,
    store: Path,
    outbox: Path,
    ledgers: tuple[Path, ...],
    out: Path,
    count: int,
    engine: str = ENGINE_SPARK,
) -> tuple[float, dict[str, float]]:
    """Seconds for the whole job on ``engine``; every message must be ok (with the ledger) or
    unchecked (without one: nothing says a sender kept books of these topics)."""
    config = JobConfig(
        commitlogs=(store,), outbox=outbox, out_dir=out, ledgers=ledgers, engine=engine
    )
    began = time.perf_counter()
    summary = run(config, spark)
    seconds = time.perf_counter() - began
    if summary["engine"] != engine:
        raise BenchError(f"the job ran on {summary['engine']}, not {engine}")
    totals = summary["totals"]
    expected = "ok" if ledgers else "unchecked"
    if (totals["messages"], totals[expected]) != (count, count) or totals["lost"]:
        raise BenchError(f"a wrong result for {count:,} records: {totals}")
    if summary["commitlog"]["kept_records"] != count or summary["commitlog"]["stops"]:
        raise BenchError(f"a wrong scan of {count:,} records: {summary['commitlog']}")
    shutil.rmtree(out, ignore_errors=True)
    phases: dict[str, float] = summary["phases_s"]
    return seconds, phases


def measure(
    spark: SparkSession, root: Path, count: int, segment_bytes: int, progress: bool = True
) -> SizeResult:
    result = SizeResult(count)
    began = time.perf_counter()
    store, ledger, outbox = generate(root, count, segment_bytes)
    result.generate_s = time.perf_counter() - began
    # What was just written goes to the disk before anything is timed: the kernel's writeback of
    # it would otherwise run beside the first measurements (a job reads a log written earlier).
    began = time.perf_counter()
    os.sync()
    result.flush_s = time.perf_counter() - began
    files = sorted((store / "commitlog").iterdir())
    result.segments = len(files)
    result.log_bytes = sum(p.stat().st_size for p in files)
    per_segment = segment_records_max(segment_bytes, bulk_record_bytes(BulkShape(count)))
    assert result.segments == -(-count // per_segment), "the records are not the expected size"
    if progress:
        print(f"  {count:,} records: {len(files)} segments, {result.log_bytes / 1e9:.1f} GB "
              f"written in {result.generate_s:.0f} s, flushed to disk in {result.flush_s:.1f} s",
              flush=True)  # fmt: skip
    result.read_s = read_files(files)
    result.scan_s = time_scan(spark, store, root / "exchange")
    result.job_s, result.job_phases_s = time_job(
        spark, store, outbox, (ledger,), root / "out", count
    )
    result.job_without_ledger_s, _ = time_job(spark, store, outbox, (), root / "out", count)
    if count <= IN_PROCESS_SIZE_MAX:
        result.in_process_s, result.in_process_phases_s = time_job(
            spark, store, outbox, (ledger,), root / "out", count, ENGINE_IN_PROCESS
        )
    return result


def row(result: SizeResult, what: str, seconds: float) -> str:
    rate = result.rate(seconds)
    vs_read = seconds / result.read_s if result.read_s else 0.0
    return (
        f"| {result.records:>12,} | {what:<40} | {seconds:>8.1f} | {rate:>12,.0f} |"
        f" {vs_read:>7.1f}x |"
    )


def report(results: list[SizeResult], jvm_start_s: float) -> dict[str, Any]:
    print()
    print(f"| {'records':>12} | {'run':<40} | {'seconds':>8} | {'records/s':>12} | vs read |")
    print(f"|{'-' * 14}|{'-' * 42}|{'-' * 10}|{'-' * 14}|{'-' * 9}|")
    for r in results:
        print(row(r, f"read the segments ({r.log_bytes / 1e9:.1f} GB)", r.read_s))
        print(row(r, "scan alone (map stage, no shuffle)", r.scan_s))
        print(row(r, "job (Spark): commitlog + ledger + outbox", r.job_s))
        print(row(r, "job (Spark): commitlog + outbox, no ledger", r.job_without_ledger_s))
        if r.in_process_s:
            print(row(r, "job (in process): commitlog + ledger + outbox", r.in_process_s))
    print()
    for r in results:
        phases = ", ".join(f"{k} {v:.1f}" for k, v in r.job_phases_s.items())
        print(f"{r.records:,} records, Spark job phases (s): {phases}")
        if r.in_process_s:
            phases = ", ".join(f"{k} {v:.1f}" for k, v in r.in_process_phases_s.items())
            print(f"{r.records:,} records, in-process job phases (s): {phases}")
    print(f"Spark session start (JVM): {jvm_start_s:.1f} s, not in any figure above")
    verdicts: dict[str, Any] = {"job_records_per_s": {}, "job_target_met": {}}
    for r in results:
        rate = r.rate(r.job_s)
        verdicts["job_records_per_s"][r.records] = round(rate)
        verdicts["job_target_met"][r.records] = rate >= TARGET_RECORDS_PER_S
        print(
            f"Spark job at {r.records:,} records: {rate:,.0f} records/s; target >= "
            f"{TARGET_RECORDS_PER_S:,}: {'met' if rate >= TARGET_RECORDS_PER_S else 'NOT MET'}"
        )
    largest = results[-1]
    if len(results) > 1:
        small = results[0]
        ratio = largest.job_s / small.job_s
        scale = largest.records / small.records
        marginal = (largest.records - small.records) / (largest.job_s - small.job_s)
        verdicts |= {"time_ratio": round(ratio, 2), "size_ratio": scale,
                     "marginal_records_per_s": round(marginal)}  # fmt: skip
        verdicts["linear_met"] = ratio <= min(scale, LINEAR_RATIO_MAX)
        print(
            f"time {small.records:,} -> {largest.records:,} records: x{ratio:.2f} for x{scale:g} "
            f"the records ({'at most linear' if ratio <= scale else 'WORSE than linear'}); "
            f"marginal rate {marginal:,.0f} records/s"
        )
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k and 1M records")
    parser.add_argument("--sizes", default=None, help="comma-separated record counts")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--segment-mib", type=int, default=SEGMENT_MIB)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else list(QUICK_SIZES if args.quick else SIZES)
    )
    segment_bytes = args.segment_mib * 1024 * 1024
    # The log, and its ledger (about 160 bytes a line).
    record_bytes = bulk_record_bytes(BulkShape(1, body_size_bytes=BODY_BYTES))
    need = max(sizes) * (record_bytes + 160) + segment_bytes + DISK_HEADROOM_BYTES
    args.dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.dir).free
    if free < need:
        print(f"reconcile_bench: {need / 1e9:.0f} GB needed under {args.dir}, "
              f"{free / 1e9:.0f} GB free", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    began = time.perf_counter()
    start_load = load()
    print(
        f"reconcile_bench: {os.cpu_count()} cores, master {args.master}, 1 KiB bodies, "
        f"{args.segment_mib} MiB segments, sizes {', '.join(f'{s:,}' for s in sizes)}; "
        f"load average {start_load} at start",
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="reconcile-bench-", dir=args.dir))
    results: list[SizeResult] = []
    with removed_on_exit(root), quiet_pyspark():
        session_began = time.perf_counter()
        with spark_session(SparkSettings(master=args.master)) as spark:
            jvm_start_s = time.perf_counter() - session_began
            try:
                warm = root / "warm-up"
                store, ledger, outbox = generate(warm, WARM_UP_RECORDS, 64 * 1024 * 1024)
                time_job(spark, store, outbox, (ledger,), warm / "out", WARM_UP_RECORDS)
                shutil.rmtree(warm)
                for count in sizes:
                    results.append(measure(spark, root / str(count), count, segment_bytes))
                    shutil.rmtree(root / str(count))
            except BenchError as e:
                print(f"reconcile_bench: {e}", file=sys.stderr)
                sys.exit(1)
    verdicts = report(results, jvm_start_s)
    end_load = load()
    print(f"load average {start_load} at the start, {end_load} at the end; "
          f"the bench took {time.perf_counter() - began:.0f} s")  # fmt: skip
    if args.json:
        figures = {
            "sizes": [asdict(r) for r in results],
            "verdicts": verdicts,
            "jvm_start_s": jvm_start_s,
            "load": [start_load, end_load],
            "master": args.master,
            "segment_mib": args.segment_mib,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
