"""The commitlog in Spark's tasks: segments cut into parts, each part one scan task.

Segments are listed on the driver (names and sizes only) and, when they are too few to keep the
cores busy, cut into parts of at most ``SCAN_PART_BYTES_MAX`` bytes (so that a log of one 1 GiB
segment keeps every core busy); each part is one task of the classification's map stage
(spark_classify.py), which scans the part's kept records (segment_scan.py says which) with
``scan_part``. Nothing per record passes through the driver.

A part's nominal byte range is arithmetic; its real one runs from the first record boundary at or
past its nominal start to the first at or past its nominal end, so every record is read by the one
part it starts in. The task finds its start as the first record past its nominal start that
claims its own phy_offset (broker.store.codec.boundary, which reads the bytes of the one record
spanning the cut), or, where there is none within reach (zeros, a blank marker, damage, a huge
record), by walking the chain of TOTALSIZE fields from the segment's start
(broker.store.codec.scan_columns.skip_chain). The part before stops at the first boundary its
own scan reaches at or past the cut (end kind PART): the two must agree, and where they do not (a
record forged inside another's body claimed the cut) the segment is scanned again whole. Where
the chain ends first (zeros, a blank marker, a torn record), every later part finds the same end
and reads nothing.

Each part's counts reach the driver through a Spark accumulator keyed by (source, segment start,
the part's nominal start), so a task run twice (a retry, a recomputed stage) reports the same
numbers once, and ``segment_stats`` merges them into one ``SegmentStats`` a segment. The scan of a
segment ends at the first part that did not reach its end: a damaged record the chain walks past
(a flipped byte, its size intact) ends the part it is in, yet a later part has read past it. Such
a segment is named in ``PartsMerged.rescan``; the job scans it again whole (spark_engine.py).
"""

from __future__ import annotations

import itertools
import mmap
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import Accumulator, AccumulatorParam
from pyspark.sql import SparkSession

from broker.store.codec.boundary import CLAIMED_SEARCH_BYTES_MAX, first_claimed_record
from broker.store.codec.scan import ScanEndKind
from broker.store.codec.scan_columns import skip_chain
from reconcile.segment_scan import (
    Segment,
    SegmentStats,
    scan_segment,
)

# Bytes of a segment one scan task reads at most when the segments are too few to keep the cores
# busy (fewer than SCAN_TASKS_PER_CORE a core): the broker's 1 GiB segment is then 4 tasks, so
# two cores share a log of one segment, and a task's share stays about a second of work.
SCAN_PART_BYTES_MAX = 256 * 1024 * 1024
SCAN_TASKS_PER_CORE = 2
# What the scan tasks' accumulator is keyed by: (source, file_from_offset, the part's nominal
# start in the segment).
StatsKey = tuple[int, int, int]
# Summed over a segment's parts (up to the part its scan ended in).
_SUMMED = (
    "records",
    "kept_records",
    "parked_records",
    "system_topic_records",
    "rollback_records",
    "records_without_id",
)
# Of the part the segment's scan ended in.
_FROM_END = (
    "end_kind",
    "end_phy_offset",
    "end_reason",
    "scanned_bytes",
    "blank_bytes",
    "written_after_phy_offset",
)


class _SegmentStatsParam(AccumulatorParam[dict[StatsKey, dict[str, Any]]]):
    """Merges per-part stats by key: a part scanned twice counts once."""

    def zero(self, value: dict[StatsKey, dict[str, Any]]) -> dict[StatsKey, dict[str, Any]]:
        return {}

    def addInPlace(  # noqa: N802 - pyspark's name
        self, value1: dict[StatsKey, dict[str, Any]], value2: dict[StatsKey, dict[str, Any]]
    ) -> dict[StatsKey, dict[str, Any]]:
        value1.update(value2)
        return value1


def stats_accumulator(spark: SparkSession) -> Accumulator[dict[StatsKey, dict[str, Any]]]:
    return spark.sparkContext.accumulator({}, _SegmentStatsParam())


def part_bytes(segments: list[Segment], cores: int) -> int:
    """Whole segments when there are enough to keep every core busy: a part may have to walk the
    size chain over the parts before it (part_start). Else parts of at most
    SCAN_PART_BYTES_MAX."""
    if len(segments) >= SCAN_TASKS_PER_CORE * cores:
        return max(1, *(s.size_bytes for s in segments))
    return SCAN_PART_BYTES_MAX


def parts(segment: Segment, part_bytes_max: int) -> list[tuple[int, int | None]]:
    """The nominal (from, to) byte ranges of a segment's parts; the last one's ``to`` is None."""
    assert part_bytes_max > 0
    count = max(1, -(-segment.size_bytes // part_bytes_max))
    starts = [i * part_bytes_max for i in range(count)]
    return [(a, b) for a, b in zip(starts, [*starts[1:], None], strict=True)]


def scan_part(
    path: Path, found: SegmentStats, batch_records_max: int, part_from: int, part_to: int | None
) -> Iterator[pa.RecordBatch]:
    """The kept records of the records starting in [part_from, part_to) of a segment."""
    start = part_start(path, found.file_from_offset, part_from) if part_from else 0
    # A part whose start the size chain put before its nominal one begins where an earlier
    # part's scan ends: that part looks past the stop, and its stats are the segment's.
    yield from scan_segment(
        path, found, batch_records_max, start, part_to, look_past_stop=start >= part_from
    )


def part_start(path: Path, file_from_offset: int, part_from: int) -> int:
    """The first record boundary at or past ``part_from``: the first record there that claims
    its own place (boundary.py), else by the size chain from the segment's start (or where the
    chain ends before it). ``merge_parts`` confirms it against where the part before ended. An
    unreadable file: ``part_from``, where the scan then says it is unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return part_from
    try:
        size = os.fstat(fd).st_size
        if size <= part_from:
            return part_from
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as buf:
            claimed = first_claimed_record(
                buf, size, file_from_offset, part_from, CLAIMED_SEARCH_BYTES_MAX
            )
            return skip_chain(buf, size, 0, part_from) if claimed is None else claimed
    except (OSError, ValueError):
        return part_from
    finally:
        os.close(fd)


@dataclass(slots=True)
class PartsMerged:
    segments: list[SegmentStats]  # one a segment, in (source, file_from_offset) order
    # Segments a part read past the damage an earlier part stopped at: to be scanned whole.
    rescan: set[tuple[int, int]] = field(default_factory=set)


def segment_stats(scanned: dict[StatsKey, dict[str, Any]]) -> PartsMerged:
    """The parts' stats (the accumulator's value) merged into one SegmentStats a segment."""
    by_segment: dict[tuple[int, int], list[SegmentStats]] = {}
    for source, from_offset, part_from in sorted(scanned):
        found = SegmentStats(**scanned[source, from_offset, part_from])
        by_segment.setdefault((source, from_offset), []).append(found)
    merged = PartsMerged([])
    for segment, found_parts in by_segment.items():
        one, read_past = merge_parts(found_parts)
        merged.segments.append(one)
        if read_past:
            merged.rescan.add(segment)
    return merged


def merge_parts(found: Iterable[SegmentStats]) -> tuple[SegmentStats, bool]:
    """One segment's parts (in order) as one SegmentStats, and whether they must be scanned again
    whole: a part read records past where the segment's scan ended (the first part that did not
    reach its end), or a part began elsewhere than where the one before it ended."""
    parts_found = list(found)
    last = next(
        (i for i, p in enumerate(parts_found) if p.end_kind != ScanEndKind.PART),
        len(parts_found) - 1,
    )
    counted = parts_found[: last + 1]
    # A part must begin where the one before it ended: a start found by a record claiming its
    # place (part_start) that the chain does not reach was inside a record's body.
    apart = any(a.scanned_bytes != b.start_position for a, b in itertools.pairwise(counted))
    one = SegmentStats(**{f.name: getattr(counted[0], f.name) for f in fields(SegmentStats)})
    for name in _SUMMED:
        setattr(one, name, sum(getattr(p, name) for p in counted))
    for name in _FROM_END:
        setattr(one, name, getattr(counted[-1], name))
    one.size_bytes = max(p.size_bytes for p in counted)
    firsts = [p.first_store_timestamp_ms for p in counted if p.first_store_timestamp_ms is not None]
    lasts = [p.last_store_timestamp_ms for p in counted if p.last_store_timestamp_ms is not None]
    one.first_store_timestamp_ms = firsts[0] if firsts else None
    one.last_store_timestamp_ms = lasts[-1] if lasts else None
    one.store_hosts = sorted({h for p in counted for h in p.store_hosts})
    read_past = apart or any(p.records for p in parts_found[last + 1 :])
    return one, read_past
