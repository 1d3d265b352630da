"""What an incremental run reads in one chunk: segments in time order, ledgers up to the same time.

A run catches up in chunks of about ``in_process_records_max`` records, so its memory stays
bounded however much was written since the last run (a first run over days of retention):

- The segments left to read (each from its checkpoint position) are taken in the order of the
  store time of their first unread record, across every commitlog: a chunk scans them one by one
  until it holds the limit's records (at least one segment).
- Its *complete-before* time: the first unread record's store time of the next segment left, or
  none when nothing is left. Every record stored before it, in every commitlog, is read.
- The ledgers are read up to that time (their lines are in time order: a sidecar records its
  answers as it sends them), found by bisecting each file on its lines' ``time_ms``; the last
  chunk reads them to their end, an unfinished last line apart (read again next run).

The ledgers are read after the scan, up to a time before which the scan is complete: the sidecar
writes STORED after the broker stored the record, so every STORED line read names a record
already scanned (or one stored at that same millisecond, which stays open: incremental.py).
"""

from __future__ import annotations

import json
import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from broker.store.codec.scan import SegmentScanner
from reconcile.checkpoint import LedgerPosition
from reconcile.commitlog_sources import CommitlogSource
from reconcile.errors import InputError
from reconcile.in_process.engine import RECORDS_SCHEMA, Progress, scan
from reconcile.in_process.inputs import line_end_after, read_ledgers
from reconcile.segment_scan import Segment, SegmentStats

# Bytes read back from a ledger's end at a time, looking for its last line's end.
_TAIL_BLOCK_BYTES = 64 * 1024


@dataclass(slots=True)
class Pending:
    """A segment with something left to read."""

    segment: Segment
    start_position: int
    first_store_ms: int  # the store time of its first unread record


@dataclass(slots=True)
class Chunk:
    records: pa.Table
    scanned: list[SegmentStats]
    complete_before_ms: int | None  # None: everything was read
    done_acks: pa.Table | None  # finished ledger lines read
    tail_acks: pa.Table | None  # unfinished last lines (the last chunk only)
    ledgers: list[LedgerPosition]  # where the next chunk or run starts


def pending_segments(
    sources: list[CommitlogSource], starts: dict[tuple[int, str], int]
) -> list[Pending]:
    """Every segment with a record past its start position, in the order of that record's
    store time (segments with nothing new are left out: the scan would find nothing)."""
    found = []
    for source in sources:
        for segment in source.segments:
            start = starts.get((segment.source, segment.path.name), 0)
            first = first_store_ms(segment.path, start)
            if first is not None:
                found.append(Pending(segment, start, first))
    return sorted(found, key=lambda p: (p.first_store_ms, p.segment.source))


def first_store_ms(path: Path, position: int) -> int | None:
    """The store time of the whole record at ``position`` in a segment, or None (zeros, a blank
    marker, damage, an unreadable file: nothing to read there now)."""
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            scanner = SegmentScanner(buf, int(path.name), len(buf))
            scanner.position = position
            batch = next(iter(scanner.batches(1)), None)
            return int(batch.store_timestamp_ms[0]) if batch is not None else None
    except (OSError, ValueError):
        return None


def read_chunk(
    pending: list[Pending],
    ledgers: tuple[Path, ...],
    ledger_starts: list[LedgerPosition],
    records_max: int,
    batch_records_max: int,
    progress: Progress | None,
) -> tuple[Chunk, list[Pending]]:
    """Scan segments from ``pending`` until ``records_max`` records (at least one segment), then
    the ledgers up to the time the scan is complete before; returns the chunk and what is left."""
    tables: list[pa.Table] = []
    scanned: list[SegmentStats] = []
    taken = 0
    while taken < len(pending) and sum(t.num_rows for t in tables) < records_max:
        p = pending[taken]
        one = CommitlogSource(p.segment.source, p.segment.path.parent, [p.segment])
        records, stats = scan(
            [one], {(p.segment.source, p.segment.path.name): p.start_position},
            batch_records_max, None, progress,
        )  # fmt: skip
        tables.append(records)
        scanned += stats
        taken += 1
    left = pending[taken:]
    complete_before = left[0].first_store_ms if left else None
    done, tail, positions = read_ledger_lines(ledgers, ledger_starts, complete_before)
    records = pa.concat_tables(tables) if tables else RECORDS_SCHEMA.empty_table()
    return Chunk(records, scanned, complete_before, done, tail, positions), left


def ledger_starts(ledgers: tuple[Path, ...], before: list[LedgerPosition]) -> list[LedgerPosition]:
    """Where each ledger is read from: the checkpoint's position, or its start for a ledger new
    to the checkpoint, replaced by another file (another inode) or cut shorter."""
    known = {p.path: p for p in before}
    starts = []
    for path in ledgers:
        try:
            stat = path.stat()
        except OSError as e:
            raise InputError(f"cannot read acknowledgement ledger {path}: {e}") from e
        last = known.get(str(path))
        same = (
            last is not None and last.inode == stat.st_ino and stat.st_size >= last.position_bytes
        )
        starts.append(
            LedgerPosition(str(path), last.position_bytes if same and last else 0, stat.st_ino)
        )
    return starts


def read_ledger_lines(
    ledgers: tuple[Path, ...], starts: list[LedgerPosition], before_ms: int | None
) -> tuple[pa.Table | None, pa.Table | None, list[LedgerPosition]]:
    """The finished lines from each start up to the first line timed after ``before_ms`` (to
    the last finished line when None), the unfinished last lines (when None), and where the
    next read starts."""
    if not ledgers:
        return None, None, []
    done_ranges: list[tuple[int, int | None]] = []
    tail_ranges: list[tuple[int, int | None]] = []
    positions = []
    for path, start in zip(ledgers, starts, strict=True):
        try:
            size = path.stat().st_size
            finished = _last_line_end(path, start.position_bytes, size)
            cut = (
                finished
                if before_ms is None
                else _first_line_after(path, start.position_bytes, finished, before_ms)
            )
        except OSError as e:
            raise InputError(f"cannot read acknowledgement ledger {path}: {e}") from e
        done_ranges.append((start.position_bytes, cut))
        tail_ranges.append((finished, size) if before_ms is None else (cut, cut))
        positions.append(LedgerPosition(str(path), cut, start.inode))
    done = read_ledgers(ledgers, tuple(done_ranges))
    tail = read_ledgers(ledgers, tuple(tail_ranges)) if before_ms is None else None
    return done, tail, positions


def _last_line_end(path: Path, start: int, size: int) -> int:
    """The position just past the last newline in [start, size), or ``start`` if none."""
    with path.open("rb") as f:
        end = size
        while end > start:
            begin = max(start, end - _TAIL_BLOCK_BYTES)
            f.seek(begin)
            at = f.read(end - begin).rfind(b"\n")
            if at >= 0:
                return begin + at + 1
            end = begin
    return start


def _first_line_after(path: Path, start: int, end: int, time_ms: int) -> int:
    """The start of the first line in [start, end) timed after ``time_ms`` (``end`` if none),
    by bisection on line starts (a ledger's times do not decrease). A line that does not parse
    is never the answer, and a probe landing on one looks at the next that does."""
    with path.open("rb") as f:
        low, high = start, end  # no line before low is after; the answer is at most high
        while low < high:
            middle = (low + high) // 2
            probe = low if middle <= low else line_end_after(f, middle, end)
            line_time, line_end = _line_time(f, probe) if probe < high else (None, probe)
            while line_time is None and line_end < high:
                probe = line_end
                line_time, line_end = _line_time(f, probe)
            if line_time is None:
                # Nothing to compare with in the upper half: walk the lines left from low.
                while low < high:
                    line_time, line_end = _line_time(f, low)
                    if line_time is not None and line_time > time_ms:
                        return low
                    low = line_end
                return high
            if line_time > time_ms:
                high = probe
            else:
                low = line_end
        return high


def _line_time(f: BinaryIO, position: int) -> tuple[int | None, int]:
    """The ``time_ms`` of the line at ``position`` (None when it has none) and its end."""
    f.seek(position)
    line = f.readline()
    try:
        value = json.loads(line)
        found = value.get("time_ms") if isinstance(value, dict) else None
    except ValueError:
        found = None
    usable = isinstance(found, int) and not isinstance(found, bool)
    return (found if usable else None), position + len(line)
