"""The sidecar bench's table: a row per figure, its checks against the targets, and the printing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.sidecar.loops import Run
from bench.sidecar.targets import SIDECAR_US_MAX


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
