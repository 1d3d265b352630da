"""`rocketbox up`'s small store files, and a data directory an earlier `up` wrote with RocketMQ's
sizes.

Proves: a store whose files are RocketMQ's sizes (commitlog segment, index file, consume queue
file) is reopened with those sizes for each option left at its default, so the upgrade does not
make `make run` refuse its own data; an option given explicitly is kept as given; a new
directory, or one written with up's sizes, gets up's. The files are sparse: their size is what
is read, not their contents.
"""

from __future__ import annotations

from pathlib import Path

from broker.store.consume_queue import CQ_STORE_UNIT_SIZE_BYTES
from broker.store.index_file import index_file_size_bytes
from rocketbox.store_geometry import (
    FIELDS,
    MIB,
    ROCKETMQ_STORE_GEOMETRY,
    StoreGeometry,
    sizes_on_disk,
)
from rocketbox.up_cli import UP_STORE_GEOMETRY

ALL_DEFAULT = frozenset(FIELDS)


def write_store(store_dir: Path, g: StoreGeometry) -> None:
    """One sparse file of each kind, at ``g``'s sizes."""
    files = {
        store_dir / "commitlog" / "00000000000000000000": g.segment_size_mib * MIB,
        store_dir / "index" / "20261125060922792": index_file_size_bytes(
            g.hash_slot_num, g.index_num_max
        ),
        store_dir / "consumequeue" / "Orders" / "0" / "00000000000000000000": (
            g.consume_queue_file_entries * CQ_STORE_UNIT_SIZE_BYTES
        ),
    }
    for path, size in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            f.truncate(size)


def test_a_new_directory_gets_ups_sizes(tmp_path: Path) -> None:
    assert sizes_on_disk(tmp_path, UP_STORE_GEOMETRY, ALL_DEFAULT) == (UP_STORE_GEOMETRY, [])


def test_a_store_written_with_rocketmqs_sizes_is_reopened_with_them(tmp_path: Path) -> None:
    write_store(tmp_path, ROCKETMQ_STORE_GEOMETRY)
    geometry, kept = sizes_on_disk(tmp_path, UP_STORE_GEOMETRY, ALL_DEFAULT)
    assert (geometry, kept) == (ROCKETMQ_STORE_GEOMETRY, list(FIELDS))


def test_an_option_given_explicitly_is_kept_as_given(tmp_path: Path) -> None:
    write_store(tmp_path, ROCKETMQ_STORE_GEOMETRY)
    asked = StoreGeometry(32, 1_000, 4_000, 1_000)
    defaulted = ALL_DEFAULT - {"segment_size_mib"}
    geometry, kept = sizes_on_disk(tmp_path, asked, defaulted)
    assert geometry.segment_size_mib == 32
    assert kept == ["hash_slot_num", "index_num_max", "consume_queue_file_entries"]


def test_a_store_written_with_ups_sizes_keeps_ups(tmp_path: Path) -> None:
    write_store(tmp_path, UP_STORE_GEOMETRY)
    assert sizes_on_disk(tmp_path, UP_STORE_GEOMETRY, ALL_DEFAULT) == (UP_STORE_GEOMETRY, [])
