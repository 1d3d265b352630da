"""The reconciliation on small data and on a schedule: the in-process engine and incremental runs.

    .venv/bin/python -m bench.reconcile_incremental_bench [--quick] [--dir DIR] [--json PATH]

1. A first ``make run``'s data: ``FIRST_RUN_MESSAGES`` messages in the broker's default 1 GiB
   segment (the rest zeros), a ledger line each, an empty outbox export. ``rocketbox reconcile``
   run as a process, wall time from exec to exit (interpreter, imports, the job, report.html):
   the default (auto: in process) beside ``--engine spark`` (a cold JVM: what a new user waited
   before). Target: at most 5 s in process.
2. A schedule: ``HISTORY`` records (10M; ``--quick``: 1M) reconciled by an incremental run (in
   chunks of the default limit, as a first run over a long retention would), then
   ``NEW`` more (1M; 100k) written and reconciled by the next incremental run, beside a fresh
   run over ``NEW`` records alone (a log of its own). ``NEW`` records arrive in an hour (an
   hourly CronJob), with the default settle window (10 min): the open set a run carries is what
   the last 10 minutes brought. Target: the incremental run costs at most 1.5x the fresh one.

Every record is 1 KiB of body (tests/reconcile/testdata.py's bulk writer, as bench/
reconcile_bench.py writes them), acknowledged STORED; every run's result is checked (all ok,
nothing else; a wrong result exits 1). Everything generated is deleted at the end and on
SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.process_control import load, removed_on_exit
from reconcile.config import ENGINE_IN_PROCESS, JobConfig
from reconcile.job import run
from tests.reconcile.testdata import BulkShape, write_bulk_commitlog, write_bulk_ledger

FIRST_RUN_MESSAGES = 800
FIRST_RUN_SEGMENT_BYTES = 1024**3
FIRST_RUN_TARGET_S = 5.0
HISTORY, NEW = 10_000_000, 1_000_000
QUICK_HISTORY, QUICK_NEW = 1_000_000, 100_000
RUN_INTERVAL_S = 3600  # NEW records arrive between two runs
SEGMENT_BYTES = 1024**3
BODY_BYTES = 1024
INCREMENTAL_RATIO_MAX = 1.5
# A process's deadline: a cold Spark run of the first run's data takes well under this.
PROCESS_DEADLINE_S = 600


class BenchError(Exception):
    """A run gave a wrong result."""


def write_inputs(
    root: Path, count: int, segment_bytes: int, records_per_s: int = 10_000
) -> tuple[Path, Path, Path]:
    """A store, its ledger and an empty outbox export; writing more later rewrites the same
    files with the same first records, as a log that grew."""
    shape = BulkShape(count=count, body_size_bytes=BODY_BYTES, records_per_second=records_per_s)
    store, ledger, outbox = root / "store", root / "acks.jsonl", root / "outbox.jsonl"
    write_bulk_commitlog(store / "commitlog", shape, segment_bytes)
    write_bulk_ledger(ledger, shape)
    outbox.write_text("")
    return store, ledger, outbox


def check(summary: dict[str, Any], count: int) -> None:
    totals = summary.get("incremental", {}).get("cumulative", {}).get("totals") or summary["totals"]
    if (totals["messages"], totals["ok"], totals["lost"]) != (count, count, 0):
        raise BenchError(f"a wrong result for {count:,} records: {totals}")


def first_run(root: Path) -> dict[str, Any]:
    store, ledger, outbox = write_inputs(root, FIRST_RUN_MESSAGES, FIRST_RUN_SEGMENT_BYTES)
    result: dict[str, Any] = {"messages": FIRST_RUN_MESSAGES}
    for name, extra in (
        ("in_process", []),
        ("spark", ["--engine", "spark", "--master", "local[2]"]),
    ):
        out = root / f"out-{name}"
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "rocketbox", "reconcile", "--commitlog", str(store),
             "--outbox", str(outbox), "--acks", str(ledger), "--out", str(out), "--json", *extra],
            capture_output=True, text=True, timeout=PROCESS_DEADLINE_S, check=False,
        )  # fmt: skip
        result[f"{name}_s"] = round(time.perf_counter() - began, 2)
        if done.returncode != 0:
            raise BenchError(f"reconcile ({name}) exited {done.returncode}: {done.stderr[-2000:]}")
        summary = json.loads(done.stdout)
        check(summary, FIRST_RUN_MESSAGES)
        result[f"{name}_engine"] = summary["engine"]
    return result


def timed(config: JobConfig, count: int) -> tuple[float, dict[str, Any]]:
    began = time.perf_counter()
    summary = run(config)
    seconds = time.perf_counter() - began
    check(summary, count)
    return seconds, summary


def schedule(root: Path, history: int, new: int) -> dict[str, Any]:
    live = root / "live"
    rate = max(1, new // RUN_INTERVAL_S)
    store, ledger, outbox = write_inputs(live, history, SEGMENT_BYTES, rate)
    checkpoint = live / "checkpoint"

    def incremental(out: str, total: int) -> tuple[float, dict[str, Any]]:
        config = JobConfig(
            commitlogs=(store,), outbox=outbox, out_dir=live / out, ledgers=(ledger,),
            checkpoint=checkpoint,
        )  # fmt: skip
        return timed(config, total)

    history_s, before = incremental("out-history", history)
    write_inputs(live, history + new, SEGMENT_BYTES, rate)
    shutil.rmtree(live / "out-history")
    incremental_s, summary = incremental("out-new", history + new)
    fresh_root = root / "fresh"
    f_store, f_ledger, f_outbox = write_inputs(fresh_root, new, SEGMENT_BYTES, rate)
    fresh = JobConfig(
        commitlogs=(f_store,), outbox=f_outbox, out_dir=fresh_root / "out", ledgers=(f_ledger,),
        engine=ENGINE_IN_PROCESS,
    )  # fmt: skip
    fresh_s, _ = timed(fresh, new)
    inc = summary["incremental"]
    if inc["new_records"] != new:
        raise BenchError(f"the incremental run read {inc['new_records']:,} records, not {new:,}")
    return {
        "history_records": history,
        "new_records": new,
        "history_run_s": round(history_s, 2),
        "incremental_s": round(incremental_s, 2),
        "fresh_s": round(fresh_s, 2),
        "ratio": round(incremental_s / fresh_s, 2),
        "carried_open": before["incremental"]["open"]["messages"],
        "open_after": inc["open"]["messages"],
        "incremental_phases_s": summary["phases_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    history, new = (QUICK_HISTORY, QUICK_NEW) if args.quick else (HISTORY, NEW)
    root = Path(tempfile.mkdtemp(prefix="rocketbox-reconcile-bench-", dir=args.dir))
    started_load = load()
    with removed_on_exit(root):
        first = first_run(root / "first")
        shutil.rmtree(root / "first")
        sched = schedule(root / "schedule", history, new)
    result = {"load_average_at_start": started_load, "cores": os.cpu_count(), "first_run": first,
              "schedule": sched}  # fmt: skip
    print(f"load average at start: {started_load}; cores: {os.cpu_count()}")
    print(
        f"first make run's data ({first['messages']} messages), rocketbox reconcile as a process: "
        f"{first['in_process_s']:.2f} s in process, {first['spark_s']:.2f} s with Spark "
        f"(target <= {FIRST_RUN_TARGET_S:.0f} s in process)"
    )
    print(
        f"incremental: {sched['new_records']:,} new records after {sched['history_records']:,}: "
        f"{sched['incremental_s']:.2f} s ({sched['carried_open']:,} carried open), a fresh run "
        f"over {sched['new_records']:,}: {sched['fresh_s']:.2f} s, ratio {sched['ratio']:.2f} "
        f"(target <= {INCREMENTAL_RATIO_MAX}); the history run: {sched['history_run_s']:.2f} s"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    ok = first["in_process_s"] <= FIRST_RUN_TARGET_S and sched["ratio"] <= INCREMENTAL_RATIO_MAX
    print("targets met" if ok else "a target missed")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        raise SystemExit(1) from e
