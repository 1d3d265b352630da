"""What every part of the sidecar bench shares: its settings, the processes and the rows."""

from __future__ import annotations

import asyncio
import math
import sys
from dataclasses import dataclass

from bench.sidecar.clients import LibraryClient
from bench.sidecar.loops import Cpu, CpuMeter, Run, Send, closed_loop, open_loop, percentile
from bench.sidecar.processes import (
    Child,
    Feature,
    Resources,
    wait_quiet,
)
from bench.sidecar.table import Row, at_most
from bench.sidecar.targets import LATENCY_ROUNDS, RSS_MAX_MB


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


@dataclass
class Paced:
    """Open-loop rounds at one rate, the sides alternating: each side's answered latencies (ms),
    CPU, failed sends and seconds."""

    rate: float
    lat: dict[str, list[float]]
    cpu: dict[str, Cpu]
    failures: dict[str, int]
    seconds: dict[str, float]

    def p(self, name: str, q: float) -> float:
        return percentile(self.lat[name], q)


class BenchCore:
    """What every part shares: the settings, the resources, the rows and what failed."""

    def __init__(self, settings: Settings, res: Resources, found: dict[str, Feature]) -> None:
        self.s = settings
        self.res = res
        self.features = found
        self.rows: list[Row] = []
        self.failed: list[str] = []
        self.direct_rate: float | None = None
        self.unary_rate: float | None = None  # (a)'s unary STORED rate, coalescing on
        # (a)'s SendStream STORED rate, with (b)'s stream count: the spool's reference.
        self.stream_rate: float | None = None
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

    async def paced(
        self, sends: dict[str, Send], procs: dict[str, dict[str, Child]], broker: Child,
        rate: float, ok: str,
    ) -> Paced:  # fmt: skip
        """Each side of ``sends`` open loop at ``rate`` (a warm-up, then LATENCY_ROUNDS rounds
        alternating, ``latency_seconds`` in all), its CPU that of ``procs[side]``."""
        per_round = max(1, int(rate * self.s.latency_seconds / LATENCY_ROUNDS / 2))
        paced = Paced(rate, {n: [] for n in sends}, {n: Cpu() for n in sends},
                      dict.fromkeys(sends, 0), dict.fromkeys(sends, 0.0))  # fmt: skip
        for send in sends.values():
            await open_loop(send, max(1, int(rate * 0.5)), rate)
        await self.settle(broker)
        for _ in range(LATENCY_ROUNDS):
            for name, send in sends.items():
                meter = CpuMeter(procs[name])
                got = await open_loop(send, per_round, rate)
                paced.cpu[name] += meter.read()
                paced.seconds[name] += got.seconds
                paced.lat[name] += got.answered(ok)
                paced.failures[name] += sum(got.failures(ok).values())
        return paced

    def paced_rows(self, part: str, paced: Paced, failed_means: str) -> None:
        """Each side's p50 and p99 rows, saying when a side could not keep up with the rate (its
        latency is then queueing) and how many sends failed (``failed_means``)."""
        rate = paced.rate
        for name, lat in paced.lat.items():
            failed = paced.failures[name]
            n = len(lat) + failed
            achieved = n / max(paced.seconds[name], 1e-9)
            detail = f"{n:,} sends; achieved {achieved:,.0f} sends/s (last answer included)"
            if achieved < 0.95 * rate:
                detail += ": the load was NOT sustained, the latency is mostly queueing"
            if failed:
                detail += f"; {failed:,} FAILED{failed_means}"
            cpu = paced.cpu[name]
            for q in (50, 99):
                self.add(
                    Row(part, f"{name} p{q} latency, {rate:,.0f}/s paced", paced.p(name, q),
                        "ms", us_per_message=cpu.us_per_message(n), cores=cpu.cores(),
                        detail=detail, failures=failed if q == 50 else 0)
                )  # fmt: skip
