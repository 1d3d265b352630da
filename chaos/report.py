"""The chaos suite's tables: one row per scenario, for people (rich, on the terminal) and for the
README (Markdown), with the same columns.

A row's verdict is ``pass`` or ``FAIL``; a failed row's reasons are listed under the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from chaos.checker import Findings

COLUMNS = (
    "scenario", "sent", "STORED", "SPOOLED", "REJECTED", "no answer", "lost", "duplicated",
    "recovered", "unexpected", "dead", "time to drain", "verdict",
)  # fmt: skip


@dataclass(slots=True)
class Row:
    """One scenario's line: its counts are the checker's findings themselves, not a copy."""

    scenario: str
    findings: Findings = field(default_factory=Findings)
    # None: the outbox still held pending entries at the drain deadline (or the scenario failed
    # before its drain).
    drain_s: float | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, object]:
        """The row for verdict.json, which carries the findings under a key of their own."""
        return {
            "scenario": self.scenario, "drain_s": self.drain_s, "failures": self.failures,
            "ok": self.ok,
        }  # fmt: skip

    def cells(self) -> list[str]:
        drain = "not drained" if self.drain_s is None else f"{self.drain_s:.1f} s"
        f = self.findings
        counts = (
            f.sent, f.stored, f.spooled, f.rejected, f.no_answer, f.lost, f.duplicated,
            f.recovered, f.unexpected, f.dead,
        )  # fmt: skip
        return [self.scenario, *(f"{n:,}" for n in counts), drain, "pass" if self.ok else "FAIL"]


def rich_table(rows: Sequence[Row], title: str) -> Table:
    table = Table(title=title)
    for i, name in enumerate(COLUMNS):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        style = None if row.ok else "bold red"
        table.add_row(*row.cells(), style=style)
    return table


def print_rows(rows: Sequence[Row], title: str, console: Console | None = None) -> None:
    console = console or Console()
    console.print(rich_table(rows, title))
    for row in rows:
        for failure in row.failures:
            console.print(f"[bold red]{row.scenario}[/]: {failure}")


def markdown(rows: Sequence[Row]) -> str:
    """The table in GitHub Markdown, numbers right-aligned, failures listed after it."""
    align = ["---", *("---:" for _ in COLUMNS[1:])]
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(align) + "|",
        *("| " + " | ".join(row.cells()) + " |" for row in rows),
    ]
    failures = [f"- {row.scenario}: {failure}" for row in rows for failure in row.failures]
    return "\n".join(lines + (["", *failures] if failures else [])) + "\n"
