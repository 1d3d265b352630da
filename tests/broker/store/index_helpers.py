"""Files, entries and checks shared by test_index_file.py and test_index_service.py."""

from __future__ import annotations

import struct
from pathlib import Path

from broker.store.index_file import (
    HASH_SLOT_BYTES,
    HEADER_BYTES,
    INDEX_ENTRY_BYTES,
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
