"""How the summary describes a commitlog scan (reconcile/figures.py), and when it is no verdict
(reconcile/unread.py), without Spark.

Proves: a scan that stopped early in the last segment written, zeros only after the torn record,
is a "torn tail" (an empty segment the broker prepared after it does not count), the one stop
that is not ``unread``; in an earlier segment damage is "inside the log", as are zeros before the
end of a segment that later ones continue; a stop followed by bytes written in its own segment,
an unreadable segment and a segment that is no commitlog are stops of their own, all unread; a
segment filled exactly or padded with a blank marker is no stop; a missing segment between two
others is reported as a gap of phy_offsets; totals add up the segments' counts (rollback records
too). ``unread_state`` names the first unread stop in one sentence with its exit code (6 for a
segment that is no commitlog before 5 for any other), 7 for a log of no record while the other
inputs name messages (an incremental run only when it read the log from its start), and None for
a log read whole, a torn tail included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.store.codec.scan import ScanEndKind
from reconcile.errors import ExitCode
from reconcile.figures import commitlog_summary
from reconcile.segment_scan import NOT_A_COMMITLOG, UNREADABLE, Segment, SegmentStats
from reconcile.unread import unread_state

SIZE = 1024


def segment(n: int) -> Segment:
    return Segment(Path(f"{n * SIZE:020d}"), n * SIZE, SIZE)


def stats(
    n: int,
    end: str,
    reason: str = "",
    records: int = 10,
    at: int = 500,
    written_after: int | None = None,
) -> SegmentStats:
    return SegmentStats(
        segment=f"{n * SIZE:020d}", file_from_offset=n * SIZE, size_bytes=SIZE,
        records=records, kept_records=records - 1 if records else 0,
        system_topic_records=1 if records else 0, rollback_records=1 if records else 0,
        end_kind=end, end_phy_offset=n * SIZE + at, scanned_bytes=at, end_reason=reason,
        written_after_phy_offset=None if written_after is None else n * SIZE + written_after,
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

    assert [(s["segment"], s["where"], s["reason"], s["unread"]) for s in summary["stops"]] == [
        (f"{SIZE:020d}", inside, "record CRC mismatch", True),
        (f"{2 * SIZE:020d}", "unreadable segment", "No such file or directory", True),
        (f"{4 * SIZE:020d}", inside, "zeros before the segment's end, records after them", True),
        (f"{6 * SIZE:020d}", "torn tail", "undecodable record: torn", False),
    ]
    assert summary["gaps"] == [{"from_phy_offset": 3 * SIZE, "to_phy_offset": 4 * SIZE}]
    assert summary["segments_prepared_empty"] == 1
    assert (summary["records"], summary["kept_records"], summary["system_topic_records"]) == (
        60, 54, 6,
    )  # fmt: skip
    assert summary["rollback_records"] == 6
    assert summary["segments"] == 7


BEFORE = "before bytes written after it in its segment"


def test_a_stop_with_bytes_written_after_it_in_its_segment_is_unread_even_in_the_tail() -> None:
    segments = [segment(n) for n in (0, 1)]
    scanned = [
        stats(0, ScanEndKind.BLANK, at=SIZE - 100),
        stats(1, ScanEndKind.CORRUPT, reason="bad magic code 0x7", written_after=700),
    ]
    [stop] = commitlog_summary(segments, scanned, limit=100)["stops"]
    assert (stop["where"], stop["unread"]) == (BEFORE, True)
    assert stop["written_after_phy_offset"] == SIZE + 700

    zeros_then_data = [stats(0, ScanEndKind.END, written_after=900)]
    [stop] = commitlog_summary(segments[:1], zeros_then_data, limit=100)["stops"]
    assert (stop["where"], stop["reason"]) == (
        BEFORE, "zeros, then bytes written at phy_offset 900",
    )  # fmt: skip


def test_an_unreadable_or_foreign_last_segment_is_no_torn_tail() -> None:
    for kind, where in ((UNREADABLE, "unreadable segment"),
                        (NOT_A_COMMITLOG, "not a commitlog segment")):  # fmt: skip
        [stop] = commitlog_summary([segment(0)], [stats(0, kind, "why", at=0)], 100)["stops"]
        assert (stop["where"], stop["unread"]) == (where, True)


def summary_of(scanned: list[SegmentStats], messages: int, **extra: Any) -> dict[str, Any]:
    log = commitlog_summary([segment(s.file_from_offset // SIZE) for s in scanned], scanned, 100)
    log["sources"] = [{"directory": "/log"}]
    return {"commitlog": log, "totals": {"messages": messages}, **extra}


@pytest.mark.parametrize(
    ("scanned", "messages", "code", "sentence"),
    [
        pytest.param(
            [stats(0, ScanEndKind.CORRUPT, "record CRC mismatch", written_after=600)], 3,
            ExitCode.READ_IN_PART,
            f"the commitlog was read only in part: the scan of segment {0:020d} stopped at "
            "phy_offset 500 (record CRC mismatch), yet bytes are written after it, at "
            "phy_offset 600",
            id="damage-then-data",
        ),
        pytest.param(
            [stats(0, ScanEndKind.CORRUPT, "bad magic code 0x1"), stats(1, ScanEndKind.END)], 3,
            ExitCode.READ_IN_PART,
            f"the commitlog was read only in part: the scan of segment {0:020d} stopped at "
            "phy_offset 500 (bad magic code 0x1), yet later segments hold more of the log",
            id="damage-then-segments",
        ),
        pytest.param(
            [stats(0, UNREADABLE, "Permission denied", at=0)], 0, ExitCode.READ_IN_PART,
            f"the commitlog was read only in part: segment {0:020d} could not be read "
            "(Permission denied)",
            id="unreadable",
        ),
        pytest.param(
            [stats(0, ScanEndKind.CORRUPT, "record CRC mismatch", written_after=600),
             stats(1, NOT_A_COMMITLOG, "its first bytes are no record", records=0, at=0)], 3,
            ExitCode.NOT_A_COMMITLOG,
            f"the commitlog could not be read: segment {SIZE:020d} is not a commitlog segment: "
            "its first bytes are no record (1 more stop in summary.json)",
            id="foreign-first",
        ),
        pytest.param(
            [stats(0, ScanEndKind.END, records=0, at=0)], 2, ExitCode.NO_RECORDS,
            "no record was read from the commitlog (1 segment file, 1,024 bytes), yet the "
            "ledgers and the outbox name 2 messages",
            id="no-records",
        ),
    ],
)  # fmt: skip
def test_a_log_not_read_whole_is_no_verdict_with_its_code_and_one_sentence(
    scanned: list[SegmentStats], messages: int, code: ExitCode, sentence: str
) -> None:
    state = unread_state(summary_of(scanned, messages))

    assert state == {"kind": code.name, "exit_code": int(code), "sentence": sentence}


def test_a_log_read_whole_is_a_verdict() -> None:
    torn_tail = [stats(0, ScanEndKind.BLANK, at=SIZE - 8), stats(1, ScanEndKind.CORRUPT, "torn")]
    empty = [stats(0, ScanEndKind.END, records=0, at=0)]
    later_run = {"incremental": {"run": 2, "started_over": False}}

    assert unread_state(summary_of(torn_tail, 5)) is None
    assert unread_state(summary_of(empty, 0)) is None  # nothing anywhere: nothing to prove
    assert unread_state(summary_of(empty, 4, **later_run)) is None  # nothing new this run
    first_run = {"incremental": {"run": 1, "started_over": False}}
    assert unread_state(summary_of(empty, 4, **first_run)) is not None
