"""``rocketbox outbox …``: inspect and repair a sidecar's outbox, any backend, by URL.

Every command takes ``--outbox URL`` (or ROCKETBOX_OUTBOX) and ``--json``, and goes through the
contract (outbox/outbox.py) and outbox/admin.py only, so each backend answers alike. The outbox
is opened on first use, after the command's own arguments are checked: a usage error never waits
on a backend. Backend errors become exit codes in one place, outbox_session.py's
``_translated``; every message naming the URL hides its password.

Exit codes (the broker admin commands in rocketbox/broker_admin_cli.py use 1 and 3 alike)::

    0  done
    1  the operation failed (the backend refused it or answered what it should not)
    2  usage error, or a bad --outbox URL (click's own code for usage errors)
    3  no outbox there (no MySQL table, no RocksDB database: commands never create one), the
       backend is unreachable, or a RocksDB outbox is held by a process that cannot be asked
       (a sidecar not answering, or not a sidecar) or that does not serve the command (purge)
    4  no such entry
    5  refused: a purge not confirmed
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Group, RenderableType

from outbox.admin import DrainMeter, EntryFilter, breakdown, count_purgeable, list_entries
from outbox.entry import EntryState, SpoolCause
from outbox.export import EXPORT_FORMATS, export_file, export_format, export_row
from rocketbox import outbox_render as render
from rocketbox.outbox_session import (
    AGE,
    CAUSES,
    STATES,
    EntryNotFoundError,
    RefusedError,
    Session,
    ids_or_all,
    outbox_command,
    parse_state,
    state_value,
)
from rocketbox.wording import noun_form, plural

# ``ls`` pages: a page is read whole into memory and printed as one table or document.
LS_LIMIT_DEFAULT = 50
LS_LIMIT_MAX = 1_000
# ``watch``: a stats call per sample; MySQL's is an aggregate over the table.
WATCH_INTERVAL_S_MIN = 0.05
WATCH_INTERVAL_S_DEFAULT = 2.0


@click.group("outbox")
@click.pass_context
def outbox_group(ctx: click.Context) -> None:
    """Inspect and repair a sidecar's outbox, any backend, by URL.

    \b
    Every command takes --outbox URL (or ROCKETBOX_OUTBOX), and --json to print
    JSON for scripts and nothing else. A RocksDB outbox admits one process: while
    a sidecar holds it, retry-now and requeue ask that sidecar (found from the
    holder file it keeps beside the outbox; --sidecar HOST:PORT names one), reads
    open it read-only, and purge needs the sidecar stopped.

    \b
    Exit codes:
      0  done
      1  the operation failed (the backend refused it)
      2  usage error, or a bad --outbox URL
      3  no outbox there (commands never create one), the backend is
         unreachable, or a RocksDB outbox is held by a process that cannot
         do the command (a sidecar not answering; purge while one runs)
      4  no such entry
      5  refused: a purge not confirmed (no --yes, and no terminal or the answer no)
    """
    if ctx.find_root().get_parameter_source("log_level") is click.core.ParameterSource.DEFAULT:
        # A backend's INFO lines (a RocksDB outbox opened…) are a server's diary, noise before
        # an admin command's answer; rocketbox --log-level INFO brings them back.
        logging.getLogger("outbox").setLevel(logging.WARNING)


@outbox_group.command("stats", short_help="Totals, depth by state, topic and cause, and ages.")
@outbox_command
def stats_command(session: Session) -> None:
    """Totals, depth by state, topic and cause, the oldest pending entry, the next due one,
    and a histogram of attempts.

    The totals are the backend's own counters; the depth and the histogram read every entry of
    the outbox (one pass, page by page).
    """
    remote = session.holder() if session.sidecar is not None else None
    if remote is not None:  # asked of the sidecar, measured by its clock
        now_ms, stats, found = remote.stats()
    else:
        now_ms = session.now_ms()
        stats, found = session.reader.stats(now_ms), breakdown(session.reader)
    data = render.stats_json(stats, found, now_ms)
    session.emit(data, lambda: render.stats_view(data))


@outbox_group.command("ls", short_help="List entries in seq order, a page at a time.")
@click.option("--state", type=click.Choice(STATES, case_sensitive=False), default=None)
@click.option("--topic", "topics", multiple=True, help="Repeatable: entries of any of them.")
@click.option("--cause", type=click.Choice(CAUSES, case_sensitive=False), default=None)
@click.option("--key", default=None, help="Entries whose message carries this key.")
@click.option("--older-than", type=AGE, default=None, help="Spooled at least AGE ago (30s, 5m…).")
@click.option("--newer-than", type=AGE, default=None, help="Spooled less than AGE ago.")
@click.option(
    "--limit",
    default=LS_LIMIT_DEFAULT,
    show_default=True,
    type=click.IntRange(1, LS_LIMIT_MAX),
    help="Entries per page.",
)
@click.option(
    "--after-seq",
    default=0,
    type=click.IntRange(min=0),
    help="Start after this seq: the cursor the previous page printed.",
)
@outbox_command
def ls_command(
    session: Session,
    state: str | None,
    topics: tuple[str, ...],
    cause: str | None,
    key: str | None,
    older_than: int | None,
    newer_than: int | None,
    limit: int,
    after_seq: int,
) -> None:
    """List entries in seq order, a page at a time, with the cursor of the next page.

    Filters read on until the page is full or the outbox ends.
    """
    now_ms = session.now_ms()
    which = EntryFilter(
        state=parse_state(state),
        topics=frozenset(topics),
        cause=None if cause is None else SpoolCause(cause.upper()),
        key=key,
        created_at_or_before_ms=None if older_than is None else now_ms - older_than,
        created_after_ms=None if newer_than is None else now_ms - newer_than,
    )
    page = list_entries(session.reader, which, after_seq, limit)
    rows = [export_row(e) for e in page.entries]
    data = {"entries": rows, "next_after_seq": page.next_after_seq}

    def view() -> RenderableType:
        cursor = page.next_after_seq
        more = f"next page: --after-seq {cursor}" if cursor is not None else "end of the outbox"
        return Group(render.entries_table(rows, now_ms), f"{plural(len(rows), 'entry')}; {more}")

    session.emit(data, view)


@outbox_group.command("show", short_help="Every field of one entry.")
@click.argument("message_id")
@click.option(
    "--body", "with_body", is_flag=True, help="The body too: as text if UTF-8, else base64."
)
@outbox_command
def show_command(session: Session, message_id: str, with_body: bool) -> None:
    """Every field of the entry MESSAGE_ID (exit code 4 when there is none)."""
    entry = session.reader.get(message_id)
    if entry is None:
        raise EntryNotFoundError(f"no entry {message_id!r} in the outbox {session.shown_url}")
    data = export_row(entry)
    if with_body:
        data["body"], data["body_encoding"] = render.body_text(entry.message.body)
    session.emit(data, lambda: render.entry_view(data))


@outbox_group.command("requeue", short_help="Send DEAD entries again: back to PENDING, due now.")
@click.argument("message_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every DEAD entry.")
@outbox_command
def requeue_command(session: Session, message_ids: tuple[str, ...], every: bool) -> None:
    """DEAD entries back to PENDING, due now, attempts reset: the sidecar sends them again."""
    ids = ids_or_all(message_ids, every)
    requeued = session.requeue(ids)
    data = {"requeued": requeued, "asked": None if ids is None else len(set(ids))}
    text = f"requeued {requeued} dead {noun_form(requeued, 'entry')}: pending, due now"
    if ids is not None and requeued < len(set(ids)):
        text += f" ({len(set(ids)) - requeued} of those named are not DEAD or not in the outbox)"
    session.emit(data, lambda: text)


@outbox_group.command("retry-now")
@click.argument("message_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every PENDING entry.")
@outbox_command
def retry_now_command(session: Session, message_ids: tuple[str, ...], every: bool) -> None:
    """PENDING entries due later become due now (attempts unchanged).

    Left alone: entries due already, in flight, or waiting behind their FIFO group's entry in
    flight, and entries not PENDING.
    """
    ids = ids_or_all(message_ids, every)
    made_due = session.retry_now(ids)
    data = {"made_due": made_due, "asked": None if ids is None else len(set(ids))}
    text = f"{made_due} pending {noun_form(made_due, 'entry')} made due now"
    if ids is not None and made_due < len(set(ids)):
        text += (
            f" ({len(set(ids)) - made_due} of those named are due already, in flight, behind "
            "their FIFO group's entry in flight, not PENDING or not in the outbox)"
        )
    session.emit(data, lambda: text)


def _purgeable_state(_ctx: click.Context, _param: click.Parameter, value: str) -> EntryState:
    state = EntryState(value.upper())
    if state is EntryState.PENDING:
        raise click.BadParameter(
            "PENDING entries are never purged: that would lose messages the broker does not "
            "have. Let the sidecar deliver them, or requeue / retry-now them."
        )
    return state


@outbox_group.command("purge", short_help="Delete DELIVERED or DEAD entries.")
@click.option(
    "--state",
    required=True,
    type=click.Choice(STATES, case_sensitive=False),
    callback=_purgeable_state,
    help="delivered (tombstones) or dead.",
)
@click.option(
    "--older-than",
    required=True,
    type=AGE,
    help="Only entries that became delivered or dead at least AGE ago (0s: all of them).",
)
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
@click.option("--yes", is_flag=True, help="Delete without asking.")
@outbox_command
def purge_command(
    session: Session, state: EntryState, older_than: int, dry_run: bool, yes: bool
) -> None:
    """Delete DELIVERED or DEAD entries, after a confirmation unless --yes.

    Without --yes and without a terminal to ask on, nothing is deleted (exit code 5).
    """
    before_ms = session.now_ms() - older_than
    # A dry run only reads: it works beside a running sidecar's RocksDB outbox too.
    matched = count_purgeable(session.reader if dry_run else session.outbox, state, before_ms)
    data: dict[str, Any] = {
        "state": state.value,
        "before_ms": before_ms,
        "matched": matched,
        "purged": 0,
        "dry_run": dry_run,
    }
    entries = noun_form(matched, "entry")
    what = f"{matched} {state.value} {entries} changed before {render.time_text(before_ms)}"
    if dry_run or matched == 0:
        session.emit(data, lambda: f"would purge {what}" if dry_run else "nothing to purge")
        return
    if not yes:
        if not sys.stdin.isatty():
            raise RefusedError(
                f"purge would delete {what} from the outbox {session.shown_url}; refused: no "
                "--yes, and stdin is not a terminal to confirm on. Nothing was deleted."
            )
        question = f"Delete {what} from the outbox {session.shown_url}?"
        if not click.confirm(question, default=False, err=True):
            raise RefusedError("not confirmed; nothing was deleted")
    data["purged"] = session.outbox.purge(state, before_ms)
    purged = data["purged"]
    session.emit(data, lambda: f"purged {purged} {state.value} {noun_form(purged, 'entry')}")


@outbox_group.command("export", short_help="Write every entry, without bodies, to a file.")
@click.option("--out", "out_path", required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--format",
    "file_format",
    type=click.Choice(EXPORT_FORMATS),
    default=None,
    help="Default: from --out's extension (.jsonl, .ndjson, .json; .parquet).",
)
@click.option("--state", type=click.Choice(STATES, case_sensitive=False), default=None)
@outbox_command
def export_command(
    session: Session, out_path: Path, file_format: str | None, state: str | None
) -> None:
    """Write every entry (of --state), without bodies, for the reconciliation.

    The file appears whole or not at all: it is written beside --out and renamed when done.
    """
    try:
        fmt = file_format or export_format(out_path)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--format'") from e
    entry_state = parse_state(state)
    stats = session.reader.stats(session.now_ms())
    counts = {EntryState.PENDING: stats.pending, EntryState.DEAD: stats.dead}
    counts[EntryState.DELIVERED] = stats.delivered
    total = counts[entry_state] if entry_state is not None else sum(counts.values())
    try:
        with render.progress_bar(session.as_json, total, "export") as progress:
            written = export_file(session.reader, out_path, fmt, entry_state, progress=progress)
    except OSError as e:  # the file's, not the backend's: those arrive as OutboxError
        raise click.FileError(str(out_path), hint=e.strerror or str(e)) from e
    data = {
        "format": fmt,
        "path": str(out_path),
        "entries": written,
        "state": state_value(entry_state),
    }
    session.emit(data, lambda: f"exported {plural(written, 'entry')} to {out_path} ({fmt})")


@outbox_group.command("watch", short_help="Depth, bytes, ages and drain rate, live.")
@click.option(
    "--interval-s",
    default=WATCH_INTERVAL_S_DEFAULT,
    show_default=True,
    type=click.FloatRange(min=WATCH_INTERVAL_S_MIN),
    help="Between samples.",
)
@click.option(
    "--count", "samples_max", type=click.IntRange(min=1), default=None, help="Stop after N samples."
)
@outbox_command
def watch_command(session: Session, interval_s: float, samples_max: int | None) -> None:
    """Depth by state, bytes, the oldest pending age and the drain rate (entries delivered per
    second between samples), live on a terminal; one JSON line per sample with --json or
    without a terminal. Until Ctrl-C, or --count samples."""
    meter = DrainMeter()
    samples = 0
    next_sample_s = time.monotonic()
    with render.watch_display(session.as_json) as show, contextlib.suppress(KeyboardInterrupt):
        while samples_max is None or samples < samples_max:
            time.sleep(max(0.0, next_sample_s - time.monotonic()))
            taken_s = time.monotonic()
            session.refresh()
            stats = session.reader.stats(session.now_ms())
            rate, elapsed_s = meter.sample(taken_s, stats.delivered)
            samples += 1
            show(render.sample_json(stats, session.now_ms(), rate, elapsed_s), samples)
            # From this sample's time: samples are at least interval_s apart, however slow a
            # stats call is.
            next_sample_s = taken_s + interval_s
