"""The on-disk hash index (IndexFile, IndexService), on real files.

Proves: keys map back to the phy offsets they were indexed with, newest first, and only matching
keys come back when their hashes share a slot; ``max_num`` and time ranges bound the answer (with
whole-second slack, and whole files skipped by their header range); a full file rolls to a new one
and queries span both; re-dispatched records are not indexed twice; a clean reopen keeps
everything, an unclean one deletes the files that may hold entries that are not durable and says
where to re-dispatch from; torn slots and chain links are read as empty instead of crashing; the
newest file is never deleted as expired; a file closed under a reader reads as empty.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker.store.errors import StoreConfigError
from broker.store.index_file import (
    FILE_NAME_DIGITS,
    HASH_SLOT_BYTES,
    HEADER_BYTES,
    INDEX_ENTRY_BYTES,
    IndexFile,
    key_hash,
)
from broker.store.index_service import IndexService

T0_MS = 1_700_000_000_000
ALL_TIME = (0, 2**62)


def open_service(root: Path, hash_slot_num: int = 4, index_num: int = 3) -> IndexService:
    """A service over ``root/index``; index_num=3 means two entries a file (entry 0 is unused)."""
    service = IndexService(root / "index", hash_slot_num, index_num)
    assert service.load(clean_shutdown=True, index_checkpoint_phy_offset=0) is None
    return service


def index_ids(service: IndexService, phy_offsets: list[int]) -> None:
    """Index one record per offset, with message id ``id-<offset>`` and no business keys."""
    for phy_offset in phy_offsets:
        service.build_index("T", [], f"id-{phy_offset}", phy_offset, T0_MS + phy_offset)


def write_int(path: Path, pos: int, value: int) -> None:
    with path.open("r+b") as fh:
        fh.seek(pos)
        fh.write(struct.pack(">i", value))


def slot_pos(key: str, hash_slot_num: int) -> int:
    return HEADER_BYTES + (key_hash(key) % hash_slot_num) * HASH_SLOT_BYTES


def entry_pos(index: int, hash_slot_num: int) -> int:
    return HEADER_BYTES + hash_slot_num * HASH_SLOT_BYTES + index * INDEX_ENTRY_BYTES


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


# -- the service ---------------------------------------------------------------------------------
def test_build_index_indexes_the_message_id_bare_and_keys_per_topic(tmp_path: Path) -> None:
    service = open_service(tmp_path, index_num=10)
    service.build_index("Orders", ["o-1", "c-7"], "ID-1", 4096, T0_MS)
    assert service.query_by_uniq_key("ID-1", 10) == [4096]
    assert service.query_by_key("Orders", "o-1", 10, *ALL_TIME) == [4096]
    assert service.query_by_key("Orders", "c-7", 10, *ALL_TIME) == [4096]
    assert service.query_offset("Orders#o-1", 10, *ALL_TIME) == [4096]
    assert service.query_by_key("Payments", "o-1", 10, *ALL_TIME) == []
    assert service.query_by_uniq_key("o-1", 10) == []
    service.close()


def test_build_index_skips_empty_and_repeated_keys(tmp_path: Path) -> None:
    service = open_service(tmp_path, index_num=10)
    service.build_index("T", ["a", "", "a"], None, 10, T0_MS)
    assert service.query_by_key("T", "a", 10, *ALL_TIME) == [10]
    assert service.files[0].header().index_count == 2  # one entry
    service.build_index("T", [], None, 20, T0_MS)  # nothing to index: no entry, no file change
    assert service.max_indexed_phy_offset == 10
    service.close()


def test_nothing_indexed_yet(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    assert service.files == ()
    assert service.max_indexed_phy_offset == -1
    assert service.query_by_uniq_key("x", 10) == []
    service.flush()
    assert service.delete_expired_file(10**12) == []
    service.close()


def test_already_indexed_phy_offsets_are_skipped(tmp_path: Path) -> None:
    service = open_service(tmp_path, index_num=10)
    service.build_index("T", ["k"], "ID-100", 100, T0_MS)
    service.build_index("T", ["k"], "ID-100", 100, T0_MS)  # re-dispatched after recovery
    service.build_index("T", ["k"], "ID-50", 50, T0_MS)  # below what is indexed
    assert service.query_by_key("T", "k", 10, *ALL_TIME) == [100]
    assert service.query_by_uniq_key("ID-50", 10) == []
    assert service.max_indexed_phy_offset == 100
    service.close()


def test_a_full_file_rolls_over_and_queries_span_all_files(tmp_path: Path) -> None:
    service = open_service(tmp_path, index_num=3)
    for phy_offset in range(5):
        service.build_index("T", ["same"], None, phy_offset, T0_MS + phy_offset)
    names = [f.path.name for f in service.files]
    assert len(names) == 3
    assert names == sorted(set(names))  # unique, in creation order, even within one millisecond
    assert all(len(n) == FILE_NAME_DIGITS and n.isdigit() for n in names)
    assert service.query_by_key("T", "same", 10, *ALL_TIME) == [4, 3, 2, 1, 0]
    assert service.query_by_key("T", "same", 3, *ALL_TIME) == [4, 3, 2]
    assert service.max_indexed_phy_offset == 4
    service.close()


def test_a_record_that_does_not_fit_starts_a_new_file(tmp_path: Path) -> None:
    service = open_service(tmp_path, index_num=4)  # three entries a file
    service.build_index("T", ["a"], "ID-1", 1, T0_MS)
    service.build_index("T", ["b"], "ID-2", 2, T0_MS)  # one entry free: both go to a new file
    first, second = service.files
    assert first.header().end_phy_offset == 1
    assert first.header().index_count == 3
    assert second.header().begin_phy_offset == 2
    service.close()


def test_a_record_with_more_keys_than_a_file_holds_spans_files(tmp_path: Path) -> None:
    service = open_service(tmp_path, index_num=3)
    service.build_index("T", ["a", "b", "c"], "ID-1", 7, T0_MS)
    assert len(service.files) == 2
    for key in ["a", "b", "c"]:
        assert service.query_by_key("T", key, 10, *ALL_TIME) == [7]
    assert service.query_by_uniq_key("ID-1", 10) == [7]
    service.close()


def test_query_skips_files_whose_header_range_misses_the_time_range(tmp_path: Path) -> None:
    service = open_service(tmp_path, hash_slot_num=4, index_num=2)  # one entry a file
    service.build_index("T", ["k"], None, 1, T0_MS)
    service.build_index("T", ["k"], None, 2, T0_MS + 100_000)
    old = service.files[0]
    # Make the old entry claim to be 100 s later; only the header's range can exclude it now.
    write_int(old.path, entry_pos(1, 4) + 12, 100)
    assert old.select_phy_offset("T#k", 10, T0_MS + 100_000, T0_MS + 100_000) == [1]
    assert service.query_by_key("T", "k", 10, T0_MS + 100_000, T0_MS + 100_000) == [2]
    assert service.query_by_key("T", "k", 10, *ALL_TIME) == [2, 1]
    service.close()


def test_a_file_closed_under_a_reader_reads_as_empty(tmp_path: Path) -> None:
    service = open_service(tmp_path, index_num=2)
    index_ids(service, [1, 2])
    service.build_index("T", ["k"], None, 3, T0_MS)
    service.build_index("T", ["k"], None, 4, T0_MS)
    service.flush()
    service.files[2].close()  # as if a cleaner deleted it between snapshot and read
    assert service.query_by_key("T", "k", 10, *ALL_TIME) == [4]
    service.close()


def test_index_survives_close_and_reopen(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    index_ids(service, [10, 20, 30])
    service.close()
    assert service.files == ()
    reopened = open_service(tmp_path)
    assert reopened.query_by_uniq_key("id-20", 10) == [20]
    assert reopened.max_indexed_phy_offset == 30
    index_ids(reopened, [40])
    assert reopened.query_by_uniq_key("id-40", 10) == [40]
    reopened.close()


def test_load_after_a_clean_shutdown_keeps_every_file(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    index_ids(service, [10, 20, 30, 40, 50])
    names = [f.path.name for f in service.files]
    service.close()
    reopened = IndexService(tmp_path / "index", 4, 3)
    assert reopened.load(clean_shutdown=True, index_checkpoint_phy_offset=0) is None
    assert [f.path.name for f in reopened.files] == names
    assert [reopened.query_by_uniq_key(f"id-{p}", 10) for p in [10, 50]] == [[10], [50]]
    reopened.close()


def test_unclean_load_deletes_files_at_or_past_the_checkpoint(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    index_ids(service, [10, 20, 30, 40, 50, 60])  # files end at 20, 40, 60
    paths = [f.path for f in service.files]
    service.close()
    reopened = IndexService(tmp_path / "index", 4, 3)
    assert reopened.load(clean_shutdown=False, index_checkpoint_phy_offset=40) == 30
    assert [f.path for f in reopened.files] == paths[:1]
    assert not paths[1].exists()
    assert not paths[2].exists()
    assert reopened.max_indexed_phy_offset == 20
    # The store re-dispatches from the returned offset; records already indexed are skipped.
    index_ids(reopened, [10, 20, 30, 40, 50, 60])
    assert [reopened.query_by_uniq_key(f"id-{p}", 10) for p in [10, 30, 60]] == [[10], [30], [60]]
    reopened.close()


def test_unclean_load_with_a_checkpoint_past_every_file_keeps_them(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    index_ids(service, [10, 20, 30])
    service.close()
    reopened = IndexService(tmp_path / "index", 4, 3)
    assert reopened.load(clean_shutdown=False, index_checkpoint_phy_offset=31) is None
    assert len(reopened.files) == 2
    reopened.close()


def test_unclean_load_deletes_a_newest_file_with_an_invalid_header(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    index_ids(service, [10, 20, 30])
    paths = [f.path for f in service.files]
    service.close()
    write_int(paths[1], 36, 0)  # index_count 0: its header never reached the disk
    reopened = IndexService(tmp_path / "index", 4, 3)
    # Where that file began is unknown: re-dispatch from the last offset the survivors hold.
    assert reopened.load(clean_shutdown=False, index_checkpoint_phy_offset=100) == 20
    assert [f.path for f in reopened.files] == paths[:1]
    reopened.close()


@pytest.mark.parametrize("clean_shutdown", [True, False])
def test_an_invalid_header_deletes_that_file_and_every_later_one(
    tmp_path: Path, clean_shutdown: bool
) -> None:
    service = open_service(tmp_path)
    index_ids(service, [10, 20, 30, 40, 50])
    paths = [f.path for f in service.files]
    service.close()
    write_int(paths[0], 36, 99)  # index_count past index_num
    reopened = IndexService(tmp_path / "index", 4, 3)
    assert reopened.load(clean_shutdown, index_checkpoint_phy_offset=10**9) == 0
    assert reopened.files == ()
    assert not any(p.exists() for p in paths)
    reopened.close()


def test_load_deletes_a_file_torn_while_being_created(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    index_ids(service, [10, 20])
    service.close()
    torn = tmp_path / "index" / "99990101000000000"
    torn.touch()
    reopened = IndexService(tmp_path / "index", 4, 3)
    assert reopened.load(clean_shutdown=False, index_checkpoint_phy_offset=100) == 20
    assert not torn.exists()
    assert reopened.query_by_uniq_key("id-20", 10) == [20]
    reopened.close()


def test_load_refuses_files_of_another_geometry(tmp_path: Path) -> None:
    service = open_service(tmp_path, hash_slot_num=4)
    index_ids(service, [10])
    service.close()
    with pytest.raises(StoreConfigError, match="hash_slot_num or index_num"):
        IndexService(tmp_path / "index", 8, 3).load(True, 0)


def test_load_ignores_files_that_are_not_index_files(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "README").write_text("not an index")
    service = open_service(tmp_path)
    assert service.files == ()
    assert (tmp_path / "index" / "README").exists()
    service.close()


@pytest.mark.parametrize(("hash_slot_num", "index_num"), [(0, 10), (4, 1), (4, 2**31)])
def test_geometry_out_of_range_is_a_config_error(
    tmp_path: Path, hash_slot_num: int, index_num: int
) -> None:
    with pytest.raises(StoreConfigError):
        IndexService(tmp_path, hash_slot_num, index_num)


def test_delete_expired_file_never_deletes_the_newest(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    index_ids(service, [10, 20, 30, 40, 50])  # files end at 20, 40, 50
    first, second, newest = service.files
    assert service.delete_expired_file(20) == []  # its last record, 20, is still in the log
    assert service.delete_expired_file(21) == [first.path]
    assert service.delete_expired_file(10**12) == [second.path]
    assert service.files == (newest,)
    assert not first.path.exists()
    assert not second.path.exists()
    assert service.query_by_uniq_key("id-50", 10) == [50]
    assert service.query_by_uniq_key("id-10", 10) == []
    service.close()


def test_flush_is_callable_at_any_time(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    service.flush()
    index_ids(service, [10, 20, 30])
    service.flush()
    service.flush()  # nothing new: no fdatasync needed, still fine
    index_ids(service, [40])
    service.flush()
    service.close()
