"""A segment scanned in parts (reconcile/commitlog_source.py) reads what one scan of it reads.

Proves, on segments of records of varied sizes written as the broker writes them:
- cut into parts of every size from a few bytes to the whole segment, so that cuts fall exactly
  on record starts, inside records and inside the blank marker, the parts together return every
  record once, in log order, and their stats merged are the single scan's, field for field;
- a torn last record (the torn tail) ends the part it is in, and later parts read nothing;
- a damaged record whose size is intact ends the part it is in, and a later part that read past
  it is reported, so the segment is scanned again whole; the merged stats stop at the damage;
- ``skip_chain`` finds the first record boundary at or past any position, on a log of one size
  and of varied sizes, and stops where the chain ends;
- a part begins at the first record past its cut that claims its own place (found without
  walking the chain), and where that is a record forged inside another's body, the part before
  did not end there: the segment is scanned again whole;
- the Spark engine with parts of a few KiB (many parts a segment, a torn tail, damage that a
  later part reads past, a forged record at a cut) finds what the in-process engine finds.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker.store.codec.layout import POSITION_BODY_LENGTH_V4
from broker.store.codec.scan import ScanEndKind
from broker.store.codec.scan_columns import skip_chain
from reconcile import commitlog_source
from reconcile.commitlog_source import merge_parts, parts, scan_part
from reconcile.config import ENGINE_IN_PROCESS, ENGINE_SPARK, JobConfig
from reconcile.job import run
from reconcile.segment_scan import Segment, SegmentStats, scan_segment
from tests.reconcile.test_engines import what_was_found
from tests.reconcile.test_record_scan import BASE, record
from tests.reconcile.testdata import CommitLogWriter

SEGMENT_BYTES = 16 * 1024
T0 = 1_767_225_600_000
# A cut in the middle of a record's body flips this byte: its size stays intact.
_BODY_DAMAGE_AT = 100


def write_log(directory: Path, count: int, torn: bool = False, size: int = 0) -> list[int]:
    """Records of varied sizes (one of one size when ``size``); returns their phy_offsets.
    More than a segment's worth: the first segment ends in a blank marker."""
    offsets = []
    with CommitLogWriter(directory, SEGMENT_BYTES) as w:
        for i in range(count):
            body = b"x" * (size or 10 + (i * 37) % 300)
            offsets.append(w.append("Orders", f"M-{i:05d}", T0 + i, body, queue_id=i % 3))
        if torn:
            w.append_torn("Orders", "M-TORN", T0 + count, 60)
    return offsets


def first_segment(directory: Path) -> Segment:
    path = sorted(directory.iterdir())[0]
    return Segment(path, int(path.name), path.stat().st_size)


def scan_whole(segment: Segment) -> tuple[list[int], SegmentStats]:
    found = SegmentStats(segment.path.name, segment.file_from_offset)
    batches = list(scan_segment(segment.path, found, 16))
    return [o for b in batches for o in b.column("phy_offset").to_pylist()], found


def scan_in_parts(segment: Segment, part_bytes: int) -> tuple[list[int], SegmentStats, bool]:
    offsets: list[int] = []
    found_parts = []
    for start, end in parts(segment, part_bytes):
        found = SegmentStats(segment.path.name, segment.file_from_offset)
        for batch in scan_part(segment.path, found, 16, start, end):
            offsets += batch.column("phy_offset").to_pylist()
        found_parts.append(found)
    merged, read_past = merge_parts(found_parts)
    return offsets, merged, read_past


def part_sizes(segment_bytes: int) -> list[int]:
    return sorted({*range(1, 64), *range(64, segment_bytes + 1, 97), segment_bytes})


def test_parts_of_every_size_read_every_record_once(tmp_path: Path) -> None:
    offsets = write_log(tmp_path, 120)
    segment = first_segment(tmp_path)
    expected, whole = scan_whole(segment)
    assert whole.end_kind == ScanEndKind.BLANK
    assert expected == [o for o in offsets if o < SEGMENT_BYTES]
    starts = {o - segment.file_from_offset for o in expected}

    cut_on_a_start = cut_inside = 0
    for part_bytes in part_sizes(segment.size_bytes):
        got, merged, read_past = scan_in_parts(segment, part_bytes)

        assert got == expected, part_bytes
        assert asdict(merged) == asdict(whole), part_bytes
        assert not read_past
        cuts = range(part_bytes, segment.size_bytes, part_bytes)
        cut_on_a_start += sum(1 for c in cuts if c in starts)
        cut_inside += sum(1 for c in cuts if c not in starts)
    # The sizes tried did cut exactly at record starts, and elsewhere.
    assert cut_on_a_start > 50
    assert cut_inside > 1000


def test_a_torn_tail_ends_its_part_and_later_parts_read_nothing(tmp_path: Path) -> None:
    write_log(tmp_path, 30, torn=True)
    segment = first_segment(tmp_path)
    expected, whole = scan_whole(segment)
    assert whole.end_kind == ScanEndKind.CORRUPT

    for part_bytes in (64, 500, 1024, 3000):
        got, merged, read_past = scan_in_parts(segment, part_bytes)

        assert got == expected
        assert asdict(merged) == asdict(whole)
        assert not read_past


def test_damage_a_later_part_read_past_is_reported_for_a_whole_scan(tmp_path: Path) -> None:
    offsets = write_log(tmp_path, 30)
    segment = first_segment(tmp_path)
    victim = offsets[10]
    data = bytearray(segment.path.read_bytes())
    data[victim + _BODY_DAMAGE_AT] ^= 0x5A  # a body byte: the record's CRC fails, its size holds
    segment.path.write_bytes(bytes(data))
    expected, whole = scan_whole(segment)
    assert (whole.end_kind, whole.end_phy_offset) == (ScanEndKind.CORRUPT, victim)

    got, merged, read_past = scan_in_parts(segment, 1024)

    assert read_past
    assert asdict(merged) == asdict(whole)
    # Read past the damage: records a whole scan never returns, which the job scans away.
    assert set(expected) < set(got)


@pytest.mark.parametrize("size", [0, 200])
def test_skip_chain_finds_the_first_boundary_at_or_past_any_position(
    tmp_path: Path, size: int
) -> None:
    offsets = write_log(tmp_path, 60, size=size)
    segment = first_segment(tmp_path)
    starts = [o for o in offsets if o < SEGMENT_BYTES]
    buf = segment.path.read_bytes()
    # Past the last record: its end, where the blank marker (or the segment's end) is.
    whole_end = scan_whole(segment)[1].end_phy_offset

    for target in range(0, segment.size_bytes, 7):
        want = next((s for s in starts if s >= target), whole_end)
        assert skip_chain(buf, len(buf), 0, target) == want, target


def test_skip_chain_stops_where_the_chain_ends(tmp_path: Path) -> None:
    write_log(tmp_path, 10, torn=True)
    segment = first_segment(tmp_path)
    buf = segment.path.read_bytes()
    _, whole = scan_whole(segment)

    # The torn record's size is intact: the chain runs past it, to the zeros after it.
    beyond = skip_chain(buf, len(buf), 0, len(buf))
    assert beyond > whole.end_phy_offset
    assert not any(buf[beyond : beyond + 8])
    for target in range(beyond, len(buf), 1000):
        assert skip_chain(buf, len(buf), 0, target) == beyond


def both_engines(
    spark: SparkSession,
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    part_bytes: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The summaries of the in-process engine and of the Spark engine scanning in parts of
    ``part_bytes``, over ``store`` and an empty outbox."""
    outbox = tmp_path / "outbox.jsonl"
    outbox.write_text("")
    monkeypatch.setattr(commitlog_source, "SCAN_PART_BYTES_MAX", part_bytes)
    # Split even though the segments alone would keep the cores busy.
    monkeypatch.setattr(commitlog_source, "SCAN_TASKS_PER_CORE", 1000)

    def config(engine: str) -> JobConfig:
        return JobConfig(
            commitlogs=(store,), outbox=outbox, out_dir=tmp_path / engine, engine=engine
        )

    return run(config(ENGINE_IN_PROCESS)), run(config(ENGINE_SPARK), spark)


@pytest.mark.slow
def test_spark_scans_in_small_parts_and_finds_what_the_in_process_engine_finds(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store" / "commitlog"
    offsets = write_log(store, 200, torn=True)
    # Damage in the second segment, its size intact: a later part reads past it.
    second = sorted(store.iterdir())[1]
    data = bytearray(second.read_bytes())
    victim = next(o for o in offsets if o > int(second.name) + 3000) - int(second.name)
    data[victim + _BODY_DAMAGE_AT] ^= 0x5A
    second.write_bytes(bytes(data))
    local, with_spark = both_engines(spark, store, tmp_path, monkeypatch, 1500)

    assert what_was_found(with_spark) == what_was_found(local)
    stops = with_spark["commitlog"]["stops"]
    assert [s["kind"] for s in stops] == [ScanEndKind.CORRUPT, ScanEndKind.CORRUPT]
    assert with_spark["totals"]["messages"] < 200


def forged_log(directory: Path) -> tuple[Segment, int, int]:
    """A segment whose second record's body holds a valid record (its CRC right) that claims
    its own place, as a producer that learned where its message would be stored could write.
    Returns the segment, where the host record starts and where the forged one does."""
    host_at = len(record(0, 0, message_id="M-0"))
    forged_at = host_at + POSITION_BODY_LENGTH_V4 + 4  # the host record's body starts there
    forged = record(forged_at, 99, message_id="FORGED")
    log = record(0, 0, message_id="M-0")
    log += record(host_at, 1, message_id="M-1", body=forged + b"y" * 40)
    assert log.index(forged) == forged_at
    for i in range(2, 12):
        log += record(len(log), i, message_id=f"M-{i}")
    directory.mkdir(parents=True)
    path = directory / f"{BASE:020d}"
    path.write_bytes(log + bytes(4096))
    return Segment(path, BASE, path.stat().st_size), host_at, forged_at


def test_a_part_begun_at_a_record_forged_inside_a_body_is_caught_by_the_part_before(
    tmp_path: Path,
) -> None:
    segment, host_at, forged_at = forged_log(tmp_path / "commitlog")
    expected, whole = scan_whole(segment)
    assert BASE + forged_at not in expected
    # Cut just past the host record's start: the forged record is the first that claims its
    # place past the cut, and the size chain's next boundary lies past the host record.
    got, _, read_past = scan_in_parts(segment, host_at + 1)

    assert BASE + forged_at in got  # the part after the cut began at the forged record
    assert read_past  # and did not begin where the part before ended: scanned again whole
    for part_bytes in (host_at, forged_at + 1, 2 * host_at):  # cuts the forgery cannot fool
        got, merged, read_past = scan_in_parts(segment, part_bytes)
        assert (got, asdict(merged), read_past) == (expected, asdict(whole), False), part_bytes


@pytest.mark.slow
def test_spark_scans_a_log_with_a_forged_record_whole_and_finds_what_in_process_finds(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store" / "commitlog"
    _, host_at, _ = forged_log(store)

    local, with_spark = both_engines(spark, store, tmp_path, monkeypatch, host_at + 1)

    assert what_was_found(with_spark) == what_was_found(local)
    assert with_spark["totals"]["messages"] == 12  # FORGED is no message of the log
