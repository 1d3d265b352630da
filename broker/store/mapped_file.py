"""Fixed-size memory-mapped segment files (RocketMQ's MappedFile and MappedFileQueue).

A segment is named by the 20-digit zero-padded offset of its first byte in the logical stream it
belongs to (codec/layout.py), so the segment holding any offset is found by arithmetic.

Invariants:
- Blocks are reserved with ``posix_fallocate`` when a segment is created: a write through the
  mapping can then never hit a full disk, which would kill the process with SIGBUS. A full disk
  shows up instead as ``OSError`` at creation, which callers turn into a status.
- Durability comes from ``os.fdatasync`` on the file descriptor. It writes back the dirty pages of
  the shared mapping (they are the same page-cache pages) and, unlike ``mmap.flush``, it releases
  the GIL, so writers keep appending while the disk syncs.
- Only the owner of a queue writes to it (the commitlog has exactly one writer, holding the put
  lock); readers may run on other threads and read below ``wrote_position``.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from broker.store.codec.layout import is_segment_name, offset_to_file_name

LOG = logging.getLogger(__name__)

CREATING_SUFFIX = ".creating"
WARMING_SUFFIX = ".warming"  # a segment being prepared by AllocateMappedFileService
OS_PAGE_SIZE_BYTES = 4096


class MappedFile:
    """One segment: a preallocated file mapped read/write, with write and flush positions."""

    __slots__ = (
        "_fd",
        "_mmap",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "path",
        "wrote_position",
    )

    def __init__(self, path: Path, file_size: int, create_at: Path | None = None) -> None:
        """Map ``path``. A segment that does not exist yet is created and preallocated under a
        temporary name and renamed to ``path`` only at its full size, so a crash mid-creation
        never leaves a short segment behind. With ``create_at`` the caller renames it instead
        (AllocateMappedFileService, once the segment is warm)."""
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(path.name)
        rename_to: Path | None = None
        open_path = path
        if create_at is not None:
            open_path = create_at
        elif not path.exists():
            open_path = path.with_name(path.name + CREATING_SUFFIX)
            rename_to = path
        fd = os.open(open_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < file_size:
                os.posix_fallocate(fd, 0, file_size)
            if rename_to is not None:
                os.rename(open_path, rename_to)
            self._mmap = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        # Set by the owner after recovery; a new file starts empty.
        self.wrote_position = 0
        self.flushed_position = 0

    # -- writing (owner only) --------------------------------------------------------------
    def append(self, data: bytes) -> int:
        """Append at ``wrote_position``; returns the position written at. Caller checked room."""
        pos = self.wrote_position
        end = pos + len(data)
        assert end <= self.file_size, "append past the end of a segment"
        self._mmap[pos:end] = data
        self.wrote_position = end
        return pos

    def seal(self, marker: bytes) -> None:
        """Write ``marker`` at ``wrote_position`` and mark the rest of the segment as used: the
        marker (a blank record) claims the whole tail, which stays zero on disk."""
        self.append(marker)
        self.wrote_position = self.file_size

    def write_at(self, pos: int, data: bytes) -> None:
        """Write at a fixed position (consume queue and index entries are positional)."""
        self._mmap[pos : pos + len(data)] = data

    @property
    def buffer(self) -> mmap.mmap:
        """The mapping, for ``struct.pack_into``/``unpack_from`` without copies."""
        return self._mmap

    # -- reading -----------------------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes:
        return self._mmap[pos : pos + size]

    @property
    def remaining_bytes(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.path).st_mtime * 1000)

    # -- durability --------------------------------------------------------------------------
    def flush(self) -> int:
        """Make everything written so far durable; returns the flushed position."""
        target = self.wrote_position
        if target > self.flushed_position:
            os.fdatasync(self._fd)
            self.flushed_position = target
        return self.flushed_position

    def dirty_pages(self) -> int:
        return (
            self.wrote_position // OS_PAGE_SIZE_BYTES - self.flushed_position // OS_PAGE_SIZE_BYTES
        )

    # -- life cycle --------------------------------------------------------------------------
    def close(self) -> None:
        if not self._mmap.closed:
            self._mmap.close()
            os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position}, size={self.file_size})"


class SegmentAllocator(Protocol):
    """Prepares segments ahead of the writer (allocate_mapped_file.py)."""

    def take_or_create(self, path: Path, file_size: int) -> MappedFile: ...

    def request(self, path: Path, file_size: int) -> None: ...


class MappedFileQueue:
    """An ordered list of equal-size segments forming one logical byte stream.

    The list is replaced, never mutated in place, so readers on other threads iterate a stable
    snapshot while the writer adds a segment or the cleaner removes old ones.
    """

    def __init__(
        self,
        store_dir: Path,
        mapped_file_size_bytes: int,
        allocator: SegmentAllocator | None = None,
    ) -> None:
        self.store_dir = store_dir
        self.mapped_file_size_bytes = mapped_file_size_bytes
        self.allocator = allocator
        self._files: tuple[MappedFile, ...] = ()
        self._lock = threading.Lock()  # guards replacing _files

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> None:
        """Map the segments on disk. Positions are set to 'full'; recovery corrects the tail."""
        if not self.store_dir.exists():
            self._files = ()
            return
        for suffix in (WARMING_SUFFIX, CREATING_SUFFIX):
            for stale in self.store_dir.glob(f"*{suffix}"):
                stale.unlink()  # a creation or warm-up cut short by a crash; it never held data
        names = sorted(p for p in self.store_dir.iterdir() if is_segment_name(p.name))
        files: list[MappedFile] = []
        for path in names:
            size = path.stat().st_size
            if size != self.mapped_file_size_bytes:
                # A segment of another size was not written by this configuration; mapping it
                # with the wrong geometry would misplace every offset in it.
                raise OSError(
                    f"{path}: size {size} differs from the configured segment size "
                    f"{self.mapped_file_size_bytes}"
                )
            mf = MappedFile(path, self.mapped_file_size_bytes)
            mf.wrote_position = mf.flushed_position = self.mapped_file_size_bytes
            files.append(mf)
        self._files = tuple(files)

    # -- lookup ------------------------------------------------------------------------------
    @property
    def files(self) -> tuple[MappedFile, ...]:
        return self._files

    def first(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    def last(self) -> MappedFile | None:
        files = self._files
        return files[-1] if files else None

    def find_by_offset(self, offset: int) -> MappedFile | None:
        files = self._files
        if not files:
            return None
        index = (offset - files[0].file_from_offset) // self.mapped_file_size_bytes
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + mf.file_size:
                return mf
        return None

    @property
    def min_offset(self) -> int:
        first = self.first()
        return first.file_from_offset if first else 0

    @property
    def max_offset(self) -> int:
        """One past the last written byte."""
        last = self.last()
        return last.file_from_offset + last.wrote_position if last else 0

    @property
    def flushed_where(self) -> int:
        """Every byte below this offset is durable."""
        for mf in self._files:
            if mf.flushed_position < mf.wrote_position:
                return mf.file_from_offset + mf.flushed_position
        return self.max_offset

    # -- growth ------------------------------------------------------------------------------
    def last_or_create(self, start_offset: int = 0) -> MappedFile:
        """The segment to write to: the last one unless it is full (then a new one)."""
        last = self.last()
        if last is not None and not last.is_full:
            return last
        if last is not None:
            start_offset = last.file_from_offset + self.mapped_file_size_bytes
        else:
            start_offset -= start_offset % self.mapped_file_size_bytes
        self.store_dir.mkdir(parents=True, exist_ok=True)
        path = self.store_dir / offset_to_file_name(start_offset)
        if self.allocator:
            mf = self.allocator.take_or_create(path, self.mapped_file_size_bytes)
        else:
            mf = MappedFile(path, self.mapped_file_size_bytes)
        with self._lock:
            self._files = (*self._files, mf)
        if self.allocator:
            next_offset = start_offset + self.mapped_file_size_bytes
            self.allocator.request(self.store_dir / offset_to_file_name(next_offset), mf.file_size)
        return mf

    # -- shrinking ---------------------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> list[Path]:
        """Drop everything at and after ``offset``: later segments are deleted, the segment that
        holds it is zeroed from there. Returns the deleted paths."""
        removed: list[Path] = []
        keep: list[MappedFile] = []
        for mf in self._files:
            end = mf.file_from_offset + mf.file_size
            if end <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                pos = offset - mf.file_from_offset
                written_end = max(mf.wrote_position, pos)
                if written_end > pos:
                    mf.write_at(pos, bytes(written_end - pos))
                mf.wrote_position = pos
                mf.flushed_position = min(mf.flushed_position, pos)
                keep.append(mf)
            else:
                removed.append(mf.path)
                mf.destroy()
        with self._lock:
            self._files = tuple(keep)
        return removed

    def remove_files(self, doomed: list[MappedFile]) -> None:
        """Forget and delete the given segments (the cleaner's oldest ones)."""
        ids = {id(mf) for mf in doomed}
        with self._lock:
            self._files = tuple(mf for mf in self._files if id(mf) not in ids)
        for mf in doomed:
            mf.destroy()

    def flush(self) -> int:
        """fdatasync every segment with unflushed bytes. Returns an offset below which every
        byte is durable: the end of the data when the flush began (a writer may have rolled to
        a new segment meanwhile; it is flushed too)."""
        target = self.max_offset
        for mf in self._files:
            if mf.wrote_position > mf.flushed_position:
                mf.flush()
        return target

    def close(self) -> None:
        for mf in self._files:
            mf.close()

    def __iter__(self) -> Iterator[MappedFile]:
        return iter(self._files)
