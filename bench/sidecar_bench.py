"""The sidecar beside a direct client of the broker, its outbox backends and targets, in one run.

    .venv/bin/python bench/sidecar_bench.py [--quick] [--only a|b|c|d] [--json PATH]
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
    added latency = the sidecar's percentile minus the direct one, beside Dapr's sidecar
    (+1.72 ms p99). Overload: a third sidecar, unary ``Send`` open loop at twice the unary
    STORED rate just measured; the p99 of what it answered (STORED/SPOOLED) and the excess it
    refused at once (RESOURCE_EXHAUSTED: how many, and their p99), beside the calls gRPC's
    server dropped (CANCELLED) before the sidecar saw them.
(b) Spool rate with the broker DOWN (the sidecar points at a closed port), per outbox backend
    (RocksDB in a temporary directory, Redis with a unique key prefix, MySQL/MariaDB with a
    unique table): msgs/s answered SPOOLED through ``Send`` (W in flight), ``SendStream`` (the
    first K), ``SendBatch`` and the client library. The resend pool is held off (first resend
    in an hour) so that the figure is intake alone. Beside them the physical reference:
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
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from sidecar_bench_clients import (
    CANCELLED,
    LIBRARY_SETTINGS,
    RESOURCE_EXHAUSTED,
    BatchClient,
    Cpu,
    CpuMeter,
    DirectClient,
    LibraryClient,
    Run,
    Send,
    SidecarClient,
    closed_loop,
    deadline_s,
    make_entries,
    open_loop,
    percentile,
)
from sidecar_bench_processes import (
    HOST,
    REF_TOPIC,
    RPC_TIMEOUT_S,
    TOPIC,
    BenchError,
    Child,
    Feature,
    Resources,
    check_services,
    closed_port,
    features,
    set_flow_control,
    wait_quiet,
)

from outbox.entry import OutboxEntry
from outbox.outbox import Outbox
from rocketbox.event_loop import EVENT_LOOP_DEFAULT, EVENT_LOOPS, loop_factory
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc

BACKENDS = ("rocksdb", "redis", "mysql")
# The targets (one run, quiet machine, 1 KiB).
UNARY_VS_DIRECT_MIN = 1.5
SIDECAR_US_MAX = {"Send": 300.0, "SendStream": 150.0, "SendBatch": 70.0}  # sidecar CPU/message
STREAM_RATE_MIN = 6_000
LIBRARY_RATE_MIN = 10_000
# Added latency (ms) at each paced rate, by percentile.
ADDED_LATENCY_MAX_MS = {300.0: {99: 1.0}, 1_000.0: {50: 1.5, 99: 2.0}}
DAPR_ADDED_P99_MS = 1.72
SPOOL_BATCHED_MIN = {"rocksdb": 10_000, "redis": 8_000, "mysql": 5_000}  # SendBatch, library
SPOOL_STREAM_MIN = 4_000
SPOOL_UNARY_VS_STORED_MIN = 0.9
THROTTLED_STREAM_MIN = 4_000
DRAIN_MIN = {"rocksdb": 9_000, "redis": 7_000, "mysql": 5_000}
OVERLOAD_FACTOR = 2.0
OVERLOAD_P99_MAX_MS = 50.0
# Below this share of the rate it was to offer, the bench's own CPU limited the overload row.
OVERLOAD_OFFERED_MIN = 0.9
# The overload sidecar's admission limits, an operator's choice for a ~50 ms budget at this
# machine's ~3k unary sends/s: (64 inside + 32 waiting in gRPC) / 3k/s is about 32 ms. The
# sidecar's defaults (2,048 / 256) favour bursts and big batches over that bound.
OVERLOAD_INTAKE_IN_FLIGHT_MAX = 64
OVERLOAD_PENDING_CALLS_MAX = 32
RSS_MAX_MB = 200.0
BATCH = 32  # messages per SendBatch (and per raw SendMessage in (c)'s reference)
BATCH_WINDOW = 8  # SendBatch calls (raw SendMessage requests) in flight
SPOOL_SENDERS = 64
RAW_THREADS = 64
RAW_BATCH = 100
LATENCY_ROUNDS = 5
# The resend pool must not compete with intake in (b): its first resend is an hour away.
NO_RESEND_ARGS = ("--backoff-initial-ms=3600000", "--backoff-max-ms=3600000")
DRAIN_POLL_MS = 50
T = TypeVar("T")
# Which rows need what may not have landed yet, by part.
FEATURES_BY_PART = {
    "a": ("--no-coalesce", "--intake-in-flight-max", "--pending-calls-max", "rocketbox_client"),
    "b": ("rocketbox_client",),
    "c": (),
    "d": ("--intake-in-flight-max", "--pending-calls-max", "rocketbox_client"),
}


# -- the table ------------------------------------------------------------------------------------
@dataclass
class Check:
    """One target of a row."""

    target: str
    to_target: float  # how far along the target is (>= 1: met)
    met: bool


def at_least(value: float, minimum: float, target: str) -> Check:
    return Check(target, value / minimum, value >= minimum)


def at_most(value: float, maximum: float, target: str) -> Check:
    return Check(target, maximum / value if value > 0 else math.inf, value <= maximum)


def rate_at_least(value: float, minimum: float) -> Check:
    return at_least(value, minimum, f">= {minimum:,.0f}")


@dataclass
class Row:
    part: str
    figure: str
    value: float
    unit: str
    reference: str = ""  # what the figure is compared with, and its value
    ratio: float | None = None  # value / reference
    checks: list[Check] = field(default_factory=list)
    us_per_message: dict[str, float] = field(default_factory=dict)  # CPU, by process
    cores: str = ""  # CPU seconds per wall second, by process
    detail: str = ""
    failures: int = 0  # answers other than the expected: the figure is not valid
    not_run: str = ""  # why it was not measured in this run

    @property
    def met(self) -> bool | None:
        return all(c.met for c in self.checks) if self.checks else None

    def value_text(self) -> str:
        if self.not_run:
            return "not run"
        if math.isnan(self.value):
            return f"- {self.unit}"
        digits = 2 if self.unit == "ms" else 0
        return f"{self.value:,.{digits}f} {self.unit}"

    def cells(self) -> list[str]:
        us = self.us_per_message
        return [
            self.part,
            self.figure,
            self.value_text(),
            self.reference,
            "" if self.ratio is None else f"{self.ratio:.2f}x",
            "; ".join(c.target for c in self.checks),
            "; ".join(
                f"{c.to_target:.2f}x" if math.isfinite(c.to_target) else "-" for c in self.checks
            ),
            "; ".join("met" if c.met else "NOT MET" for c in self.checks),
            *(f"{us[k]:,.0f}" if k in us else "" for k in ("sc", "br", "bench")),
            self.cores,
        ]


HEADER = [
    "", "figure", "value", "reference", "ratio", "target", "of target", "verdict",
    "sc µs/msg", "br µs/msg", "bench µs/msg", "cores",
]  # fmt: skip
RIGHT_ALIGNED = {2, 4, 6, 8, 9, 10}


def table(rows: Sequence[Row]) -> str:
    cells = [HEADER, *(r.cells() for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = []
    for n, c in enumerate(cells):
        text = "  ".join(
            (v.rjust(w) if i in RIGHT_ALIGNED else v.ljust(w))
            for i, (v, w) in enumerate(zip(c, widths, strict=True))
        )
        lines.append(text.rstrip())
        if n == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f} ms"


def outcomes_text(run: Run) -> str:
    return ", ".join(f"{o} {n:,}" for o, n in run.outcomes.most_common())


def rate_row(part: str, figure: str, run: Run, **kw: Any) -> Row:
    detail = f"{run.count:,} msgs in {run.seconds:.2f} s"
    if run.failures:
        detail += f"; {run.failures:,} FAILED ({outcomes_text(run)}), e.g. {run.failure_example}"
    return Row(
        part, figure, run.rate, "msgs/s", us_per_message=run.us_per_message(),
        cores=run.cpu.cores(), detail=detail, failures=run.failures, **kw,
    )  # fmt: skip


def sidecar_cpu_at_most(run: Run, call: str) -> Check:
    maximum = SIDECAR_US_MAX[call]
    return at_most(run.us_per_message()["sc"], maximum, f"sc <= {maximum:g} µs/msg")


def versus(run: Run, base: float | None, name: str) -> dict[str, Any]:
    """The reference and ratio cells of a row compared with ``base`` msgs/s."""
    if base is None:
        return {}
    return {"reference": f"{name} {base:,.0f}", "ratio": run.rate / base}


# -- the parts ------------------------------------------------------------------------------------
@dataclass
class Settings:
    messages: int
    window: int
    stream_window: int
    streams: tuple[int, ...]
    rates: tuple[float, ...]
    latency_seconds: float
    overload_seconds: float
    overload_intake_in_flight_max: int
    overload_pending_calls_max: int
    spool_messages: int
    raw_messages: int
    drain_messages: int
    drain_concurrency: int
    drain_claim_batch: int


class Bench:
    def __init__(self, settings: Settings, res: Resources, found: dict[str, Feature]) -> None:
        self.s = settings
        self.res = res
        self.features = found
        self.rows: list[Row] = []
        self.failed: list[str] = []
        self.direct_rate: float | None = None
        self.unary_rate: float | None = None  # (a)'s unary STORED rate, coalescing on
        self.drain_refs: tuple[Run, Run] | None = None

    def add(self, row: Row) -> None:
        self.rows.append(row)
        if row.failures:
            self.failed.append(f"({row.part}) {row.figure}: {row.detail}")
        print(f"  {row.part} {row.figure}: {row.value_text()}", file=sys.stderr, flush=True)

    def missing(self, part: str, figure: str, feature: str) -> bool:
        """True (and the row printed as not run) when ``feature`` has not landed."""
        if self.features[feature].present:
            return False
        self.add(Row(part, figure, math.nan, "", not_run=f"needs {feature}, not present"))
        return True

    def memory_row(self, sidecar: Child, phase: str) -> None:
        assert sidecar.memory is not None
        peak_mb = sidecar.memory.take() / 1024
        self.add(
            Row("d", f"sidecar VmRSS peak, {phase}", peak_mb, "MB",
                reference=f"VmHWM {sidecar.hwm_mb():.0f} MB so far",
                checks=[at_most(peak_mb, RSS_MAX_MB, f"<= {RSS_MAX_MB:g} MB")])
        )  # fmt: skip

    async def settle(self, broker: Child | None) -> None:
        """Before a figure: the broker's work left over from the last one is done."""
        if broker is not None:
            await asyncio.to_thread(wait_quiet, broker)

    async def library_run(
        self, endpoint: str, count: int, expect: str, procs: dict[str, Child], broker: Child | None
    ) -> Run:
        """The client library's batching sender, ``window`` concurrent ``send()`` calls, after a
        warm-up on the same sender."""
        window = self.s.window
        async with LibraryClient(endpoint) as library:
            await closed_loop(library.send, 4 * window, window, expect, CpuMeter({}))
            await self.settle(broker)
            return await closed_loop(library.send, count, window, expect, CpuMeter(procs))

    # (a) -----------------------------------------------------------------------------------
    async def part_a(self, memory_only: bool = False) -> None:
        s = self.s
        broker = await asyncio.to_thread(self.res.broker)
        outbox_url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, outbox_url)
        direct = DirectClient(broker.port)
        client = SidecarClient(sidecar.endpoint, BATCH)
        procs = {"sc": sidecar, "br": broker}
        w = s.window
        try:
            warmup = 2 * w
            await closed_loop(direct.send, warmup, w, "stored", CpuMeter({}))
            await closed_loop(client.send, warmup, w, "stored", CpuMeter({}))
            await client.stream(warmup, max(s.streams), s.stream_window, "stored", CpuMeter({}))
            await client.run_batches(warmup * BATCH, BATCH_WINDOW, "stored", CpuMeter({}))
            assert sidecar.memory is not None
            sidecar.memory.take()
            if not memory_only:
                await self.settle(broker)
                run = await closed_loop(
                    direct.send, s.messages, w, "stored", CpuMeter({"br": broker})
                )
                self.direct_rate = run.rate
                self.add(rate_row("a", f"direct: Producer -> broker, 1 msg/request, {w} in flight",
                                  run))  # fmt: skip
            await self.settle(broker)
            unary = await closed_loop(client.send, s.messages, w, "stored", CpuMeter(procs))
            self.unary_rate = unary.rate
            checks = [sidecar_cpu_at_most(unary, "Send")]
            if self.direct_rate is not None:
                checks.insert(0, at_least(unary.rate / self.direct_rate, UNARY_VS_DIRECT_MIN,
                                          f">= {UNARY_VS_DIRECT_MIN:g}x direct"))  # fmt: skip
            self.add(
                rate_row("a", f"Send (unary), coalescing on, {w} in flight", unary,
                         checks=checks, **versus(unary, self.direct_rate, "direct"))
            )  # fmt: skip
            if not memory_only:
                await self.coalescing_off(broker)
            for streams in s.streams:
                await self.settle(broker)
                stream = await client.stream(
                    s.messages * 2, streams, s.stream_window, "stored", CpuMeter(procs)
                )
                self.add(
                    rate_row("a", f"SendStream, {streams} x {s.stream_window} in flight", stream,
                             checks=[rate_at_least(stream.rate, STREAM_RATE_MIN),
                                     sidecar_cpu_at_most(stream, "SendStream")],
                             **versus(stream, self.direct_rate, "direct"))
                )  # fmt: skip
            await self.settle(broker)
            batches = await client.run_batches(
                s.messages * 2, BATCH_WINDOW, "stored", CpuMeter(procs)
            )
            self.add(
                rate_row("a", f"SendBatch of {BATCH}, {BATCH_WINDOW} in flight",
                         batches, checks=[sidecar_cpu_at_most(batches, "SendBatch")],
                         **versus(batches, self.direct_rate, "direct"))
            )  # fmt: skip
            figure = f"client library batching sender, {w} concurrent send()"
            if not self.missing("a", figure, "rocketbox_client"):
                lib = await self.library_run(
                    sidecar.endpoint, s.messages * 2, "stored", procs, broker
                )
                row = rate_row("a", figure, lib, checks=[rate_at_least(lib.rate, LIBRARY_RATE_MIN)],
                               **versus(lib, self.direct_rate, "direct"))  # fmt: skip
                row.detail += f"; {LIBRARY_SETTINGS}"
                self.add(row)
            self.memory_row(sidecar, "(a) throughput")
            if not memory_only:
                for rate in s.rates:
                    await self.latency(direct, client, broker, sidecar, rate)
                self.memory_row(sidecar, "(a) paced")
        finally:
            await client.close()
            await direct.close()
        await asyncio.to_thread(self.res.stop, sidecar)
        await self.overload(broker)
        await asyncio.to_thread(self.res.stop, broker)

    async def coalescing_off(self, broker: Child) -> None:
        """Unary Send through a second sidecar started with --no-coalesce: one SendMessage per
        message, the sidecar before coalescing."""
        w = self.s.window
        figure = f"Send (unary), coalescing off, {w} in flight"
        if self.missing("a", figure, "--no-coalesce"):
            return
        url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, "--no-coalesce")
        client = SidecarClient(sidecar.endpoint)
        try:
            await closed_loop(client.send, 2 * w, w, "stored", CpuMeter({}))
            await self.settle(broker)
            run = await closed_loop(
                client.send, self.s.messages, w, "stored", CpuMeter({"sc": sidecar, "br": broker})
            )
        finally:
            await client.close()
        await asyncio.to_thread(self.res.stop, sidecar)
        row = rate_row("a", figure, run, **versus(run, self.direct_rate, "direct"))
        row.detail += " (a second sidecar, --no-coalesce)"
        if self.unary_rate:
            row.detail += f"; {run.rate / self.unary_rate:.2f}x of coalescing on"
        self.add(row)

    async def latency(
        self, direct: DirectClient, client: SidecarClient, broker: Child, sidecar: Child,
        rate: float,
    ) -> None:  # fmt: skip
        s = self.s
        per_round = max(1, int(rate * s.latency_seconds / LATENCY_ROUNDS / 2))
        sends: dict[str, Send] = {"direct": direct.send, "sidecar": client.send}
        # The direct rounds' CPU leaves the (idle) sidecar out: it is not on their path.
        procs = {"direct": {"br": broker}, "sidecar": {"sc": sidecar, "br": broker}}
        lat: dict[str, list[float]] = {name: [] for name in sends}
        cpu = {name: Cpu() for name in sends}
        failures = dict.fromkeys(sends, 0)
        seconds = dict.fromkeys(sends, 0.0)
        for send in sends.values():
            await open_loop(send, max(1, int(rate * 0.5)), rate)
        await self.settle(broker)
        for _ in range(LATENCY_ROUNDS):
            for name, send in sends.items():
                meter = CpuMeter(procs[name])
                got = await open_loop(send, per_round, rate)
                cpu[name] += meter.read()
                seconds[name] += got.seconds
                lat[name] += got.answered("stored")
                failures[name] += sum(got.failures("stored").values())
        p = {(n, q): percentile(lat[n], q) for n in lat for q in (50, 99)}
        base = f"{rate:,.0f}/s paced"
        for name in sends:
            n = len(lat[name]) + failures[name]
            achieved = n / seconds[name]
            detail = f"{n:,} sends; achieved {achieved:,.0f} sends/s (last answer included)"
            if achieved < 0.95 * rate:
                detail += ": the load was NOT sustained, the latency is mostly queueing"
            if failures[name]:
                detail += f"; {failures[name]:,} FAILED (not stored)"
            for q in (50, 99):
                self.add(
                    Row("a", f"{name} p{q} latency, {base}", p[(name, q)], "ms",
                        us_per_message=cpu[name].us_per_message(n), cores=cpu[name].cores(),
                        detail=detail, failures=failures[name] if q == 50 else 0)
                )  # fmt: skip
        targets = ADDED_LATENCY_MAX_MS.get(rate, {})
        for q in (50, 99):
            added = p[("sidecar", q)] - p[("direct", q)]
            checks = [at_most(added, targets[q], f"<= {targets[q]:g} ms")] if q in targets else []
            peer: dict[str, Any] = {}
            if q == 99:
                peer = {"reference": f"Dapr adds {DAPR_ADDED_P99_MS} ms",
                        "ratio": added / DAPR_ADDED_P99_MS}  # fmt: skip
            self.add(
                Row("a", f"added p{q} latency, {rate:,.0f}/s paced", added, "ms",
                    checks=checks, **peer)
            )  # fmt: skip

    async def overload(self, broker: Child) -> None:
        """Unary Send open loop at OVERLOAD_FACTOR x the unary STORED rate, on a fresh sidecar:
        what it answers must stay fast, the excess be refused at once, its memory bounded."""
        s = self.s
        figure = f"overload: Send open loop at {OVERLOAD_FACTOR:g}x unary, answered p99"
        if self.missing("a", figure, "--pending-calls-max"):
            return
        assert self.unary_rate is not None
        args = (
            f"--intake-in-flight-max={s.overload_intake_in_flight_max}",
            f"--pending-calls-max={s.overload_pending_calls_max}",
        )
        url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, *args)
        client = SidecarClient(sidecar.endpoint)
        rate = OVERLOAD_FACTOR * self.unary_rate
        count = max(1, int(rate * s.overload_seconds))
        try:
            await closed_loop(client.send, 2 * s.window, s.window, "stored", CpuMeter({}))
            await self.settle(broker)
            assert sidecar.memory is not None
            sidecar.memory.take()
            meter = CpuMeter({"sc": sidecar, "br": broker})
            got = await open_loop(client.send, count, rate)
            cpu = meter.read()
        finally:
            await client.close()
        stored, spooled = got.answered("stored"), got.answered("spooled")
        answered = stored + spooled
        refused, dropped = got.answered(RESOURCE_EXHAUSTED), got.answered(CANCELLED)
        failed = got.failures("stored", "spooled", RESOURCE_EXHAUSTED, CANCELLED)
        offered = got.offered_rate / rate
        detail = (
            f"{count:,} sends in {got.seconds:.2f} s, offered {got.offered_rate:,.0f}/s of "
            f"{rate:,.0f}/s; answered {len(answered):,} (stored {len(stored):,}, spooled "
            f"{len(spooled):,}), p50 {ms(percentile(answered, 50))}; p99 from the call's own "
            f"start {ms(percentile(got.answered('stored', 'spooled', from_start=True), 99))}"
        )
        if offered < OVERLOAD_OFFERED_MIN:
            detail += "; the bench could NOT offer the rate (its own CPU): not an overload test"
        if failed:
            detail += f"; FAILED: {failed}"
        us = cpu.us_per_message(count)
        p99 = percentile(answered, 99)
        self.add(
            Row("a", figure, p99, "ms", reference=f"offered {got.offered_rate:,.0f}/s",
                ratio=offered,
                checks=[at_most(p99, OVERLOAD_P99_MAX_MS, f"<= {OVERLOAD_P99_MAX_MS:g} ms"),
                        at_least(offered, OVERLOAD_OFFERED_MIN,
                                 f"offered >= {OVERLOAD_OFFERED_MIN:g}x")],
                us_per_message=us, cores=cpu.cores(), detail=detail,
                failures=sum(failed.values()))
        )  # fmt: skip
        # Refused at once: by admission control (RESOURCE_EXHAUSTED, with a retry-after) or,
        # before the sidecar's code, by gRPC past --pending-calls-max (CANCELLED).
        refusals = refused + dropped
        self.add(
            Row("a", "overload: refused at once, p99", percentile(refusals, 99), "ms",
                reference=f"{len(refusals):,} of {count:,} refused",
                checks=[at_most(percentile(refusals, 99), OVERLOAD_P99_MAX_MS,
                                f"<= {OVERLOAD_P99_MAX_MS:g} ms")],
                us_per_message=us, cores=cpu.cores(),
                detail=f"{len(refused):,} RESOURCE_EXHAUSTED by admission control (p50 "
                f"{ms(percentile(refused, 50))}), {len(dropped):,} CANCELLED by gRPC past "
                f"--pending-calls-max (p50 {ms(percentile(dropped, 50))}); CPU per message: "
                f"per send offered")
        )  # fmt: skip
        self.memory_row(sidecar, "(a) overload")
        await asyncio.to_thread(self.res.stop, sidecar)

    # (b) -----------------------------------------------------------------------------------
    async def part_b(self, backends: Sequence[str], memory_only: bool = False) -> None:
        for backend in backends:
            await self.spool(backend, memory_only)
            await asyncio.to_thread(self.res.drop_data)
        if "rocksdb" in backends and not memory_only:
            await self.throttled()
            await asyncio.to_thread(self.res.drop_data)

    async def spool(self, backend: str, memory_only: bool) -> None:
        s = self.s
        raw_rate: float | None = None
        if not memory_only:
            singles, batched = await asyncio.to_thread(self.raw_puts, backend)
            self.add(rate_row("b", f"{backend} raw outbox.put, {RAW_THREADS} threads x 1",
                              singles))  # fmt: skip
            self.add(rate_row("b", f"{backend} raw outbox.put, 1 thread x {RAW_BATCH}/put",
                              batched))  # fmt: skip
            raw_rate = singles.rate
        url = self.res.outbox_url(backend)
        down = f"{HOST}:{closed_port()}"
        sidecar = await asyncio.to_thread(self.res.sidecar, down, url, *NO_RESEND_ARGS)
        client = SidecarClient(sidecar.endpoint, BATCH)
        procs = {"sc": sidecar}
        streams = s.streams[0]
        n = s.spool_messages
        try:
            warmup = 2 * SPOOL_SENDERS
            await closed_loop(client.send, warmup, SPOOL_SENDERS, "spooled", CpuMeter({}))
            await client.stream(warmup, streams, s.stream_window, "spooled", CpuMeter({}))
            await client.run_batches(warmup * BATCH, BATCH_WINDOW, "spooled", CpuMeter({}))
            assert sidecar.memory is not None
            sidecar.memory.take()

            def with_ref(run: Run) -> dict[str, Any]:
                return versus(run, raw_rate, f"raw {RAW_THREADS}x1")

            unary = await closed_loop(client.send, n, SPOOL_SENDERS, "spooled", CpuMeter(procs))
            checks = []
            if self.unary_rate is not None:
                minimum = SPOOL_UNARY_VS_STORED_MIN * self.unary_rate
                checks = [at_least(unary.rate, minimum, f">= {SPOOL_UNARY_VS_STORED_MIN:g}x "
                                   f"(a) unary {self.unary_rate:,.0f}")]  # fmt: skip
            row = rate_row("b", f"{backend} spool: Send (unary), {SPOOL_SENDERS} in flight", unary,
                           checks=checks, **with_ref(unary))  # fmt: skip
            if self.unary_rate is None:
                row.detail += "; no target: its target is (a)'s unary STORED rate, not run"
            self.add(row)
            stream = await client.stream(n, streams, s.stream_window, "spooled", CpuMeter(procs))
            self.add(
                rate_row("b", f"{backend} spool: SendStream, {streams} x {s.stream_window} in "
                         "flight", stream, checks=[rate_at_least(stream.rate, SPOOL_STREAM_MIN)],
                         **with_ref(stream))
            )  # fmt: skip
            batches = await client.run_batches(n, BATCH_WINDOW, "spooled", CpuMeter(procs))
            self.add(
                rate_row("b", f"{backend} spool: SendBatch of {BATCH}, {BATCH_WINDOW} in flight",
                         batches,
                         checks=[rate_at_least(batches.rate, SPOOL_BATCHED_MIN[backend])],
                         **with_ref(batches))
            )  # fmt: skip
            figure = f"{backend} spool: client library, {s.window} concurrent send()"
            if not self.missing("b", figure, "rocketbox_client"):
                lib = await self.library_run(sidecar.endpoint, n, "spooled", procs, None)
                row = rate_row("b", figure, lib,
                               checks=[rate_at_least(lib.rate, SPOOL_BATCHED_MIN[backend])],
                               **with_ref(lib))  # fmt: skip
                row.detail += f"; {LIBRARY_SETTINGS}"
                self.add(row)
            self.memory_row(sidecar, f"(b) {backend} spool")
        finally:
            await client.close()
        await asyncio.to_thread(self.res.stop, sidecar)

    async def throttled(self) -> None:
        """The broker up but answering every send TOO_MANY_REQUESTS (forced flow control):
        every message must be answered SPOOLED, cause THROTTLED. RocksDB outbox."""
        s = self.s
        broker = await asyncio.to_thread(self.res.broker)
        url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, *NO_RESEND_ARGS)
        client = SidecarClient(sidecar.endpoint)
        procs = {"sc": sidecar, "br": broker}
        expect = "spooled THROTTLED"
        streams = s.streams[0]
        n = s.spool_messages
        try:
            await closed_loop(client.send, 2 * s.window, s.window, "stored", CpuMeter({}))
            await set_flow_control(broker, True)
            await closed_loop(client.send, 2 * SPOOL_SENDERS, SPOOL_SENDERS, expect, CpuMeter({}))
            await client.stream(2 * SPOOL_SENDERS, streams, s.stream_window, expect, CpuMeter({}))
            stream = await client.stream(n, streams, s.stream_window, expect, CpuMeter(procs))
            self.add(
                rate_row("b", f"rocksdb THROTTLED: SendStream, {streams} x {s.stream_window} in "
                         "flight", stream,
                         checks=[rate_at_least(stream.rate, THROTTLED_STREAM_MIN)])
            )  # fmt: skip
            unary = await closed_loop(client.send, n, SPOOL_SENDERS, expect, CpuMeter(procs))
            self.add(
                rate_row("b", f"rocksdb THROTTLED: Send (unary), {SPOOL_SENDERS} in flight",
                         unary, **versus(unary, stream.rate, "SendStream"))
            )  # fmt: skip
            await set_flow_control(broker, False)
            self.memory_row(sidecar, "(b) rocksdb throttled")
        finally:
            await client.close()
        await asyncio.to_thread(self.res.stop, sidecar)
        await asyncio.to_thread(self.res.stop, broker)

    def raw_puts(self, backend: str) -> tuple[Run, Run]:
        """outbox.put in this process: RAW_THREADS threads one entry a put, then one thread
        RAW_BATCH entries a put; a fresh outbox."""
        outbox = self.res.open_outbox(self.res.outbox_url(backend))
        try:
            n = self.s.raw_messages
            singles = make_entries(n, due_in_ms=3_600_000)
            per_thread = [singles[i::RAW_THREADS] for i in range(RAW_THREADS)]

            def put_each(entries: list[OutboxEntry]) -> None:
                for entry in entries:
                    outbox.put([entry])

            with ThreadPoolExecutor(RAW_THREADS) as pool:
                list(pool.map(put_each, [e[:2] for e in per_thread]))  # warm: connections
                cpu = CpuMeter({})
                start = time.perf_counter()
                list(pool.map(put_each, [e[2:] for e in per_thread]))
                seconds = time.perf_counter() - start
            count = sum(len(e[2:]) for e in per_thread)
            threads = Run(count, seconds, cpu.read(), "put")
            batches = make_entries(n, due_in_ms=3_600_000)
            cpu = CpuMeter({})
            start = time.perf_counter()
            for i in range(0, n, RAW_BATCH):
                outbox.put(batches[i : i + RAW_BATCH])
            batched = Run(n, time.perf_counter() - start, cpu.read(), "put")
            stats = outbox.stats(int(time.time() * 1000))
            if stats.pending != 2 * n:
                self.failed.append(f"{backend} raw puts: {stats.pending:,} pending afterwards")
        finally:
            self.res.close_outbox(outbox)
        return threads, batched

    # (c) -----------------------------------------------------------------------------------
    async def part_c(self, backends: Sequence[str]) -> None:
        for backend in backends:
            await self.drain(backend)
            await asyncio.to_thread(self.res.drop_data)

    async def drain(self, backend: str) -> None:
        s = self.s
        n = s.drain_messages
        url = self.res.outbox_url(backend)
        outbox = await asyncio.to_thread(self.res.open_outbox, url)
        entries = make_entries(n, due_in_ms=0)
        for i in range(0, n, 500):
            await asyncio.to_thread(outbox.put, entries[i : i + 500])
        if backend == "rocksdb":  # one process at a time
            await asyncio.to_thread(self.res.close_outbox, outbox)
        broker = await asyncio.to_thread(self.res.broker)
        args = (
            f"--resend-concurrency-max={s.drain_concurrency}",
            f"--claim-batch-max={s.drain_claim_batch}",
            f"--poll-interval-ms={DRAIN_POLL_MS}",
        )
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, *args)
        cpu = CpuMeter({"sc": sidecar, "br": broker})
        stats_outbox = None if backend == "rocksdb" else outbox
        stored, done_at = await self.wait_drained(broker, stats_outbox, n, sidecar)
        used = cpu.read()
        seconds = done_at - sidecar.ready_at
        self.memory_row(sidecar, f"(c) {backend} drain")
        await asyncio.to_thread(self.res.stop, sidecar)
        if self.drain_refs is None:
            self.drain_refs = await self.drain_references(broker)
        if backend == "rocksdb":
            outbox = await asyncio.to_thread(self.res.open_outbox, url)
        stats = await asyncio.to_thread(outbox.stats, int(time.time() * 1000))
        await asyncio.to_thread(self.res.close_outbox, outbox)
        await asyncio.to_thread(self.res.stop, broker)
        run = Run(n, seconds, used, "delivered")
        if stats.pending or stats.dead or stats.delivered != n or stored != n:
            example = (
                f"broker holds {stored:,} of {n:,}; outbox pending {stats.pending:,}, "
                f"delivered {stats.delivered:,}, dead {stats.dead:,}"
            )
            run.outcomes[example] = max(1, abs(n - stats.delivered), stored - n)
        row = rate_row("c", f"{backend} drain", run,
                       checks=[rate_at_least(run.rate, DRAIN_MIN[backend])],
                       **versus(run, self.drain_refs[0].rate, "direct"))  # fmt: skip
        row.detail += f" (sidecar {' '.join(args)})"
        self.add(row)

    async def drain_references(self, broker: Child) -> tuple[Run, Run]:
        """Against the drain's broker, to REF_TOPIC: the direct Producer with the pool's
        concurrency (one message a send, as the pool sends), and BATCH messages a request."""
        n = self.s.drain_messages
        direct = DirectClient(broker.port, REF_TOPIC)
        batch = BatchClient(broker.endpoint, REF_TOPIC, BATCH)
        try:
            window = min(self.s.drain_concurrency, 64)
            await closed_loop(direct.send, 2 * window, window, "stored", CpuMeter({}))
            await batch.run(4 * BATCH * BATCH_WINDOW, BATCH_WINDOW, CpuMeter({}))
            await self.settle(broker)
            one = await closed_loop(direct.send, n, window, "stored", CpuMeter({"br": broker}))
            self.add(rate_row("c", f"reference: direct Producer, {window} in flight", one))
            batched = await batch.run(n, BATCH_WINDOW, CpuMeter({"br": broker}))
            self.add(
                rate_row("c", f"reference: raw SendMessage of {BATCH}, {BATCH_WINDOW} in flight",
                         batched)
            )  # fmt: skip
        finally:
            await direct.close()
            await batch.close()
        return one, batched

    async def wait_drained(
        self, broker: Child, outbox: Outbox | None, n: int, sidecar: Child
    ) -> tuple[int, float]:
        """Poll until the broker holds ``n`` messages of the topic and the outbox (when it can be
        read from here) has none pending; the broker's count and the time."""
        deadline = time.monotonic() + deadline_s(n)
        async with grpc.aio.insecure_channel(broker.endpoint) as channel:
            admin: Any = broker_admin_pb2_grpc.BrokerAdminStub(channel)
            request = broker_admin_pb2.DescribeTopicRequest(topic=TOPIC)
            stored = 0
            while time.monotonic() < deadline:
                if sidecar.proc.poll() is not None:
                    raise BenchError(f"the sidecar exited while draining:\n{sidecar.output()}")
                response = await admin.DescribeTopic(request, timeout=RPC_TIMEOUT_S)
                stored = sum(q.max_queue_offset - q.min_queue_offset for q in response.queues)
                if stored >= n:
                    if outbox is None:
                        return stored, time.perf_counter()
                    stats = await asyncio.to_thread(outbox.stats, int(time.time() * 1000))
                    if stats.pending == 0:
                        return stored, time.perf_counter()
                await asyncio.sleep(DRAIN_POLL_MS / 1000.0)
        raise BenchError(f"drain: the broker holds {stored:,} of {n:,} after {deadline_s(n):.0f} s")


# -- the run --------------------------------------------------------------------------------------
async def cancelled_by_signals(coro: Coroutine[Any, Any, T]) -> T:
    """SIGTERM and SIGINT cancel ``coro`` (its cleanup runs), then raise KeyboardInterrupt."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    signalled: list[str] = []

    def cancel(signum: signal.Signals) -> None:
        signalled.append(signum.name)
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, cancel, signum)
    try:
        return await coro
    except asyncio.CancelledError:
        if signalled:
            raise KeyboardInterrupt(signalled[0]) from None
        raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)  # leaves the default: ours again, for cleanup
            signal.signal(signum, interrupted)


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
    if only == "d":
        print("(d) the sidecar's memory under (a)'s and (b)'s loads", file=sys.stderr, flush=True)
        await bench.part_a(memory_only=True)
        await bench.part_b(("rocksdb",), memory_only=True)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def numbers(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def parse_args() -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke check")
    parser.add_argument("--only", choices=("a", "b", "c", "d"), default=None)
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
        "--sidecar-log-level", choices=("DEBUG", "INFO", "WARNING"), default="INFO",
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
    parts = ("a", "b", "c") if only is None else (only,)
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
        f"{OVERLOAD_FACTOR:g}x (a)'s unary STORED rate. (b) the resend pool is held off (first "
        "resend in 1 h). (c) from the sidecar's ready line to all N at the broker (and none "
        "pending)."
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
        print("sidecar_bench: what it needs is not there:", file=sys.stderr)
        for m in missing:
            print(f"  - {m}", file=sys.stderr)
        sys.exit(2)
    began = time.perf_counter()
    start_load = load()
    print(
        f"sidecar_bench: 1 KiB bodies, {os.cpu_count()} cores, load average {start_load} at "
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


if __name__ == "__main__":
    main()
