"""What ``rocketbox outbox`` prints (rocketbox/outbox_cli.py): the JSON documents its ``--json``
gives scripts, and the rich tables people read, drawn from those same documents so that the two
never disagree.

Times in JSON are integers, ms since the epoch (``*_ms``) or durations in ms (``*_age_ms``,
``*_in_ms``); the tables show them as UTC times and short durations.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from outbox.admin import ATTEMPTS_BUCKETS, Breakdown
from outbox.entry import OutboxStats
from rocketbox.admin_render import format_time_ms
from rocketbox.wording import plural

_DURATION_UNITS_MS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000))
# A last error is cut to this in a listing (``show`` prints it whole).
LAST_ERROR_CHARS_SHOWN_MAX = 60
# Text output's width when stdout is no terminal.
PIPED_WIDTH_CHARS = 200


def print_view(view: RenderableType) -> None:
    console = Console()
    if not console.is_terminal:
        # Piped to a file or a pager: no screen to fit, and a cut message id is no use.
        console = Console(width=PIPED_WIDTH_CHARS)
    console.print(view)


@contextlib.contextmanager
def progress_bar(quiet: bool, total: int, what: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr, when it is a terminal and not ``quiet`` (--json); yields
    its ``advance(n)``, or None when there is no bar."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield None
        return
    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(what, total=total)
        yield functools.partial(progress.advance, task)


def duration_text(ms: int | None) -> str:
    """1d2h, 5m3s, 250ms: the two largest units, enough to read at a glance."""
    if ms is None:
        return "-"
    if ms < 0:
        return "-" + duration_text(-ms)
    if ms < 1_000:
        return f"{ms}ms"
    parts = []
    rest = ms
    for unit, size in _DURATION_UNITS_MS:
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts[:2])


def time_text(ms: int | None) -> str:
    if ms is None:
        return "-"
    return format_time_ms(ms)


def since(now_ms: int, ms: int | None) -> int | None:
    return None if ms is None else now_ms - ms


def until(now_ms: int, ms: int | None) -> int | None:
    return None if ms is None else ms - now_ms


# -- stats ----------------------------------------------------------------------------------------


def totals_json(stats: OutboxStats, now_ms: int) -> dict[str, Any]:
    """The backend's own counters (``Outbox.stats``), with ages from ``now_ms``."""
    return {
        "pending": stats.pending,
        "in_flight": stats.in_flight,
        "delivered": stats.delivered,
        "dead": stats.dead,
        "bytes": stats.bytes,
        "oldest_pending_created_ms": stats.oldest_pending_created_ms,
        "oldest_pending_age_ms": since(now_ms, stats.oldest_pending_created_ms),
        "next_due_ms": stats.next_due_ms,
        "next_due_in_ms": until(now_ms, stats.next_due_ms),
    }


def stats_json(stats: OutboxStats, found: Breakdown, now_ms: int) -> dict[str, Any]:
    return {
        "now_ms": now_ms,
        "totals": totals_json(stats, now_ms),
        "scanned": found.scanned,
        "depth": [
            {
                "state": state.value,
                "topic": topic,
                "cause": cause.value,
                "entries": depth.entries,
                "body_bytes": depth.body_bytes,
            }
            for (state, topic, cause), depth in found.depth.items()
        ],
        "attempts": {state.value: buckets for state, buckets in found.attempts.items()},
    }


def totals_table(totals: Mapping[str, Any]) -> Table:
    table = Table(title="outbox", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    for name in ("pending", "in_flight", "dead", "delivered", "bytes"):
        table.add_row(name.replace("_", " "), f"{totals[name]:,}")
    oldest = totals["oldest_pending_age_ms"]
    table.add_row("oldest pending", f"{duration_text(oldest)} old" if oldest is not None else "-")
    due_in = totals["next_due_in_ms"]
    if due_in is None:
        due = "-"
    elif due_in > 0:
        due = f"in {duration_text(due_in)}"
    else:
        due = f"now ({duration_text(-due_in)} overdue)"
    table.add_row("next due", due)
    return table


def stats_view(data: Mapping[str, Any]) -> RenderableType:
    scanned = plural(data["scanned"], "entry", grouped=True)
    depth = Table(title=f"depth ({scanned} read)", title_justify="left")
    for name in ("state", "topic", "cause"):
        depth.add_column(name)
    depth.add_column("entries", justify="right")
    depth.add_column("body bytes", justify="right")
    for row in data["depth"]:
        depth.add_row(
            row["state"],
            row["topic"],
            row["cause"],
            f"{row['entries']:,}",
            f"{row['body_bytes']:,}",
        )
    attempts = Table(title="attempts", title_justify="left")
    attempts.add_column("state")
    for _, _, label in ATTEMPTS_BUCKETS:
        attempts.add_column(label, justify="right")
    for state, buckets in data["attempts"].items():
        attempts.add_row(state, *(f"{buckets[label]:,}" for _, _, label in ATTEMPTS_BUCKETS))
    return Group(totals_table(data["totals"]), depth, attempts)


# -- entries --------------------------------------------------------------------------------------


def entries_table(rows: Sequence[Mapping[str, Any]], now_ms: int) -> Table:
    table = Table()
    table.add_column("seq", justify="right")
    # Never cut: a message id is what the other commands take.
    table.add_column("message id", no_wrap=True, overflow="fold", min_width=34)
    for name in ("topic", "state", "cause", "attempts", "age", "next send"):
        table.add_column(name, justify="right" if name == "attempts" else "left")
    table.add_column("last error", overflow="ellipsis", max_width=LAST_ERROR_CHARS_SHOWN_MAX)
    for row in rows:
        next_send = "-"
        if row["state"] == "PENDING":
            due_in = row["next_send_time_ms"] - now_ms
            next_send = f"in {duration_text(due_in)}" if due_in > 0 else "due"
        table.add_row(
            str(row["seq"]),
            row["message_id"],
            row["topic"],
            row["state"],
            row["cause"],
            str(row["attempts"]),
            duration_text(now_ms - row["created_ms"]),
            next_send,
            row["last_error"],
        )
    return table


def body_text(body: bytes) -> tuple[str, str]:
    """(text, encoding): the body as text when it is UTF-8, else as base64."""
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


def entry_view(row: Mapping[str, Any]) -> Table:
    """Every field of one entry (``show``), times also as UTC."""
    table = Table(show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for name, value in row.items():
        text = "-" if value is None else str(value)
        if name.endswith("_ms") and isinstance(value, int) and value > 0:  # 0: no such time
            text = f"{value} ({time_text(value)})"
        table.add_row(name, text)
    return table


# -- watch ----------------------------------------------------------------------------------------


def sample_json(
    stats: OutboxStats, now_ms: int, delivered_per_s: float | None, interval_s: float | None
) -> dict[str, Any]:
    """One ``watch`` sample. ``delivered_per_s``: tombstones added per second since the last
    sample; None on the first, and when tombstones were purged meanwhile (the count fell)."""
    return {
        "time_ms": now_ms,
        **totals_json(stats, now_ms),
        "delivered_per_s": None if delivered_per_s is None else round(delivered_per_s, 3),
        "interval_s": None if interval_s is None else round(interval_s, 3),
    }


def watch_view(sample: Mapping[str, Any], samples: int) -> Table:
    table = totals_table(sample)
    rate = sample["delivered_per_s"]
    table.add_row("drain rate", "-" if rate is None else f"{rate:,.1f} delivered/s")
    clock = time_text(sample["time_ms"])[11:19]  # HH:MM:SS of the UTC time
    table.title = f"outbox at {clock} UTC, sample {samples}"
    table.caption = "Ctrl-C stops"
    return table


@contextlib.contextmanager
def watch_display(as_json: bool) -> Iterator[Callable[[Mapping[str, Any], int], None]]:
    """Yields ``show(sample, samples)``: a live table on a terminal, else (or with --json) one
    JSON line per sample, flushed, for whatever reads the pipe."""
    console = Console()
    if as_json or not console.is_terminal:
        yield lambda sample, _: click.echo(json.dumps(sample, sort_keys=True))
        return
    with Live(console=console, auto_refresh=False) as live:
        yield lambda sample, samples: live.update(watch_view(sample, samples), refresh=True)
