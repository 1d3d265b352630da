"""The index files of a store (IndexService), on real files.

Proves: the message id is indexed bare and keys per topic; a full file rolls to a new one and
queries span all files, skipping whole files by their header range; re-dispatched records are not
indexed twice; a clean reopen keeps everything, an unclean one deletes the files that may hold
entries that are not durable and says where to re-dispatch from; the newest file is never deleted
as expired; a file closed under a reader reads as empty.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.store.errors import StoreConfigError
from broker.store.index_file import (
    FILE_NAME_DIGITS,
)
from broker.store.index_service import IndexService
from tests.broker.store.index_helpers import (
    ALL_TIME,
    T0_MS,
    entry_pos,
    index_ids,
    open_service,
    write_int,
)


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


def test_flush_is_callable_at_any_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before any file, between entries and with nothing new: a flush syncs exactly the files
    with entries added since the last one, changes nothing a query or the next entry sees, and
    leaves what it covered durable by the checkpoint's rule (kept by an unclean reopen)."""
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def counting_fdatasync(fd: int) -> None:
        synced.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", counting_fdatasync)

    def flush_syncs(service: IndexService) -> int:
        synced.clear()
        service.flush()
        return len(synced)

    service = open_service(tmp_path)
    assert flush_syncs(service) == 0  # no file yet
    assert service.files == ()
    index_ids(service, [10, 20, 30])  # two files: 10 and 20, then 30
    assert flush_syncs(service) == 2
    assert flush_syncs(service) == 0  # nothing new since
    index_ids(service, [40])  # into the second file, beside 30
    assert flush_syncs(service) == 1
    assert len(service.files) == 2
    checkpoint = service.max_indexed_phy_offset + 1  # read before the flush, as the store does
    assert flush_syncs(service) == 0
    for offset in (10, 20, 30, 40):
        assert service.query_by_uniq_key(f"id-{offset}", 10) == [offset]
    service.close()

    reopened = IndexService(tmp_path / "index", 4, 3)
    assert reopened.load(clean_shutdown=False, index_checkpoint_phy_offset=checkpoint) is None
    for offset in (10, 20, 30, 40):
        assert reopened.query_by_uniq_key(f"id-{offset}", 10) == [offset]
    reopened.close()
