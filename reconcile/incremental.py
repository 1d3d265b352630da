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

Order: the ledgers are read before the commitlog. The sidecar writes STORED only after the broker
stored the record, so the log scanned after holds the record of every STORED answer read.

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
from reconcile.checkpoint import Checkpoint, LedgerPosition, State
from reconcile.commitlog_sources import CommitlogSource
from reconcile.config import JobConfig
from reconcile.errors import InputError
from reconcile.figures import counts_only, iso_utc, summarise_ledger, with_bucket, with_key
from reconcile.in_process import figures
from reconcile.in_process.engine import (
    RECORDS_SCHEMA,
    Inputs,
    Progress,
    TooManyRecordsError,
    find,
    ledger_summary,
    scan,
)
from reconcile.in_process.inputs import read_ledgers, read_outbox
from reconcile.segment_scan import UNREADABLE, SegmentStats
from reconcile.summary_document import Found, Phases

# Bytes read back from a ledger's end at a time, looking for its last line's end.
_TAIL_BLOCK_BYTES = 64 * 1024
_LEDGER_COUNTS = ("lines", "malformed", "stored", "spooled", "spooled_ambiguous")
_OPEN_OUTBOX_STATES = ("PENDING", "DEAD")


def reconcile_incremental(
    config: JobConfig, sources: list[CommitlogSource], progress: Progress | None = None
) -> Found:
    assert config.checkpoint is not None
    previous = None if config.full else checkpoints.load(config.checkpoint)
    if previous is not None:
        _check_made_for(previous.state, config, sources)
    phase = Phases()
    done_acks, tail_acks, ledger_positions, new_records, segments, outbox = _read(
        config, previous, sources, phase, progress
    )
    carried = previous.open_records if previous else RECORDS_SCHEMA.empty_table()
    records = pa.concat_tables([carried, new_records])
    ledgers_done = _concat(previous.open_acks if previous else None, done_acks)
    acks = _concat(ledgers_done, tail_acks)
    settled_ids = (
        previous.settled_outbox_ids["message_id"] if previous else pa.array([], pa.string())
    )
    counted = pc.is_in(outbox["message_id"], value_set=settled_ids)
    this_run = summarise_ledger(figures.ledger_rows(_concat(done_acks, tail_acks)))
    scope = sorted(set(previous.state.scope_topics if previous else []) | set(this_run["topics"]))
    inputs = Inputs(
        records, segments, acks,
        outbox.filter(pc.invert(pc.fill_null(counted, False))), {**this_run, "topics": scope},
    )  # fmt: skip
    found, classified = find(config, len(sources) > 1, inputs, phase)
    watermark = _watermark(previous, new_records, _concat(done_acks, tail_acks))
    is_open = _open(classified, watermark, config.settle_ms, tail_acks)
    settled, still_open = classified.filter(pc.invert(is_open)), classified.filter(is_open)
    state = State(
        run=(previous.state.run if previous else 0) + 1,
        commitlogs=[str(s.directory) for s in sources],
        segment_positions=_positions(previous, sources, segments),
        ledgers=ledger_positions,
        watermark_ms=watermark,
        settle_ms=config.settle_ms,
        bucket_ms=config.bucket_ms,
        scope_topics=scope,
        ledger_figures=_add_counts(
            previous.state.ledger_figures if previous else {},
            ledger_summary(done_acks) if done_acks is not None else {},
        ),
    )
    open_ids = still_open["message_id"]
    settled_cells = figures.cells(settled)
    if previous is not None:
        settled_cells = pa.concat_tables([previous.settled_cells, settled_cells])
    saved = checkpoints.save(
        config.checkpoint,
        Checkpoint(
            state=state,
            open_records=records.filter(pc.is_in(records["message_id"], value_set=open_ids)),
            open_acks=_open_acks(ledgers_done, open_ids),
            settled_cells=settled_cells,
            settled_outbox_ids=_settled_outbox_ids(previous, settled, outbox),
        ),
    )
    found.incremental = _incremental_figures(
        config, state, saved, (new_records, done_acks, tail_acks), settled, still_open,
        settled_cells, ledger_summary(tail_acks) if tail_acks is not None else {},
    )  # fmt: skip
    return found


def _read(
    config: JobConfig,
    previous: Checkpoint | None,
    sources: list[CommitlogSource],
    phase: Phases,
    progress: Progress | None,
) -> tuple[
    pa.Table | None, pa.Table | None, list[LedgerPosition], pa.Table, list[SegmentStats], pa.Table
]:
    """What is new: the ledgers' finished and unfinished lines and where they end, the log's
    records and scans, and the outbox (whole: it is a snapshot, not a log)."""
    with phase("ledger_parse"):
        done_acks, tail_acks, ledger_positions = _read_new_lines(config, previous)
    with phase("scan"):
        try:
            new_records, segments = scan(
                sources, _starts(previous, sources), config.scan_batch_records_max,
                config.in_process_records_max, progress,
            )  # fmt: skip
        except TooManyRecordsError as e:
            raise InputError(
                f"{e} since the last incremental run: run more often, raise "
                "--in-process-records-max, or reconcile this once without a checkpoint"
            ) from e
    with phase("outbox_read"):
        outbox = read_outbox(config.outbox)
    return done_acks, tail_acks, ledger_positions, new_records, segments, outbox


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


def _starts(
    previous: Checkpoint | None, sources: list[CommitlogSource]
) -> dict[tuple[int, str], int]:
    if previous is None:
        return {}
    return {
        (source.index, name): position
        for source, positions in zip(sources, previous.state.segment_positions, strict=True)
        for name, position in positions.items()
    }


def _positions(
    previous: Checkpoint | None, sources: list[CommitlogSource], scanned: list[SegmentStats]
) -> list[dict[str, int]]:
    """Where the next run starts in each segment: where this scan stopped (an unreadable one
    where this scan would have started). Segments retention deleted are forgotten."""
    starts = _starts(previous, sources)
    positions: list[dict[str, int]] = [{} for _ in sources]
    for found in scanned:
        start = starts.get((found.source, found.segment), 0)
        reached = start if found.end_kind == UNREADABLE else found.scanned_bytes
        positions[found.source][found.segment] = reached
    return positions


def _read_new_lines(
    config: JobConfig, previous: Checkpoint | None
) -> tuple[pa.Table | None, pa.Table | None, list[LedgerPosition]]:
    """The ledgers' lines since the last run: the finished ones, the unfinished last ones (read
    again next time) and where the next run starts."""
    if not config.ledgers:
        return None, None, []
    before = {p.path: p for p in previous.state.ledgers} if previous else {}
    done_ranges: list[tuple[int, int | None]] = []
    tail_ranges: list[tuple[int, int | None]] = []
    positions: list[LedgerPosition] = []
    for path in config.ledgers:
        try:
            stat = path.stat()
            last = before.get(str(path))
            same_file = last is not None and last.inode == stat.st_ino
            start = (
                last.position_bytes
                if same_file and last and stat.st_size >= last.position_bytes
                else 0
            )
            finished = _last_line_end(path, start, stat.st_size)
        except OSError as e:
            raise InputError(f"cannot read acknowledgement ledger {path}: {e}") from e
        done_ranges.append((start, finished))
        tail_ranges.append((finished, stat.st_size))
        positions.append(LedgerPosition(str(path), finished, stat.st_ino))
    done = read_ledgers(config.ledgers, tuple(done_ranges))
    tail = read_ledgers(config.ledgers, tuple(tail_ranges))
    return done, tail, positions


def _last_line_end(path: Path, start: int, size: int) -> int:
    """The position just past the last newline in [start, size), or ``start`` if none."""
    with path.open("rb") as f:
        end = size
        while end > start:
            begin = max(start, end - _TAIL_BLOCK_BYTES)
            f.seek(begin)
            block = f.read(end - begin)
            at = block.rfind(b"\n")
            if at >= 0:
                return begin + at + 1
            end = begin
    return start


def _watermark(previous: Checkpoint | None, records: pa.Table, acks: pa.Table | None) -> int | None:
    times = [previous.state.watermark_ms if previous else None]
    times.append(pc.max(records["store_timestamp_ms"]).as_py() if records.num_rows else None)
    if acks is not None and acks.num_rows:
        good = acks.filter(pc.invert(acks["malformed"]))
        times.append(pc.max(good["time_ms"]).as_py() if good.num_rows else None)
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _open(
    classified: pa.Table, watermark: int | None, settle_ms: int, tail_acks: pa.Table | None
) -> pa.ChunkedArray:
    """Which messages stay open (module docstring); the others settle."""
    evidence = pc.max_element_wise(
        classified["last_store_timestamp_ms"], classified["first_ack_ms"],
        classified["spooled_ms"], classified["delivered_ms"],
    )  # fmt: skip
    recent = (
        pc.greater_equal(evidence, watermark - settle_ms)
        if watermark is not None
        else pa.chunked_array([pa.nulls(classified.num_rows, pa.bool_())])
    )
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


def _settled_outbox_ids(
    previous: Checkpoint | None, settled: pa.Table, outbox: pa.Table
) -> pa.Table:
    """Settled messages with an outbox entry, while the outbox still holds them."""
    ids = settled.filter(pc.is_valid(settled["outbox_state"]))["message_id"]
    if previous is not None:
        ids = pa.chunked_array([*previous.settled_outbox_ids["message_id"].chunks, *ids.chunks])
    still = pc.is_in(ids, value_set=outbox["message_id"])
    return pa.table({"message_id": pc.unique(ids.filter(still))})


def _concat(a: pa.Table | None, b: pa.Table | None) -> pa.Table | None:
    if a is None or b is None:
        return a if b is None else b
    return pa.concat_tables([a, b.select(a.column_names).cast(a.schema)])


def _add_counts(a: dict[str, int], b: dict[str, Any]) -> dict[str, int]:
    return {name: int(a.get(name, 0)) + int(b.get(name, 0)) for name in _LEDGER_COUNTS}


def _incremental_figures(
    config: JobConfig,
    state: State,
    saved: Path,
    read: tuple[pa.Table, pa.Table | None, pa.Table | None],
    settled: pa.Table,
    still_open: pa.Table,
    settled_cells: pa.Table,
    tail_figures: dict[str, Any],
) -> dict[str, Any]:
    new_records, done_acks, tail_acks = read
    limit = config.summary_rows_max
    cumulative = figures.roll_up(pa.concat_tables([settled_cells, figures.cells(still_open)]))

    def level(number: int, order: list[str]) -> list[dict[str, Any]]:
        return figures.level_rows(cumulative, number, order, limit)

    total = level(figures.LEVEL_TOTAL, [])
    return {
        "run": state.run,
        "checkpoint": str(saved),
        "started_over": config.full,
        "settle_ms": config.settle_ms,
        "watermark_ms": state.watermark_ms,
        "watermark": iso_utc(state.watermark_ms) if state.watermark_ms is not None else None,
        "new_records": new_records.num_rows,
        "new_ledger_lines": (done_acks.num_rows if done_acks is not None else 0),
        "unfinished_ledger_lines": (tail_acks.num_rows if tail_acks is not None else 0),
        "settled": counts_only(_total(settled)),
        "open": counts_only(_total(still_open)),
        "cumulative": {
            "totals": counts_only(total[0] if total else {}),
            "per_topic": [with_key(r, "topic") for r in level(figures.LEVEL_TOPIC, ["topic"])][
                :limit
            ],
            "per_bucket": [
                with_bucket(r) for r in level(figures.LEVEL_BUCKET, ["bucket_start_ms"])
            ][:limit],
            "per_topic_bucket": [
                with_bucket(r, "topic")
                for r in level(figures.LEVEL_TOPIC_BUCKET, ["bucket_start_ms", "topic"])
            ][:limit],
            "ledgers": _add_counts(state.ledger_figures, tail_figures),
        },
    }


def _total(classified: pa.Table) -> dict[str, Any]:
    rows = figures.level_rows(figures.counts(classified), figures.LEVEL_TOTAL, [], 1)
    return rows[0] if rows else {}
