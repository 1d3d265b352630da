"""Incremental runs: reconcile what is new since the last run, and settle what was pending.

A scheduled run reads only what was written since the checkpoint (checkpoint.py): each commitlog
segment from the byte position the last scan stopped at, each ledger from the line it read to.
The messages the last run left open come back from the checkpoint as their own rows (their
records and ledger lines), so the classification is the in-process engine's, unchanged: a
message is classified once all its evidence is read, however many runs it took to arrive.

Settling: the *watermark* is the latest store or acknowledgement time read so far. A message is
settled, its outcome final and counted into the checkpoint's cumulative cells, once its latest
evidence (last store time, first acknowledgement, spool and delivery times) is more than the
settle window (``--settle-minutes``) older than the watermark, unless the outbox still holds it
PENDING or DEAD (its fate is open) or its acknowledgement is a ledger's last, unfinished line.
The others stay open, reported as they stand and carried to the next run. A settled message's
outbox entry, still in later exports, is left out of later runs: it was counted.

A run catches up in chunks of about ``--in-process-records-max`` records (incremental_inputs.py
says how they are cut), saving the checkpoint after each: however much was written since the
last run, its memory stays bounded, and a run stopped half-way resumes from its last chunk. A
chunk settles by the time before which its scan is complete, the last by the watermark.

What an incremental run reports (summary.json): its own messages (those settled by it and those
open now) as every run does, and ``incremental``: the positions it started from, what it read,
what it settled and what is open, and ``cumulative``: every message settled by every run since
the checkpoint began plus those open now. A ``--full`` run over the same inputs gives the
cumulative figures, provided the evidence of each message arrived within the settle window; a
message copy stored later than that (a resend long after) is counted as a message of its own.
A ledger's unfinished last line is read by every run until finished, counted once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from reconcile import checkpoint as checkpoints
from reconcile.checkpoint import Checkpoint, State
from reconcile.commitlog_sources import CommitlogSource
from reconcile.config import JobConfig
from reconcile.errors import InputError
from reconcile.figures import summarise_ledger
from reconcile.in_process import figures
from reconcile.in_process.classify import classify
from reconcile.in_process.engine import RECORDS_SCHEMA, Progress
from reconcile.in_process.inputs import read_outbox
from reconcile.incremental_figures import LEDGER_COUNTS, RunFigures, incremental_block
from reconcile.incremental_inputs import (
    Chunk,
    ledger_starts,
    pending_segments,
    read_chunk,
)
from reconcile.input_formats import OUTBOX_ARROW_SCHEMA
from reconcile.parquet_parts import emptied, write_part
from reconcile.segment_scan import UNREADABLE
from reconcile.summary_document import Found, Phases, split_scope

_OPEN_OUTBOX_STATES = ("PENDING", "DEAD")


def reconcile_incremental(
    config: JobConfig, sources: list[CommitlogSource], progress: Progress | None = None
) -> Found:
    assert config.checkpoint is not None
    previous = None if config.full else checkpoints.load(config.checkpoint)
    if previous is not None:
        _check_made_for(previous.state, config, sources)
    book = previous or _empty(config, sources)
    run_number = book.state.run + 1
    phase = Phases()
    with phase("outbox_read"):
        outbox = read_outbox(config.outbox)
    with phase("plan"):
        pending = pending_segments(sources, _starts(book.state, sources))
    starts = ledger_starts(config.ledgers, book.state.ledgers)
    details = _fresh_details(config.out_dir)
    run = RunFigures(config.drill_down_ids_max)
    fold = len(sources) > 1
    while True:
        with phase("scan"):
            chunk, pending = read_chunk(
                pending, config.ledgers, starts, config.in_process_records_max,
                config.scan_batch_records_max, progress,
            )  # fmt: skip
        done_figures, tail_figures = _ledger(chunk.done_acks), _ledger(chunk.tail_acks)
        with phase("classify"):
            book, settled, settled_cells, still_open = _settle(
                config, book, chunk, (done_figures, tail_figures), outbox, run_number, fold
            )
        run.chunks += 1
        run.segments += chunk.scanned
        run.new_records += chunk.records.num_rows
        run.new_ledger_lines += chunk.done_acks.num_rows if chunk.done_acks is not None else 0
        run.add_lines(chunk.done_acks, done_figures)
        run.add_lines(chunk.tail_acks, tail_figures)
        run.add(settled, settled_cells)
        write_part(settled, details["messages"], run.chunks)
        starts = chunk.ledgers
        if chunk.complete_before_ms is None:
            break
        checkpoints.save(config.checkpoint, book)  # a run stopped later resumes from here
        if progress is not None:
            progress(f"caught up to {chunk.complete_before_ms}: {run.new_records:,} records")
    run.unfinished_ledger_lines = chunk.tail_acks.num_rows if chunk.tail_acks is not None else 0
    run.add(still_open)
    write_part(still_open, details["messages"], run.chunks + 1)
    saved = checkpoints.save(config.checkpoint, book)
    scope = book.state.scope_topics
    found, counts = run.found(
        config, scope, figures.outbox_stats(outbox), {k: str(v) for k, v in details.items()},
        phase, fold,
    )  # fmt: skip
    write_part(counts, details["counts"], 0)
    found.incremental = incremental_block(
        config, book.state, saved, run, book.settled_cells, tail_figures
    )
    return found


def _settle(
    config: JobConfig,
    book: Checkpoint,
    chunk: Chunk,
    read_figures: tuple[dict[str, Any], dict[str, Any]],
    outbox: pa.Table,
    run_number: int,
    fold: bool,
) -> tuple[Checkpoint, pa.Table, pa.Table, pa.Table]:
    """Classify the chunk with what was open; the next checkpoint, the settled messages, their
    counts per (topic, bucket), and the open ones. ``read_figures``: the chunk's finished and
    unfinished ledger lines'."""
    done_figures, tail_figures = read_figures
    state = book.state
    done = _concat(book.open_acks, chunk.done_acks)
    acks = _concat(done, chunk.tail_acks)
    records = pa.concat_tables([book.open_records, chunk.records])
    read = _concat(chunk.done_acks, chunk.tail_acks)
    named = [*done_figures.get("topics", []), *tail_figures.get("topics", [])]
    scope = sorted(set(state.scope_topics) | set(named))
    split_scope({"topics": scope})  # the scope's limit, as a whole run has it
    counted = pc.is_in(outbox["message_id"], value_set=book.settled_outbox_ids["message_id"])
    unsettled = outbox.filter(pc.invert(pc.fill_null(counted, False)))
    classified = classify(records, acks, unsettled, scope, config.bucket_ms, fold)
    seen = _latest(state.watermark_ms, chunk.records, read)
    settle_by = seen if chunk.complete_before_ms is None else chunk.complete_before_ms
    is_open = _open(classified, settle_by, config.settle_ms, chunk.tail_acks)
    settled, still_open = classified.filter(pc.invert(is_open)), classified.filter(is_open)
    open_ids = still_open["message_id"]
    next_state = State(
        run=run_number,
        commitlogs=state.commitlogs,
        segment_positions=_positions(state, chunk),
        ledgers=chunk.ledgers,
        watermark_ms=seen,
        settle_ms=config.settle_ms,
        bucket_ms=config.bucket_ms,
        scope_topics=scope,
        ledger_figures=_add(state.ledger_figures, done_figures),
        chunk=state.chunk + 1 if state.run == run_number else 0,
    )
    ids = _settled_outbox_ids(book.settled_outbox_ids["message_id"], settled, outbox)
    settled_cells = figures.cells(settled)
    return (
        Checkpoint(
            state=next_state,
            open_records=records.filter(pc.is_in(records["message_id"], value_set=open_ids)),
            open_acks=_open_acks(done, open_ids),
            settled_cells=figures.added_cells(book.settled_cells, settled_cells),
            settled_outbox_ids=pa.table({"message_id": ids}),
        ),
        settled,
        settled_cells,
        still_open,
    )


def _empty(config: JobConfig, sources: list[CommitlogSource]) -> Checkpoint:
    nothing = figures.cells(
        classify(RECORDS_SCHEMA.empty_table(), None, _no_outbox(), [], config.bucket_ms)
    )
    return Checkpoint(
        state=State(
            run=0, commitlogs=[str(s.directory) for s in sources],
            segment_positions=[{} for _ in sources], ledgers=[], watermark_ms=None,
            settle_ms=config.settle_ms, bucket_ms=config.bucket_ms, scope_topics=[],
            ledger_figures=dict.fromkeys(LEDGER_COUNTS, 0),
        ),
        open_records=RECORDS_SCHEMA.empty_table(),
        open_acks=None,
        settled_cells=nothing,
        settled_outbox_ids=pa.table({"message_id": pa.array([], pa.string())}),
    )  # fmt: skip


def _no_outbox() -> pa.Table:
    empty = OUTBOX_ARROW_SCHEMA.empty_table()
    return empty.append_column("malformed", pa.array([], pa.bool_()))


def _check_made_for(state: State, config: JobConfig, sources: list[CommitlogSource]) -> None:
    directories = [str(s.directory) for s in sources]
    if state.commitlogs != directories:
        raise InputError(
            f"checkpoint {config.checkpoint} was made for the commitlogs {state.commitlogs}, not "
            f"{directories}: start over with --full"
        )
    if state.bucket_ms != config.bucket_ms:
        raise InputError(
            f"checkpoint {config.checkpoint} counts {state.bucket_ms // 60_000}-minute buckets, "
            f"not {config.bucket_ms // 60_000}: start over with --full"
        )


def _starts(state: State, sources: list[CommitlogSource]) -> dict[tuple[int, str], int]:
    return {
        (source.index, name): position
        for source, positions in zip(sources, state.segment_positions, strict=True)
        for name, position in positions.items()
    }


def _positions(state: State, chunk: Chunk) -> list[dict[str, int]]:
    """Where the next read starts in each segment: where this chunk's scan stopped (where it
    started, for one that could not be read); the others as they were."""
    positions = [dict(p) for p in state.segment_positions]
    for found in chunk.scanned:
        if found.end_kind != UNREADABLE:
            positions[found.source][found.segment] = found.scanned_bytes
    return positions


def _latest(before: int | None, records: pa.Table, lines: pa.Table | None) -> int | None:
    """The watermark: the latest store or answer time seen so far."""
    times = [before]
    times.append(pc.max(records["store_timestamp_ms"]).as_py() if records.num_rows else None)
    if lines is not None and lines.num_rows:
        good = lines.filter(pc.invert(lines["malformed"]))
        times.append(pc.max(good["time_ms"]).as_py() if good.num_rows else None)
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _open(
    classified: pa.Table, settle_by: int | None, settle_ms: int, tail_acks: pa.Table | None
) -> pa.ChunkedArray:
    """Which messages stay open (module docstring); the others settle."""
    evidence = pc.max_element_wise(
        classified["last_store_timestamp_ms"], classified["first_ack_ms"],
        classified["spooled_ms"], classified["delivered_ms"],
    )  # fmt: skip
    if settle_by is None:
        recent = pa.chunked_array([pa.nulls(classified.num_rows, pa.bool_())])
    else:
        recent = pc.greater_equal(evidence, settle_by - settle_ms)
    held = pc.is_in(classified["outbox_state"], value_set=pa.array(_OPEN_OUTBOX_STATES))
    is_open = pc.or_(pc.fill_null(recent, False), pc.fill_null(held, False))
    if tail_acks is not None and tail_acks.num_rows:
        unfinished = pc.is_in(classified["message_id"], value_set=tail_acks["message_id"])
        is_open = pc.or_(is_open, pc.fill_null(unfinished, False))
    return is_open


def _open_acks(acks: pa.Table | None, open_ids: pa.ChunkedArray) -> pa.Table | None:
    """The finished, well-formed ledger lines of the messages still open."""
    if acks is None:
        return None
    good = acks.filter(pc.invert(acks["malformed"]))
    return good.filter(pc.is_in(good["message_id"], value_set=open_ids))


def _settled_outbox_ids(before: pa.ChunkedArray, settled: pa.Table, outbox: pa.Table) -> pa.Array:
    """Settled messages with an outbox entry, while the outbox still holds them."""
    now = settled.filter(pc.is_valid(settled["outbox_state"]))["message_id"]
    ids = pa.chunked_array([*before.chunks, *now.chunks], pa.string())
    still = pc.fill_null(pc.is_in(ids, value_set=outbox["message_id"]), False)
    return pc.unique(ids.filter(still))


def _ledger(lines: pa.Table | None) -> dict[str, Any]:
    if lines is None:
        return dict.fromkeys(LEDGER_COUNTS, 0)
    return summarise_ledger(figures.ledger_rows(lines))


def _add(a: dict[str, int], b: dict[str, Any]) -> dict[str, int]:
    return {name: int(a.get(name, 0)) + int(b.get(name, 0)) for name in LEDGER_COUNTS}


def _concat(a: pa.Table | None, b: pa.Table | None) -> pa.Table | None:
    if a is None or b is None:
        return a if b is None else b
    return pa.concat_tables([a, b.select(a.column_names).cast(a.schema)])


def _fresh_details(out_dir: Path) -> dict[str, Path]:
    return {
        "messages": emptied(out_dir / "details" / "messages"),
        "counts": emptied(out_dir / "details" / "counts"),
    }
