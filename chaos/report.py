"""The chaos suite's tables: one row per scenario, for people (rich, on the terminal) and for the
README (Markdown), with the same columns.

A row's verdict is ``pass`` or ``FAIL``; a failed row's reasons are listed under the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

COLUMNS = (
    "scenario", "sent", "STORED", "SPOOLED", "REJECTED", "no answer", "lost", "duplicated",
    "recovered", "unexpected", "time to drain", "verdict",
)  # fmt: skip


@dataclass(slots=True)
class Row:
    scenario: str
    sent: int = 0
    stored: int = 0
    spooled: int = 0
    rejected: int = 0
    no_answer: int = 0
    lost: int = 0
    duplicated: int = 0
    recovered: int = 0
    unexpected: int = 0
    # None: the outbox still held pending entries at the drain deadline (or the scenario failed
    # before its drain).
    drain_s: float | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def cells(self) -> list[str]:
        drain = "not drained" if self.drain_s is None else f"{self.drain_s:.1f} s"
        counts = (
            self.sent, self.stored, self.spooled, self.rejected, self.no_answer, self.lost,
            self.duplicated, self.recovered, self.unexpected,
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
