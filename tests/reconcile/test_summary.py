"""How the summary describes a commitlog scan (reconcile/summary.py), without Spark.

Proves: a scan that stopped early in the last segment written is a "torn tail" (an empty segment
the broker prepared after it does not count), in an earlier segment damage "inside the log", as
are an unreadable segment and zeros before the end of a segment that later ones continue; a
segment filled exactly or padded with a blank marker is no stop; a missing segment between two
others is reported as a gap of phy_offsets; totals add up the segments' counts.
"""

from __future__ import annotations

from pathlib import Path

from broker.store.codec.scan import ScanEndKind
from reconcile.figures import commitlog_summary
from reconcile.segment_scan import UNREADABLE, Segment, SegmentStats

SIZE = 1024


def segment(n: int) -> Segment:
    return Segment(Path(f"{n * SIZE:020d}"), n * SIZE, SIZE)


def stats(n: int, end: str, reason: str = "", records: int = 10, at: int = 500) -> SegmentStats:
    return SegmentStats(
        segment=f"{n * SIZE:020d}", file_from_offset=n * SIZE, size_bytes=SIZE,
        records=records, kept_records=records - 1 if records else 0,
        system_topic_records=1 if records else 0, end_kind=end, end_phy_offset=n * SIZE + at,
        scanned_bytes=at, end_reason=reason,
    )  # fmt: skip


def test_where_a_scan_stopped_and_which_segments_are_missing() -> None:
    # Segment 3 is gone; 7 is the next segment the broker prepared, all zeros.
    segments = [segment(n) for n in (0, 1, 2, 4, 5, 6, 7)]
    inside = "inside the log (not its last segment)"
    scanned = [
        stats(0, ScanEndKind.BLANK, at=SIZE - 100),
        stats(1, ScanEndKind.CORRUPT, reason="record CRC mismatch"),
        stats(2, UNREADABLE, reason="No such file or directory"),
        stats(4, ScanEndKind.END),  # zeros, then segment 5 goes on
        stats(5, ScanEndKind.END, at=SIZE),  # filled exactly
        stats(6, ScanEndKind.CORRUPT, reason="undecodable record: torn"),
        stats(7, ScanEndKind.END, records=0, at=0),
    ]

    summary = commitlog_summary(segments, scanned, limit=100)

    assert [(s["segment"], s["where"], s["reason"]) for s in summary["stops"]] == [
        (f"{SIZE:020d}", inside, "record CRC mismatch"),
        (f"{2 * SIZE:020d}", inside, "No such file or directory"),
        (f"{4 * SIZE:020d}", inside, "zeros before the segment's end, records after them"),
        (f"{6 * SIZE:020d}", "torn tail", "undecodable record: torn"),
    ]
    assert summary["gaps"] == [{"from_phy_offset": 3 * SIZE, "to_phy_offset": 4 * SIZE}]
    assert summary["segments_prepared_empty"] == 1
    assert (summary["records"], summary["kept_records"], summary["system_topic_records"]) == (
        60, 54, 6,
    )  # fmt: skip
    assert summary["segments"] == 7
