"""One on-disk hash index file (IndexFile), on real files.

Proves: keys map back to the phy offsets they were indexed with, newest first, and only matching
keys come back when their hashes share a slot; ``max_num`` and time ranges bound the answer (with
whole-second slack); a full file refuses the next key; torn slots and chain links are read as
empty instead of crashing; a reopened file keeps its entries and chains.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.store.index_file import (
    IndexFile,
    key_hash,
)
from tests.broker.store.index_helpers import (
    ALL_TIME,
    T0_MS,
    entry_pos,
    slot_pos,
    write_int,
)


# -- one file ------------------------------------------------------------------------------------
def test_file_has_the_documented_size_and_header(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=8, index_num=10)
    assert f.path.stat().st_size == 40 + 8 * 4 + 10 * 20
    assert f.header().index_count == 1  # entry 0 stays unused
    assert f.put_key("a", 100, T0_MS)
    assert f.put_key("b", 200, T0_MS + 2500)
    h = f.header()
    assert (h.begin_timestamp_ms, h.end_timestamp_ms) == (T0_MS, T0_MS + 2500)
    assert (h.begin_phy_offset, h.end_phy_offset) == (100, 200)
    assert h.index_count == 3
    assert h.hash_slot_count == (1 if key_hash("a") % 8 == key_hash("b") % 8 else 2)
    f.close()


def test_put_then_select_round_trip(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=8, index_num=10)
    assert f.put_key("order-1", 4096, T0_MS)
    assert f.select_phy_offset("order-1", 10, *ALL_TIME) == [4096]
    assert f.select_phy_offset("order-2", 10, *ALL_TIME) == []
    f.close()


def test_colliding_keys_return_only_their_own_offsets_newest_first(tmp_path: Path) -> None:
    # One slot: every key shares one chain.
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=1, index_num=10)
    for phy_offset, key in enumerate(["a", "b", "a", "c", "a"]):
        assert f.put_key(key, phy_offset, T0_MS)
    assert f.select_phy_offset("a", 10, *ALL_TIME) == [4, 2, 0]
    assert f.select_phy_offset("b", 10, *ALL_TIME) == [1]
    assert f.header().hash_slot_count == 1
    f.close()


def test_colliding_keys_in_a_small_table(tmp_path: Path) -> None:
    keys = [f"k{i}" for i in range(40)]
    target = keys[0]
    rivals = [k for k in keys[1:] if key_hash(k) % 4 == key_hash(target) % 4]
    assert rivals, "40 keys over 4 slots must collide"
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=4, index_num=100)
    f.put_key(target, 10, T0_MS)
    for i, rival in enumerate(rivals):
        f.put_key(rival, 20 + i, T0_MS)
    f.put_key(target, 99, T0_MS)
    assert f.select_phy_offset(target, 10, *ALL_TIME) == [99, 10]
    f.close()


def test_select_stops_at_max_num_keeping_the_newest(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=4, index_num=20)
    for phy_offset in range(10):
        f.put_key("k", phy_offset, T0_MS)
    assert f.select_phy_offset("k", 3, *ALL_TIME) == [9, 8, 7]
    assert f.select_phy_offset("k", 0, *ALL_TIME) == []
    f.close()


def test_a_full_file_refuses_the_next_key(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=4, index_num=3)
    assert f.put_key("a", 1, T0_MS)
    assert f.put_key("b", 2, T0_MS)
    assert not f.put_key("c", 3, T0_MS)
    assert f.select_phy_offset("c", 10, *ALL_TIME) == []
    f.close()


def test_time_range_selects_entries_by_store_time(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=4, index_num=10)
    for phy_offset, at_ms in [(1, T0_MS), (2, T0_MS + 5000), (3, T0_MS + 10_000)]:
        f.put_key("k", phy_offset, at_ms)
    assert f.select_phy_offset("k", 10, T0_MS + 4000, T0_MS + 6000) == [2]
    assert f.select_phy_offset("k", 10, T0_MS + 11_001, T0_MS + 20_000) == []
    f.close()


def test_time_range_has_one_second_slack_for_whole_second_storage(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=4, index_num=10)
    f.put_key("first", 1, T0_MS)
    f.put_key("k", 2, T0_MS + 5999)  # stored as 5 whole seconds after the first entry: T0 + 5000
    assert f.select_phy_offset("k", 10, T0_MS + 5999, T0_MS + 5999) == [2]  # its exact time
    assert f.select_phy_offset("k", 10, T0_MS + 6001, T0_MS + 9000) == []
    assert f.select_phy_offset("k", 10, T0_MS, T0_MS + 4999) == []
    f.close()


def test_store_time_before_the_file_began_is_clamped_to_its_beginning(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", hash_slot_num=4, index_num=10)
    f.put_key("first", 1, T0_MS)
    f.put_key("k", 2, T0_MS - 60_000)  # the clock stepped back
    assert f.select_phy_offset("k", 10, T0_MS, T0_MS) == [2]
    assert f.header().end_timestamp_ms == T0_MS  # the range never shrinks
    f.close()


def test_a_slot_pointing_past_index_count_reads_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    f = IndexFile(path, hash_slot_num=4, index_num=10)
    f.put_key("k", 1, T0_MS)
    f.close()
    write_int(path, slot_pos("k", 4), 7)  # torn write: the slot reached disk, the entry did not
    f = IndexFile(path, hash_slot_num=4, index_num=10)
    assert f.select_phy_offset("k", 10, *ALL_TIME) == []
    assert f.put_key("k", 2, T0_MS)  # the torn slot is overwritten, its chain starts afresh
    assert f.select_phy_offset("k", 10, *ALL_TIME) == [2]
    f.close()


@pytest.mark.parametrize("bad_slot_value", [-5, 0, 2, 10_000])
def test_out_of_range_slot_values_never_crash(tmp_path: Path, bad_slot_value: int) -> None:
    path = tmp_path / "20240101000000000"
    f = IndexFile(path, hash_slot_num=4, index_num=10)
    f.put_key("k", 1, T0_MS)
    f.close()
    write_int(path, slot_pos("k", 4), bad_slot_value)
    f = IndexFile(path, hash_slot_num=4, index_num=10)
    assert f.select_phy_offset("k", 10, *ALL_TIME) == []
    f.close()


def test_a_chain_link_that_does_not_go_backwards_ends_the_walk(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    f = IndexFile(path, hash_slot_num=1, index_num=10)
    f.put_key("k", 1, T0_MS)
    f.put_key("k", 2, T0_MS)
    f.close()
    # Entry 1 links to entry 2, which links to entry 1: a cycle left by garbage.
    write_int(path, entry_pos(1, 1) + 16, 2)
    f = IndexFile(path, hash_slot_num=1, index_num=10)
    assert f.select_phy_offset("k", 10, *ALL_TIME) == [2, 1]
    f.close()


def test_a_file_reopened_keeps_its_entries_and_chains(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    f = IndexFile(path, hash_slot_num=1, index_num=10)
    f.put_key("k", 1, T0_MS)
    f.flush()
    f.close()
    f = IndexFile(path, hash_slot_num=1, index_num=10)
    assert f.put_key("k", 2, T0_MS + 1000)
    assert f.select_phy_offset("k", 10, *ALL_TIME) == [2, 1]
    assert f.header().index_count == 3
    f.close()
