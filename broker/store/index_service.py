"""The index files of a store (RocketMQ's IndexService): which file takes the next keys, queries
across files newest first, recovery's reload after a crash and retention's removal of old files.
The file format and the index's invariants are index_file.py's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from broker.store.errors import StoreConfigError
from broker.store.index_file import (
    FILE_NAME_DIGITS,
    HEADER_BYTES,
    INDEX_NUM_MAX,
    TIME_SLACK_MS,
    TIMESTAMP_MS_MAX,
    IndexFile,
    build_topic_key,
    index_file_size_bytes,
    is_index_name,
)

LOG = logging.getLogger(__name__)


class IndexService:
    """The index files of one store, oldest first, in ``store_path_index``."""

    def __init__(self, store_path_index: Path, hash_slot_num: int, index_num: int) -> None:
        if not 0 < hash_slot_num <= INDEX_NUM_MAX:
            raise StoreConfigError(f"hash_slot_num must be in 1..{INDEX_NUM_MAX}")
        if not 1 < index_num <= INDEX_NUM_MAX:
            raise StoreConfigError(f"index_num must be in 2..{INDEX_NUM_MAX}")
        self.store_path_index = store_path_index
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._files: tuple[IndexFile, ...] = ()
        self._lock = threading.Lock()  # guards replacing _files
        self._flush_lock = threading.Lock()  # no fdatasync on a file being destroyed

    @property
    def files(self) -> tuple[IndexFile, ...]:
        return self._files

    def load(self, clean_shutdown: bool, index_checkpoint_phy_offset: int) -> int | None:
        """Map the files on disk and drop those that may hold entries that are not durable.

        ``index_checkpoint_phy_offset``: the index entries of every record below it are durable
        (write ``max_indexed_phy_offset + 1``, read before ``flush``). After an unclean shutdown
        the first file whose ``end_phy_offset`` is at or past it, and every later one, are
        deleted; so is a file with an invalid header, after any shutdown. Returns the phy offset
        to re-dispatch from to rebuild what was dropped (0 may lie below the commitlog's first
        offset: clamp it), or None when nothing indexed was dropped.
        """
        checkpoint = index_checkpoint_phy_offset
        paths: list[Path] = []
        if self.store_path_index.exists():
            paths = sorted(p for p in self.store_path_index.iterdir() if is_index_name(p.name))
        keep: list[IndexFile] = []
        rebuild_from: list[int] = []
        for i, path in enumerate(paths):
            f = self._map_existing(path)
            h = f.header() if f is not None and f.header_valid() else None
            if len(keep) < i:
                reason = "it follows a deleted file"  # survivors must stay a prefix
            elif f is None or h is None:
                reason = "invalid header"
            elif clean_shutdown or h.end_phy_offset < checkpoint:
                keep.append(f)
                continue
            else:
                reason = "end_phy_offset at or past the checkpoint"
            if h is None:
                # Its header cannot say where it began: resume after what the survivors hold.
                rebuild_from.append(max(_max_indexed_phy_offset(keep), 0))
            elif h.index_count > 1:
                rebuild_from.append(h.begin_phy_offset)
            LOG.warning("deleting index file %s: %s (checkpoint %s)", path, reason, checkpoint)
            if f is None:
                path.unlink(missing_ok=True)
            else:
                f.destroy()
        with self._lock:
            self._files = tuple(keep)
        return min(rebuild_from) if rebuild_from else None

    def _map_existing(self, path: Path) -> IndexFile | None:
        size = path.stat().st_size
        if size < HEADER_BYTES:
            return None  # torn while being created: it can hold nothing durable
        size_bytes = index_file_size_bytes(self.hash_slot_num, self.index_num)
        if size != size_bytes:
            raise StoreConfigError(
                f"{path}: size {size} is not {size_bytes} bytes; hash_slot_num or index_num "
                "changed since it was written"
            )
        return IndexFile(path, self.hash_slot_num, self.index_num)

    @property
    def max_indexed_phy_offset(self) -> int:
        """``end_phy_offset`` of the newest file with entries, or -1 when nothing is indexed."""
        return _max_indexed_phy_offset(self._files)

    def build_index(
        self,
        topic: str,
        keys: Sequence[str],
        uniq_key: str | None,
        phy_offset: int,
        store_timestamp_ms: int,
    ) -> None:
        """Index one record (dispatcher thread only). Records at or below
        ``max_indexed_phy_offset`` are skipped: recovery re-dispatches records already indexed."""
        files = self._files
        newest = files[-1] if files else None
        if newest is not None and newest._h[5] > 1:  # the newest file has entries: cheap check
            if phy_offset <= newest._h[3]:
                return
        elif phy_offset <= _max_indexed_phy_offset(files):
            return
        index_keys = [uniq_key] if uniq_key else []
        if keys:
            index_keys.extend(build_topic_key(topic, key) for key in keys if key)
            # A repeated key would return its offset twice.
            index_keys = list(dict.fromkeys(index_keys))
        if not index_keys:
            return
        current = newest if newest is not None else self._roll()
        count = current._h[5]
        # Roll before a record that does not fit, so recovery can re-dispatch whole records.
        if count > 1 and count + len(index_keys) > self.index_num:
            current = self._roll()
        for key in index_keys:
            if not current.put_key(key, phy_offset, store_timestamp_ms):
                current = self._roll()
                put = current.put_key(key, phy_offset, store_timestamp_ms)
                assert put, "a new index file refused its first entry"

    def _roll(self) -> IndexFile:
        self.store_path_index.mkdir(parents=True, exist_ok=True)
        files = self._files
        newest_name = files[-1].path.name if files else ""
        now_ms = time.time_ns() // 1_000_000
        dt = datetime.fromtimestamp(now_ms // 1000, tz=UTC)
        name = f"{dt:%Y%m%d%H%M%S}{now_ms % 1000:03d}"
        # Names must sort in creation order and be unique. Bumping the number may, at a minute's
        # last millisecond, give a name that is no calendar time; only the order matters.
        name = max(name, newest_name)
        while name == newest_name or (self.store_path_index / name).exists():
            name = f"{int(name) + 1:0{FILE_NAME_DIGITS}d}"
        f = IndexFile(self.store_path_index / name, self.hash_slot_num, self.index_num)
        with self._lock:
            self._files = (*self._files, f)
        LOG.info("created index file %s", f.path)
        return f

    def query_offset(self, key: str, max_num: int, begin_ts_ms: int, end_ts_ms: int) -> list[int]:
        """Candidate phy offsets for ``key`` stored within the range, newest file first.

        Keys can collide: the caller must read each record and compare its keys."""
        found: list[int] = []
        for f in reversed(self._files):
            if len(found) >= max_num:
                break
            try:
                h = f.header()
                # Same 1 s slack as the entries: an entry's stored time may be below its real one.
                if (
                    h.end_timestamp_ms < begin_ts_ms - TIME_SLACK_MS
                    or h.begin_timestamp_ms > end_ts_ms
                ):
                    continue
                found.extend(f.select_phy_offset(key, max_num - len(found), begin_ts_ms, end_ts_ms))
            except ValueError:
                continue  # deleted under us: it holds nothing any more
        return found

    def query_by_key(
        self, topic: str, key: str, max_num: int, begin_ts_ms: int, end_ts_ms: int
    ) -> list[int]:
        return self.query_offset(build_topic_key(topic, key), max_num, begin_ts_ms, end_ts_ms)

    def query_by_uniq_key(self, uniq_key: str, max_num: int) -> list[int]:
        return self.query_offset(uniq_key, max_num, 0, TIMESTAMP_MS_MAX)

    def delete_expired_file(self, min_commit_log_offset: int) -> list[Path]:
        """Delete the files (never the newest) whose records all lie below the commitlog's
        first offset."""
        with self._lock:
            files = self._files
            doomed = [f for f in files[:-1] if f.header().end_phy_offset < min_commit_log_offset]
            self._files = tuple(f for f in files if f not in doomed)
        with self._flush_lock:
            for f in doomed:
                f.destroy()
                LOG.info("deleted expired index file %s", f.path)
        return [f.path for f in doomed]

    def flush(self) -> None:
        """fdatasync every file with entries added since its last flush."""
        with self._flush_lock:
            for f in self._files:
                f.flush()

    def close(self) -> None:
        """Flush, then unmap every file; the service holds no files afterwards."""
        self.flush()
        with self._lock:
            files, self._files = self._files, ()
        with self._flush_lock:
            for f in files:
                f.close()


def _max_indexed_phy_offset(files: Sequence[IndexFile]) -> int:
    for f in reversed(files):
        try:
            h = f.header()
        except ValueError:
            continue  # closed under us
        if h.index_count > 1:
            return h.end_phy_offset
    return -1
