"""The sidecar beside a direct client of the broker, its outbox backends and targets, in one run.

    .venv/bin/python -m bench.sidecar [--quick] [--only a|b|c|d|e] [--json PATH]
        [--event-loop uvloop|asyncio] [--skip-missing] [--sidecar-arg=--OPTION=VALUE ...]
        [--messages N] [--window W] [--stream-window S] [--streams K,K] [--rates R,R]
        [--latency-seconds T] [--overload-seconds T] [--overload-intake-in-flight-max N]
        [--overload-pending-calls-max N]
        [--spool-messages N] [--drain-messages N] [--drain-concurrency C]
        [--drain-claim-batch B] [--sidecar-log-level LEVEL]

Real ``rocketbox broker`` and ``rocketbox sidecar`` processes (stopped with SIGTERM), 1 KiB
bodies, one topic of 8 queues; the clients are in this process. Every row gives the CPU each
process spent per message over the measurement (/proc: sc = the sidecar, br = the broker,
bench = this process, i.e. the clients) beside its rate, and each target as met or not met.

(a) Broker up. "direct": ``sidecar.producer.Producer.send`` in this process (one message per
    SendMessage, no coalescing: a plain client of the broker), W in flight. Through the sidecar:
    unary ``Send`` with W in flight, coalescing on (the default) and, on a second sidecar
    started with --no-coalesce, off; ``SendStream`` with K streams of S in flight each, for each
    K; ``SendBatch`` of 32 messages, 8 calls in flight; the client library's batching sender
    (``rocketbox_client``, linger 1 ms, 256 messages a batch, 4 batches in flight) with W
    concurrent ``send()`` calls. Latency at each paced rate R: open loop (a send starts at its
    scheduled time whatever the earlier ones do, and its latency counts from then, so a stall
    is not hidden), direct and sidecar alternating in 5 rounds, T seconds per rate in all;
    added latency = the sidecar's percentile minus the direct one, beside Dapr's sidecar (its
    published p99, ``DAPR_ADDED_P99_MS``). Overload: a third sidecar, unary ``Send`` open loop
    at twice the unary STORED rate just measured; the p99 of what it answered (STORED/SPOOLED)
    and the excess it refused at once (RESOURCE_EXHAUSTED: how many, and their p99), beside the
    calls gRPC's server dropped (CANCELLED) before the sidecar saw them.
(b) Spool rate with the broker DOWN (the sidecar points at a closed port), per outbox backend
    (RocksDB in a temporary directory, Redis with a unique key prefix, MySQL/MariaDB with a
    unique table): msgs/s answered SPOOLED through ``Send`` (W in flight), ``SendStream`` (the
    first K), ``SendBatch`` and the client library. The resend pool runs as in production: it
    probes the dead broker, one send an interval, and leaves the spooled entries alone; the
    SendStream row is also set beside (a)'s SendStream STORED rate. Beside them the physical
    reference:
    ``outbox.put`` in this process, 64 threads putting one entry at a time, and one thread
    putting batches of 100. Then, RocksDB only, THROTTLED: the broker up with flow control
    forced on (its admin service, as ``rocketbox flow-control on``), so that it answers every
    send TOO_MANY_REQUESTS; every message must be answered SPOOLED with cause THROTTLED.
(c) Drain rate per backend: N entries put straight into the outbox with the library (due now,
    as after an outage), a fresh broker started, then a sidecar; msgs/s from the sidecar's ready
    line until the broker holds all N (its admin DescribeTopic) and, for Redis and MySQL, the
    outbox's stats show none pending; RocksDB's stats (one process at a time) are checked after
    the sidecar stops. Every entry must be DELIVERED once. Beside them, against the same
    broker: the direct producer, and raw SendMessage requests of 32 messages.
(d) The sidecar's resident memory under (a)'s, (b)'s and (c)'s loads: the highest VmRSS sampled
    every 50 ms from /proc/PID/status, and VmHWM (the kernel's peak) so far. ``--only d`` runs
    just the loads it watches (the sidecar's parts of (a) and the RocksDB sidecar of (b)).
(e) The sidecar's RocketMQ front (bench/sidecar/front.py): the official Python client's
    Producer and SimpleConsumer pointed at the front beside the same client pointed at the
    broker: throughput ratio, added p50/p99 at 300 msgs/s, CPU per message, and the added
    latency of each forwarded receive and ack call.

The bench's clients run on the same cores as the sidecar and the broker (2 on the machine this
was written for); ``--event-loop`` sets the loop of all three processes. Ratios within one run
matter more than absolute figures: this machine is noisy, and other work on it shows in the load
average printed at the start and the end. The targets are the constants below;
docs/benchmarks.md says what each row means.

Rows that need what has not landed (the sidecar's --no-coalesce or --intake-in-flight-max, the
client library) make the bench exit 2 before it starts, as a missing Redis or MariaDB does;
``--skip-missing`` runs the rest and prints those rows as not run. Everything started is
stopped, and every temporary directory, Redis key and MySQL table is removed, also on
SIGINT/SIGTERM (exit 130). A failed measurement exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.process_control import BenchError, cancelled_by_signals, interrupted, load
from bench.sidecar.core import Settings
from bench.sidecar.drain import DrainParts
from bench.sidecar.front import FrontParts
from bench.sidecar.processes import Feature, Resources, check_services, features
from bench.sidecar.sends import SendParts
from bench.sidecar.spool import SpoolParts
from bench.sidecar.table import table
from bench.sidecar.targets import (
    BACKENDS,
    FEATURES_BY_PART,
    LATENCY_ROUNDS,
    OVERLOAD_FACTOR,
    OVERLOAD_INTAKE_IN_FLIGHT_MAX,
    OVERLOAD_PENDING_CALLS_MAX,
    RAW_THREADS,
)
from rocketbox.event_loop import EVENT_LOOP_DEFAULT, EVENT_LOOPS, loop_factory
from rocketbox.logs import LOG_LEVELS

PROG = "python -m bench.sidecar"


class Bench(SendParts, SpoolParts, DrainParts, FrontParts):
    """Every part of the bench."""


async def run_parts(bench: Bench, only: str | None) -> None:
    if only in (None, "a"):
        print("(a) throughput, latency and overload, broker up", file=sys.stderr, flush=True)
        await bench.part_a()
    if only in (None, "b"):
        print("(b) spool rate, broker down; then throttled", file=sys.stderr, flush=True)
        await bench.part_b(BACKENDS)
    if only in (None, "c"):
        print("(c) drain rate after the broker returns", file=sys.stderr, flush=True)
        await bench.part_c(BACKENDS)
    if only in (None, "e"):
        print("(e) the official client through the RocketMQ front", file=sys.stderr, flush=True)
        await bench.part_e()
    if only == "d":
        print("(d) the sidecar's memory under (a)'s and (b)'s loads", file=sys.stderr, flush=True)
        await bench.part_a(memory_only=True)
        await bench.part_b(("rocksdb",), memory_only=True)


def numbers(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def parse_args() -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke check")
    parser.add_argument("--only", choices=("a", "b", "c", "d", "e"), default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--event-loop", choices=EVENT_LOOPS, default=EVENT_LOOP_DEFAULT,
        help="the loop of the broker, the sidecar and this process (rocketbox --event-loop)",
    )  # fmt: skip
    parser.add_argument(
        "--skip-missing", action="store_true",
        help="run without the rows whose sidecar option or client library has not landed",
    )  # fmt: skip
    parser.add_argument(
        "--sidecar-arg", action="append", default=[], metavar="--OPTION=VALUE",
        help="passed to every sidecar (repeatable), e.g. --sidecar-arg=--coalesce-messages-max=256",
    )  # fmt: skip
    parser.add_argument("--messages", type=int, default=None, help="(a) per throughput figure")
    parser.add_argument("--window", type=int, default=64, help="(a) unary sends in flight")
    parser.add_argument("--stream-window", type=int, default=256, help="SendStream in flight")
    parser.add_argument(
        "--streams", type=numbers, default=(1, 4), help="SendStream calls, one row each: 1,4"
    )
    parser.add_argument(
        "--rates", type=numbers, default=(300.0, 1_000.0), help="(a) paced msgs/s: 300,1000"
    )
    parser.add_argument("--latency-seconds", type=float, default=None, help="(a) per rate")
    parser.add_argument("--overload-seconds", type=float, default=None, help="(a) overload")
    parser.add_argument(
        "--overload-intake-in-flight-max", type=int, default=OVERLOAD_INTAKE_IN_FLIGHT_MAX,
        help="the overload sidecar's --intake-in-flight-max",
    )  # fmt: skip
    parser.add_argument(
        "--overload-pending-calls-max", type=int, default=OVERLOAD_PENDING_CALLS_MAX,
        help="the overload sidecar's --pending-calls-max",
    )  # fmt: skip
    parser.add_argument("--spool-messages", type=int, default=None, help="(b) per figure")
    parser.add_argument("--drain-messages", type=int, default=None, help="(c) per backend")
    parser.add_argument("--drain-concurrency", type=int, default=256)
    parser.add_argument("--drain-claim-batch", type=int, default=1_024)
    parser.add_argument(
        "--sidecar-log-level", choices=LOG_LEVELS, default="INFO",
        help="the processes' --log-level (INFO, the default, logs every spool)",
    )  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None, help="temporary data (default: tmp)")
    args = parser.parse_args()
    quick = args.quick
    settings = Settings(
        messages=args.messages or (2_000 if quick else 20_000),
        window=args.window,
        stream_window=args.stream_window,
        streams=tuple(int(k) for k in args.streams),
        rates=args.rates,
        latency_seconds=args.latency_seconds or (2.0 if quick else 20.0),
        overload_seconds=args.overload_seconds or (1.5 if quick else 5.0),
        overload_intake_in_flight_max=args.overload_intake_in_flight_max,
        overload_pending_calls_max=args.overload_pending_calls_max,
        spool_messages=args.spool_messages or (2_000 if quick else 20_000),
        raw_messages=args.spool_messages or (2_000 if quick else 20_000),
        drain_messages=args.drain_messages or (2_000 if quick else 20_000),
        drain_concurrency=args.drain_concurrency,
        drain_claim_batch=args.drain_claim_batch,
    )
    for name, value in asdict(settings).items():
        values = value if isinstance(value, tuple) else (value,)
        if not values or any(v is not None and v <= 0 for v in values):
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if settings.raw_messages < RAW_THREADS * 3:
        parser.error(f"--spool-messages must be at least {RAW_THREADS * 3}")
    return args, settings


def needed_features(only: str | None, found: dict[str, Feature]) -> list[Feature]:
    """What the parts to run need and is missing; --event-loop is needed by every part."""
    parts = ("a", "b", "c", "e") if only is None else (only,)
    names = {"--event-loop", *(name for p in parts for name in FEATURES_BY_PART[p])}
    return [found[name] for name in sorted(names) if not found[name].present]


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float (no figure, no bound) as None: strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def report(bench: Bench, args: argparse.Namespace, start_load: str, began: float) -> None:
    end_load = load()
    print()
    print(table(bench.rows))
    print()
    print(
        "µs/msg: CPU per message of the sidecar (sc), the broker (br) and this process (bench: "
        "the clients) over the figure, from /proc; cores: CPU seconds per wall second. All share "
        "the machine's cores, so the bench's clients take CPU the sidecar and broker would "
        f"otherwise have. Event loop: {args.event_loop} in every process."
    )
    print(
        "(a) latency: open loop, from each send's scheduled start; direct and sidecar alternate "
        f"in {LATENCY_ROUNDS} rounds. Overload: a fresh sidecar, open loop at "
        f"{OVERLOAD_FACTOR:g}x (a)'s unary STORED rate. (b) broker down: the resend pool runs, "
        "probing; THROTTLED: it is held off (first resend in 1 h). (c) from the sidecar's "
        "ready line to all N at the broker (and none pending). (e) the official Python "
        "client, direct = pointed at the broker, front = at the sidecar's RocketMQ front; "
        "rounds alternate; consumer calls one at a time."
    )
    for row in bench.rows:
        if row.detail or row.not_run:
            print(f"  {row.part} {row.figure}: {row.not_run or row.detail}")
    not_met = [r for r in bench.rows if r.met is False]
    for r in not_met:
        missed = "; ".join(f"{c.target} ({c.to_target:.2f}x of it)" for c in r.checks if not c.met)
        print(f"TARGET NOT MET: ({r.part}) {r.figure}: {r.value_text()}, target {missed}")
    not_run = [r for r in bench.rows if r.not_run]
    for r in not_run:
        print(f"NOT RUN: ({r.part}) {r.figure}: {r.not_run}")
    if not not_met:
        print("every target measured was met")
    print(
        f"load average {start_load} at the start, {end_load} at the end; "
        f"the bench took {time.perf_counter() - began:.0f} s"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "settings": asdict(bench.s),
                    "cores": os.cpu_count(),
                    "event_loop": args.event_loop,
                    "sidecar_args": args.sidecar_arg,
                    "load_average": {"start": start_load, "end": end_load},
                    "sidecar_log_level": args.sidecar_log_level,
                    "rows": [finite(asdict(r)) for r in bench.rows],
                    "targets_not_met": [r.figure for r in not_met],
                    "not_run": [r.figure for r in not_run],
                    "failures": bench.failed,
                },
                indent=2,
                allow_nan=False,
            )
            + "\n"
        )


def main() -> None:
    args, settings = parse_args()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, interrupted)
    missing = check_services(
        need_redis=args.only in (None, "b", "c"), need_mysql=args.only in (None, "b", "c")
    )
    found = features()
    absent = needed_features(args.only, found)
    if absent and not args.skip_missing:
        missing += [f"{f.name}, needed by {f.rows} (--skip-missing runs without)" for f in absent]
    if missing:
        print("bench.sidecar: what it needs is not there:", file=sys.stderr)
        for m in missing:
            print(f"  - {m}", file=sys.stderr)
        sys.exit(2)
    began = time.perf_counter()
    start_load = load()
    print(
        f"bench.sidecar: 1 KiB bodies, {os.cpu_count()} cores, load average {start_load} at "
        f"start{', quick' if args.quick else ''}{f', only ({args.only})' if args.only else ''}; "
        f"event loop {args.event_loop}; sidecar args {args.sidecar_arg}; {settings}",
        flush=True,
    )
    res = Resources(
        Path(tempfile.mkdtemp(prefix="rocketbox-sidecar-bench-", dir=args.dir)),
        args.sidecar_log_level,
        args.event_loop,
        args.sidecar_arg,
    )
    bench = Bench(settings, res, found)
    code = 0
    try:
        with asyncio.Runner(loop_factory=loop_factory(args.event_loop)) as runner:
            runner.run(cancelled_by_signals(run_parts(bench, args.only)))
    except BenchError as e:
        print(f"\nbench failed: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); stopping everything started", file=sys.stderr)
        code = 130
    finally:
        problems = res.cleanup()
        for p in problems:
            print(f"cleanup: {p}", file=sys.stderr)
    if code:
        sys.exit(code)
    report(bench, args, start_load, began)
    if bench.failed:
        print("some measurements had failures (above): the figures are not valid", file=sys.stderr)
        for f in bench.failed:
            print(f"  {f}", file=sys.stderr)
        sys.exit(1)
