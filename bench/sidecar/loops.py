"""How the sidecar bench drives its clients and counts: the closed and open loops, each send's
outcome against the one expected, a run's rate, and the CPU each process spent on the messages.
"""

from __future__ import annotations

import asyncio
import math
import resource
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bench.process_control import BenchError
from bench.sidecar.processes import RPC_TIMEOUT_S, Child
from rocketbox_api.deadlines import within

SLOWEST_RATE = 200  # msgs/s: slower than this, a run is stuck rather than slow
OUTCOME_CHARS_MAX = 300  # an unexpected outcome is kept this long (its text varies)


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Cpu:
    """CPU seconds this process ("bench") and the children named spent over ``wall_s``."""

    wall_s: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)

    def cores(self) -> str:
        """CPU seconds per wall second, each process."""
        wall_s = max(self.wall_s, 1e-9)
        return " ".join(f"{k} {v / wall_s:.2f}" for k, v in self.seconds.items())

    def us_per_message(self, count: int) -> dict[str, float]:
        return {k: v / max(count, 1) * 1e6 for k, v in self.seconds.items()}

    def __add__(self, other: Cpu) -> Cpu:
        names = {**self.seconds, **other.seconds}
        return Cpu(
            self.wall_s + other.wall_s,
            {k: self.seconds.get(k, 0.0) + other.seconds.get(k, 0.0) for k in names},
        )


class CpuMeter:
    """From its making to ``read``: the CPU of this process and of ``children`` (by label)."""

    def __init__(self, children: Mapping[str, Child]) -> None:
        self._children = dict(children)
        self._start = time.perf_counter()
        self._bench = own_cpu_seconds()
        self._cpu = {k: c.cpu_seconds() for k, c in self._children.items()}

    def read(self) -> Cpu:
        seconds = {"bench": own_cpu_seconds() - self._bench}
        for k, c in self._children.items():
            seconds[k] = c.cpu_seconds() - self._cpu[k]
        return Cpu(time.perf_counter() - self._start, seconds)


def matches(outcome: str, expect: str) -> bool:
    return outcome == expect or outcome.startswith(expect + " ")


@dataclass
class Run:
    """``count`` messages answered in ``seconds``, by outcome."""

    count: int
    seconds: float
    cpu: Cpu
    expect: str
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    @property
    def failures(self) -> int:
        return sum(n for o, n in self.outcomes.items() if not matches(o, self.expect))

    @property
    def failure_example(self) -> str:
        return next((o for o in self.outcomes if not matches(o, self.expect)), "")

    def us_per_message(self) -> dict[str, float]:
        return self.cpu.us_per_message(self.count)


Send = Callable[[], Awaitable[str]]  # one call; its outcome


def deadline_s(count: int) -> float:
    return max(60.0, count / SLOWEST_RATE)


async def closed_loop(
    send: Send, calls: int, window: int, expect: str, cpu: CpuMeter, per_call: int = 1
) -> Run:
    """``calls`` sends of ``per_call`` messages each, ``window`` in flight (each sender starts
    its next on its answer)."""
    remaining = calls
    outcomes: Counter[str] = Counter()

    async def sender() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            try:
                outcome = await send()
            except Exception as e:
                outcome = f"{type(e).__name__}: {e}"
            outcomes[outcome[:OUTCOME_CHARS_MAX]] += per_call

    count = calls * per_call
    start = time.perf_counter()
    try:
        await within(
            asyncio.gather(*(sender() for _ in range(min(window, calls)))), deadline_s(count)
        )
    except TimeoutError as e:
        raise BenchError(f"{count:,} sends not answered in {deadline_s(count):.0f} s") from e
    seconds = time.perf_counter() - start
    return Run(count, seconds, cpu.read(), expect, outcomes)


@dataclass
class OpenLoop:
    """Sends started on a schedule whatever the earlier ones do. Latencies (ms) by outcome,
    from each send's scheduled start (a stall is not hidden) and from its actual start (what
    the bench's own lag adds is the difference)."""

    scheduled_ms: dict[str, list[float]]
    started_ms: dict[str, list[float]]
    count: int
    offered_seconds: float  # from the first scheduled start to the last actual start
    seconds: float  # from the first scheduled start to the last answer

    @property
    def offered_rate(self) -> float:
        return self.count / max(self.offered_seconds, 1e-9)

    def answered(self, *outcomes: str, from_start: bool = False) -> list[float]:
        """The latencies of the sends answered with one of ``outcomes``."""
        by_outcome = self.started_ms if from_start else self.scheduled_ms
        return [
            x for o, got in by_outcome.items() if any(matches(o, e) for e in outcomes) for x in got
        ]

    def failures(self, *expected: str) -> dict[str, int]:
        return {
            o: len(got)
            for o, got in self.scheduled_ms.items()
            if not any(matches(o, e) for e in expected)
        }


async def open_loop(send: Send, count: int, rate: float) -> OpenLoop:
    """``count`` sends started at ``rate`` per second."""
    scheduled_ms: dict[str, list[float]] = {}
    started_ms: dict[str, list[float]] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def one(scheduled: float) -> None:
        started = time.perf_counter()
        try:
            outcome = await send()
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"
        answered = time.perf_counter()
        outcome = outcome[:OUTCOME_CHARS_MAX]
        scheduled_ms.setdefault(outcome, []).append((answered - scheduled) * 1000.0)
        started_ms.setdefault(outcome, []).append((answered - started) * 1000.0)

    start = time.perf_counter()
    started = 0
    while started < count:
        # Every send due by now starts at once: a loop's timers are ~1 ms coarse (uvloop's), so
        # sleeping between sends less than that apart would offer less than ``rate``.
        due = min(count, int((time.perf_counter() - start) * rate) + 1)
        for i in range(started, due):
            task = asyncio.create_task(one(start + i / rate))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        started = due
        await asyncio.sleep(max(0.0, start + started / rate - time.perf_counter()))
    offered_seconds = time.perf_counter() - start
    if tasks:
        await within(asyncio.gather(*tasks), RPC_TIMEOUT_S * 2)
    return OpenLoop(scheduled_ms, started_ms, count, offered_seconds, time.perf_counter() - start)


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(p / 100.0 * len(ordered)) - 1)]
