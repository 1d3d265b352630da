"""One on-disk hash index file from message key to commitlog offset (RocketMQ's IndexFile);
index_service.py keeps the files of a store.

The dispatcher indexes every record under its message id (``UNIQ_KEY``, bare: ids are globally
unique) and under each business key as ``topic#key``. Queries return candidate ``phy_offset``\\ s,
newest first; different keys can share a hash, so the caller confirms each by reading the record.

One file, integers big-endian, named by its creation time ``yyyyMMddHHmmssSSS`` (UTC):

    offset    bytes  field               meaning
    0         8      begin_timestamp_ms  store time of the first entry
    8         8      end_timestamp_ms    latest store time of any entry
    16        8      begin_phy_offset    phy_offset of the first entry
    24        8      end_phy_offset      phy_offset of the last entry
    32        4      hash_slot_count     slots in use
    36        4      index_count         next entry number; starts at 1: entry 0 is unused, so
                                         0 in a slot or a link means "none"
    40        4*S    hash slots          number of the newest entry whose key hashed there
    40+4*S    20*N   entries             key_hash (4), phy_offset (8), time_diff_s (4, whole
                                         seconds after begin_timestamp_ms), prev_index (4, the
                                         next older entry of the same slot; 0 ends the chain)

S = hash_slot_num, N = index_num: entry n is at 40 + 4*S + 20*n.

Invariants:
- Only the dispatcher thread writes, and only to the newest file. An entry is written before the
  header publishes it (``index_count``) and the slot is updated last, so a reader that reads the
  slot before the header never follows a slot to an unpublished entry.
- A slot or chain link outside ``1..index_count-1`` (left by a torn write) reads as "empty"; chain
  links must strictly decrease, so a walk over garbage always ends.
- End phy offsets grow from file to file; a record's keys go into one file (unless it has more keys
  than a file holds), so recovery can drop a suffix of files and re-dispatch from its first record.
- The file list is a tuple replaced under a lock, so readers iterate a stable snapshot; a reader
  that meets a file closed under it (``ValueError`` from the mmap) treats that file as empty.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import NamedTuple

from broker.store.mapped_file import MappedFile

_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
HEADER_BYTES = _HEADER.size
HASH_SLOT_BYTES = _SLOT.size
INDEX_ENTRY_BYTES = _ENTRY.size
FILE_NAME_DIGITS = 17
# Slot values, entry numbers and time diffs are Java ints on disk.
INDEX_NUM_MAX = 2**31 - 1
TIME_DIFF_S_MAX = 2**31 - 1
TIMESTAMP_MS_MAX = 2**63 - 1
# time_diff_s drops the milliseconds, so an entry's stored time may be up to 1 s early.
TIME_SLACK_MS = 1000


def key_hash(key: str) -> int:
    """crc32 rather than Java's hashCode: it runs in C, and callers confirm every hit anyway."""
    return zlib.crc32(key.encode("utf-8")) & 0x7FFFFFFF


def build_topic_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


class IndexHeader(NamedTuple):
    begin_timestamp_ms: int
    end_timestamp_ms: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


class IndexFile:
    """One index file, mapped through ``MappedFile``: ``wrote_position`` is the end of the last
    entry, so ``MappedFile.flush`` syncs exactly when entries were added since the last flush.
    (``file_from_offset`` is the name read as a number; it means nothing for index files.)"""

    # The writer keeps the header's fields as ints (_h): only the dispatcher writes, and
    # unpacking the header for every key cost more than the rest of a put.
    __slots__ = ("_entries_base", "_h", "_mf", "hash_slot_num", "index_num")

    def __init__(self, path: Path, hash_slot_num: int, index_num: int) -> None:
        """Map ``path``, creating and preallocating it when it does not exist."""
        fresh = not path.exists()
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._mf = MappedFile(path, index_file_size_bytes(hash_slot_num, index_num))
        if fresh:
            _HEADER.pack_into(self._mf.buffer, 0, 0, 0, 0, 0, 0, 1)
        self._entries_base = HEADER_BYTES + hash_slot_num * HASH_SLOT_BYTES
        self._h = list(self.header())
        count = min(max(self.header().index_count, 1), index_num)
        self._mf.wrote_position = self._mf.flushed_position = self._entry_pos(count)

    @property
    def path(self) -> Path:
        return self._mf.path

    def header(self) -> IndexHeader:
        return IndexHeader._make(_HEADER.unpack_from(self._mf.buffer, 0))

    def header_valid(self) -> bool:
        h = self.header()
        if not 1 <= h.index_count <= self.index_num:
            return False
        return h.index_count == 1 or 0 <= h.begin_phy_offset <= h.end_phy_offset

    def _slot_pos(self, hash_value: int) -> int:
        return HEADER_BYTES + (hash_value % self.hash_slot_num) * HASH_SLOT_BYTES

    def _entry_pos(self, index: int) -> int:
        return HEADER_BYTES + self.hash_slot_num * HASH_SLOT_BYTES + index * INDEX_ENTRY_BYTES

    def put_key(self, key: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """Add one entry; False when the file is full (the caller rolls to a new file)."""
        buf = self._mf.buffer
        h = self._h  # begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count
        count = h[5]
        assert count >= 1, f"{self.path}: index_count {count}; load drops invalid files"
        if count >= self.index_num:
            return False
        hash_value = zlib.crc32(key.encode()) & 0x7FFFFFFF
        slot_pos = HEADER_BYTES + (hash_value % self.hash_slot_num) * HASH_SLOT_BYTES
        (slot_value,) = _SLOT.unpack_from(buf, slot_pos)
        prev_index = slot_value if 0 < slot_value < count else 0
        if count == 1:
            h[0] = h[1] = store_timestamp_ms
            h[2] = phy_offset
        # A clock stepping back must not move the entry before the file or shrink its range.
        elif store_timestamp_ms > h[1]:
            h[1] = store_timestamp_ms
        time_diff_s = min(max((store_timestamp_ms - h[0]) // 1000, 0), TIME_DIFF_S_MAX)
        h[3] = phy_offset
        if prev_index == 0:
            h[4] += 1
        h[5] = count + 1
        entry_pos = self._entries_base + count * INDEX_ENTRY_BYTES
        _ENTRY.pack_into(buf, entry_pos, hash_value, phy_offset, time_diff_s, prev_index)
        _HEADER.pack_into(buf, 0, *h)
        _SLOT.pack_into(buf, slot_pos, count)
        self._mf.wrote_position = entry_pos + INDEX_ENTRY_BYTES
        return True

    def select_phy_offset(
        self, key: str, max_num: int, begin_ts_ms: int, end_ts_ms: int
    ) -> list[int]:
        """Offsets of entries with the key's hash stored within the range, newest first."""
        buf = self._mf.buffer
        hash_value = key_hash(key)
        # Slot before header: see the module docstring on publication order.
        (index,) = _SLOT.unpack_from(buf, self._slot_pos(hash_value))
        h = self.header()
        count = min(h.index_count, self.index_num)
        if not 0 < index < count:
            return []
        low_ms = begin_ts_ms - TIME_SLACK_MS
        found: list[int] = []
        while len(found) < max_num:
            entry_hash, phy_offset, time_diff_s, prev_index = _ENTRY.unpack_from(
                buf, self._entry_pos(index)
            )
            entry_ts_ms = h.begin_timestamp_ms + time_diff_s * 1000
            if entry_hash == hash_value and low_ms <= entry_ts_ms <= end_ts_ms:
                found.append(phy_offset)
            if not 0 < prev_index < index:
                break
            index = prev_index
        return found

    def flush(self) -> None:
        self._mf.flush()

    def close(self) -> None:
        self._mf.close()

    def destroy(self) -> None:
        self._mf.destroy()

    def __repr__(self) -> str:
        return f"IndexFile({self.path.name})"


def index_file_size_bytes(hash_slot_num: int, index_num: int) -> int:
    return HEADER_BYTES + hash_slot_num * HASH_SLOT_BYTES + index_num * INDEX_ENTRY_BYTES


def is_index_name(name: str) -> bool:
    return len(name) == FILE_NAME_DIGITS and name.isdigit()
