"""ConsumeQueue, on real segment files.

Proves: entry n is the 20 big-endian bytes at logical byte n*20 of segments named by byte offset;
entries round-trip across segments and survive reopen + recover (also with a torn tail, an empty
trailing segment, and zero runs that straddle entries); re-dispatch overwrites identical bytes; a
queue may start above 0; a put beyond the max fills the gap with blank entries that readers skip
and recovery keeps; truncation, expiry and min-offset correction keep min <= max, on disk too;
the lookup by store time; names that would not be safe directories are refused.
"""

from __future__ import annotations

import logging
import struct
import tracemalloc
from pathlib import Path

import pytest

from broker.store.consume_queue import (
    BLANK_SIZE,
    ConsumeQueue,
    CqEntry,
)
from broker.store.errors import MessageIllegalError
from tests.broker.store.consume_queue_helpers import (
    PER_FILE,
    SEGMENT_BYTES,
    SIZE,
    TOPIC,
    open_queue,
    put,
    raw_entry,
    reopen,
    segment_names,
)


# -- layout ---------------------------------------------------------------------------------------
def test_entry_n_is_the_20_bytes_at_logical_byte_n_times_20(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(11))
    cq.flush()
    assert cq.store_dir == tmp_path / TOPIC / "0"
    assert segment_names(cq) == [f"{0:020d}", f"{160:020d}"]
    for i in range(11):
        assert raw_entry(cq, i) == (SIZE * i, SIZE, -i)  # tag_code is signed
    assert raw_entry(cq, 11) == (0, 0, 0)  # unwritten space is zero
    cq.close()


def test_round_trip_across_several_segments(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(30))
    assert segment_names(cq) == [f"{n * SEGMENT_BYTES:020d}" for n in range(4)]
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (0, 30)
    assert cq.max_physic_offset == SIZE * 29 + SIZE
    assert [cq.get(i) for i in range(30)] == [(SIZE * i, SIZE, -i) for i in range(30)]
    assert cq.get(30) is None
    assert cq.get(-1) is None
    page = cq.iter_entries(6, 5)  # crosses the first segment boundary
    assert page == [CqEntry(i, SIZE * i, SIZE, -i) for i in range(6, 11)]
    assert [e.queue_offset for e in cq.iter_entries(27, 10)] == [27, 28, 29]  # stops at the max
    assert cq.iter_entries(30, 10) == []
    assert cq.iter_entries(0, 0) == []
    cq.close()


def test_a_short_read_of_a_long_queue_reads_only_what_it_returns(tmp_path: Path) -> None:
    """A receive reads 64 entries at a time: compiled by mypyc, an islice over a generator
    expression read the queue to its end on every call. Measured in memory, not time: the
    objects a read makes at its peak, for a queue 300 times longer than the read."""
    cq = ConsumeQueue(TOPIC, 0, tmp_path, 4_096)
    cq.load()
    cq.recover()
    put(cq, range(20_000))
    tracing_already = tracemalloc.is_tracing()  # python -X tracemalloc
    for start in (0, 10_000):
        tracemalloc.start()
        try:
            held_before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            page = cq.iter_entries(start, 64)
            first = cq._first_real(range(start, cq.max_offset_in_queue))
            peak = tracemalloc.get_traced_memory()[1] - held_before
        finally:
            if not tracing_already:
                tracemalloc.stop()
        assert [e.queue_offset for e in page] == list(range(start, start + 64))
        assert first is not None
        assert first.queue_offset == start
        # 64 entries are a few KiB; the whole queue would be ~2 MiB of tuples.
        assert peak < 256 * 1024, f"a read of 64 entries peaked at {peak:,} bytes"
    cq.close()


# -- recovery -------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [0, 1, 8, 13, 16])
def test_reopen_and_recover_restore_every_offset(tmp_path: Path, count: int) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(count))
    cq = reopen(cq, tmp_path)
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (0, count)
    assert cq.max_physic_offset == (SIZE * count if count else -1)
    assert [e.queue_offset for e in cq.iter_entries(0, 100)] == list(range(count))
    put(cq, [count])  # appends continue where the data ended
    assert cq.get(count) == (SIZE * count, SIZE, -count)
    cq.close()


def test_recover_drops_an_empty_trailing_segment(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(8))
    cq.close()
    (cq.store_dir / f"{SEGMENT_BYTES:020d}").write_bytes(bytes(SEGMENT_BYTES))
    cq = open_queue(tmp_path)
    assert cq.max_offset_in_queue == 8
    assert segment_names(cq) == [f"{0:020d}"]
    put(cq, [8])  # the next segment is created again, at the right name
    assert segment_names(cq) == [f"{0:020d}", f"{SEGMENT_BYTES:020d}"]
    cq.close()


def test_recover_drops_a_torn_tail_of_invalid_entries(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(5))
    cq.close()
    path = cq.store_dir / f"{0:020d}"
    data = bytearray(path.read_bytes())
    struct.pack_into(">qiq", data, 5 * 20, -1, 7, 0)  # negative phy_offset: not an entry
    path.write_bytes(bytes(data))
    cq = open_queue(tmp_path)
    assert cq.max_offset_in_queue == 5
    assert cq.max_physic_offset == 500
    cq.close()


def test_recover_is_not_fooled_by_zero_runs_that_straddle_entries(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    # phy_offset 0, a size ending in three zero bytes, tag 0, then phy_offset 0 and a size with
    # three leading zero bytes: 22 zero bytes in a row, none of them a whole entry.
    cq.put_message_position_info(0, 0x0100_0000, 0, 0)
    cq.put_message_position_info(0, 1, 0, 1)
    cq = reopen(cq, tmp_path)
    assert cq.max_offset_in_queue == 2
    assert cq.get(1) == (0, 1, 0)
    cq.close()


# -- re-dispatch, queues starting above 0, gaps ---------------------------------------------------
def test_redispatch_overwrites_identical_bytes(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(12))
    cq.flush()
    before = [p.read_bytes() for p in sorted(cq.store_dir.iterdir())]
    put(cq, range(3, 12))  # the dispatcher replays after a crash
    cq.flush()
    assert [p.read_bytes() for p in sorted(cq.store_dir.iterdir())] == before
    assert cq.max_offset_in_queue == 12
    assert cq.max_physic_offset == 1200
    cq.close()


def test_queue_starting_above_zero(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, [13, 14])
    # The first segment is the one whose byte range holds entry 13; slots 8..12 are blank.
    assert segment_names(cq) == [f"{SEGMENT_BYTES:020d}"]
    assert raw_entry(cq, 12) == (0, BLANK_SIZE, 0)
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (13, 15)
    assert cq.get(12) is None
    assert [e.queue_offset for e in cq.iter_entries(0, 10)] == [13, 14]
    cq = reopen(cq, tmp_path)
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (13, 15)
    assert cq.max_physic_offset == 1500
    cq.close()


def test_queue_starting_on_a_segment_boundary_has_no_blanks(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, [16])
    assert segment_names(cq) == [f"{2 * SEGMENT_BYTES:020d}"]
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (16, 17)
    cq.close()


def test_gap_is_filled_with_blank_entries_that_readers_skip(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(5))
    with caplog.at_level(logging.WARNING, logger="broker.store.consume_queue"):
        put(cq, [20])  # 5..19 never came: the gap crosses two segment boundaries
    assert "gap 5..20" in caplog.text
    assert [raw_entry(cq, i) for i in (5, 12, 19)] == [(0, BLANK_SIZE, 0)] * 3
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (0, 21)
    assert all(cq.get(i) is None for i in range(5, 20))
    assert [e.queue_offset for e in cq.iter_entries(3, 4)] == [3, 4, 20]
    assert [e.queue_offset for e in cq.iter_entries(6, 4)] == [20]
    assert cq.max_physic_offset == 2100
    # Blanks are data to recovery: the entry after the gap survives a reopen.
    cq = reopen(cq, tmp_path)
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (0, 21)
    assert cq.get(20) == (2000, SIZE, -20)
    # A late re-dispatch into the gap just fills the slot.
    put(cq, [7])
    assert cq.get(7) == (700, SIZE, -7)
    cq.close()


def test_put_below_the_min_offset_is_skipped(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(20))
    cq.delete_expired_file(min_commit_log_offset=1000)
    assert cq.min_offset_in_queue == 10
    put(cq, [9])  # a replayed record retention already expired
    assert cq.get(9) is None
    assert cq.min_offset_in_queue == 10
    cq.close()


def test_names_that_are_not_safe_directories_are_refused(tmp_path: Path) -> None:
    for topic in ["..", "a/b", "", "x" * 128, "topic name"]:
        with pytest.raises(MessageIllegalError):
            ConsumeQueue(topic, 0, tmp_path, PER_FILE)
    with pytest.raises(MessageIllegalError):
        ConsumeQueue(TOPIC, -1, tmp_path, PER_FILE)
    ConsumeQueue("%RETRY%group_a|b-1", 3, tmp_path, PER_FILE).close()


# -- truncation ----------------------------------------------------------------------------------
def test_truncate_inside_a_segment(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(7))
    assert cq.truncate_dirty_logic_files(450) == 2  # entries 5 (phy 500) and 6 go; 4 stays
    assert (cq.max_offset_in_queue, cq.max_physic_offset) == (5, 500)
    assert raw_entry(cq, 5) == (0, 0, 0)  # zeroed, so recovery ends there
    assert cq.truncate_dirty_logic_files(450) == 0
    cq = reopen(cq, tmp_path)
    assert (cq.max_offset_in_queue, cq.max_physic_offset) == (5, 500)
    put(cq, [5])
    assert cq.get(5) == (500, SIZE, -5)
    cq.close()


@pytest.mark.parametrize(("phy_offset", "kept", "segments"), [(1000, 10, 2), (1600, 16, 2)])
def test_truncate_across_segments(
    tmp_path: Path, phy_offset: int, kept: int, segments: int
) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(30))
    assert cq.truncate_dirty_logic_files(phy_offset) == 30 - kept
    assert cq.max_offset_in_queue == kept
    assert len(segment_names(cq)) == segments  # emptied segments are deleted
    cq = reopen(cq, tmp_path)
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (0, kept)
    cq.close()


def test_truncate_removes_the_blanks_left_trailing(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, [*range(5), 12])
    assert cq.truncate_dirty_logic_files(1200) == 8  # entry 12 and the blanks 5..11
    assert (cq.max_offset_in_queue, cq.max_physic_offset) == (5, 500)
    cq.close()


def test_truncating_everything_keeps_a_queue_above_zero_consistent(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(13, 20))
    assert cq.truncate_dirty_logic_files(0) == 7
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (13, 13)
    assert cq.max_physic_offset == -1
    assert segment_names(cq) == [f"{SEGMENT_BYTES:020d}"]
    cq = reopen(cq, tmp_path)
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (13, 13)
    put(cq, [13])  # the dispatcher rebuilds from the same queue offset
    assert cq.get(13) == (1300, SIZE, -13)
    cq.close()


# -- expiry ---------------------------------------------------------------------------------------
def test_delete_expired_file_and_correct_min_offset(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(30))
    deleted = cq.delete_expired_file(min_commit_log_offset=1750)
    # Segments 0..7 and 8..15 point below 1750 only; 16..23 holds entry 18 (phy 1800).
    assert [p.name for p in deleted] == [f"{0:020d}", f"{SEGMENT_BYTES:020d}"]
    assert not any(p.exists() for p in deleted)
    assert cq.min_offset_in_queue == 18
    assert cq.get(17) is None
    assert cq.get(18) == (1800, SIZE, -18)
    assert cq.iter_entries(0, 1) == [CqEntry(18, 1800, SIZE, -18)]
    assert cq.delete_expired_file(min_commit_log_offset=1750) == []
    cq.close()


def test_delete_expired_file_never_deletes_the_last_segment(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(30))
    assert len(cq.delete_expired_file(min_commit_log_offset=10**9)) == 3
    assert segment_names(cq) == [f"{3 * SEGMENT_BYTES:020d}"]
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (30, 30)
    assert cq.max_physic_offset == 3000  # the last entry is still on disk
    assert cq.get(29) is None
    put(cq, [30])
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (30, 31)
    cq.close()


def test_min_offset_after_reopen_is_corrected_by_the_store(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(12))
    cq.correct_min_offset(500)
    assert cq.min_offset_in_queue == 5
    cq.correct_min_offset(200)  # never moves back
    assert cq.min_offset_in_queue == 5
    cq = reopen(cq, tmp_path)
    assert cq.min_offset_in_queue == 0  # the expired entries are still on disk
    cq.correct_min_offset(500)
    assert cq.min_offset_in_queue == 5
    cq.close()


# -- lookup by time -------------------------------------------------------------------------------
STORE_MS = [1000, 1000, 1010, 1020, 1020, 1020, 1030, 1040, 1040, 1050, 1060, 1070]


def test_offset_by_time_before_within_and_after(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, range(len(STORE_MS)))
    stored_ms = {SIZE * i: ms for i, ms in enumerate(STORE_MS)}

    def store_timestamp_of(phy_offset: int, size: int) -> int | None:
        assert size == SIZE
        return stored_ms.get(phy_offset)

    by_time = cq.get_offset_in_queue_by_time
    assert by_time(0, store_timestamp_of) == 0
    assert by_time(1000, store_timestamp_of) == 0
    assert by_time(1001, store_timestamp_of) == 2
    assert by_time(1020, store_timestamp_of) == 3  # the first of equal times
    assert by_time(1025, store_timestamp_of) == 6
    assert by_time(1070, store_timestamp_of) == 11
    assert by_time(1071, store_timestamp_of) == 12  # after everything: the max offset
    del stored_ms[0], stored_ms[100], stored_ms[200]  # records the commitlog no longer holds
    assert by_time(0, store_timestamp_of) == 3
    cq.close()


def test_offset_by_time_skips_blank_entries(tmp_path: Path) -> None:
    cq = open_queue(tmp_path)
    put(cq, [0, 1, 9, 10, 11])
    stored_ms = {0: 10, 100: 20, 900: 30, 1000: 40, 1100: 50}
    for timestamp_ms, expected in [(5, 0), (20, 1), (21, 9), (30, 9), (45, 11), (51, 12)]:
        assert cq.get_offset_in_queue_by_time(timestamp_ms, lambda p, _s: stored_ms[p]) == expected
    cq.close()
    empty = open_queue(tmp_path, queue_id=1)
    assert empty.get_offset_in_queue_by_time(5, lambda p, _s: None) == 0
    empty.close()
