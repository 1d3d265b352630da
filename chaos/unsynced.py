"""What a file holds beyond its last fsync: the volatile half of chaos/power_loss_fs.py.

A file's backing file (in the backing directory) holds exactly what was synced. ``UnsyncedFile``
holds the rest, in memory, as a kernel's page cache would: the dirty pages written since the
last sync, each a whole page (a partial write reads the page in first), and the file's size.
``sync`` writes them to the backing file and fsyncs it; dropping the object is what a power cut
does to them.

Invariants (``size`` is the size a reader sees; ``cut_size`` the least size the file had since
the last sync, so ``cut_size <= size`` and ``cut_size <= base_size``):

- a byte at ``pos < size`` reads from its dirty page when there is one; otherwise from the
  backing file when ``pos < cut_size``; otherwise it is zero (a truncation since the sync cut it
  off, or it lies past what the backing file holds);
- no dirty page lies wholly at or past ``size``, and the bytes of a dirty page past ``size`` are
  zero, so growing the file again (a write past the end, a truncate up) shows zeros there;
- ``sync`` makes the backing file read exactly as the file reads now: cut to ``cut_size``,
  the dirty pages written, sized to ``size``, fsynced.
"""

from __future__ import annotations

import os

PAGE_BYTES = 4096


class UnsyncedFile:
    """The unsynced state of one file (one inode), over its backing file's synced content."""

    __slots__ = ("base_size", "cut_size", "pages", "size")

    def __init__(self, base_size: int) -> None:
        # The backing file's size: what it held at the last sync.
        self.base_size = base_size
        self.cut_size = base_size
        self.size = base_size
        self.pages: dict[int, bytearray] = {}

    @property
    def dirty_bytes(self) -> int:
        return len(self.pages) * PAGE_BYTES

    # -- reading ------------------------------------------------------------------------------
    def read(self, fd: int, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` as the file reads now (fewer at its end)."""
        end = min(self.size, offset + length)
        if offset >= end:
            return b""
        out = bytearray()
        pos = offset
        while pos < end:
            index, within = divmod(pos, PAGE_BYTES)
            take = min(PAGE_BYTES - within, end - pos)
            page = self.pages.get(index)
            if page is None:
                page = self._clean_page(fd, index)
            out += page[within : within + take]
            pos += take
        return bytes(out)

    def _clean_page(self, fd: int, index: int) -> bytearray:
        """Page ``index`` as the backing file gives it, zero at and past ``cut_size``."""
        start = index * PAGE_BYTES
        page = bytearray(PAGE_BYTES)
        valid = min(PAGE_BYTES, self.cut_size - start)
        if valid > 0:
            got = os.pread(fd, valid, start)
            page[: len(got)] = got
        return page

    # -- writing ------------------------------------------------------------------------------
    def write(self, fd: int, offset: int, data: bytes) -> None:
        pos = offset
        view = memoryview(data)
        done = 0
        while done < len(data):
            index, within = divmod(pos, PAGE_BYTES)
            take = min(PAGE_BYTES - within, len(data) - done)
            page = self.pages.get(index)
            if page is None:
                # Zero at and past cut_size, so at and past the current end too.
                page = self._clean_page(fd, index)
                self.pages[index] = page
            page[within : within + take] = view[done : done + take]
            pos += take
            done += take
        self.size = max(self.size, offset + len(data))

    def truncate(self, size: int) -> None:
        if size < self.size:
            last = (size + PAGE_BYTES - 1) // PAGE_BYTES
            for index in [i for i in self.pages if i >= last]:
                del self.pages[index]
            partial = self.pages.get(size // PAGE_BYTES)
            if partial is not None:
                self._zero_from(partial, size // PAGE_BYTES, size)
            self.cut_size = min(self.cut_size, size)
        self.size = size

    def resized(self, size: int) -> None:
        """The backing file was just resized to ``size`` by an explicit size change (truncate,
        ftruncate, O_TRUNC), which is durable at once: unsynced writes past ``size`` are gone,
        those below it stay unsynced."""
        if size < self.size:
            self.truncate(size)
        self.size = max(self.size, size)
        # Grown past an earlier unsynced cut, the backing file still holds the bytes the cut
        # dropped: they stay cut off (read as zeros), as the file itself says.
        self.cut_size = min(self.cut_size, size)
        self.base_size = size

    def backing_grown(self, size: int) -> None:
        """The backing file was just grown to ``size`` (fallocate): its new bytes are zeros; the
        file's own size grows to it when it was shorter."""
        if size < self.base_size or self.cut_size != self.base_size:
            raise ValueError(f"a backing file of {self.base_size} bytes cannot grow to {size}")
        self.size = max(self.size, size)
        self.base_size = self.cut_size = size

    @staticmethod
    def _zero_from(page: bytearray, index: int, pos: int) -> None:
        """Zero the bytes of page ``index`` at and past file position ``pos``."""
        within = pos - index * PAGE_BYTES
        if within < PAGE_BYTES:
            start = max(0, within)
            page[start:] = bytes(PAGE_BYTES - start)

    # -- syncing ------------------------------------------------------------------------------
    def write_back(self, fd: int) -> None:
        """Write everything to the backing file (not yet fsynced); the state is clean after."""
        if self.cut_size < self.base_size:
            os.ftruncate(fd, self.cut_size)
        for index in sorted(self.pages):
            start = index * PAGE_BYTES
            os.pwrite(fd, self.pages[index][: min(PAGE_BYTES, self.size - start)], start)
        if os.fstat(fd).st_size != self.size:
            os.ftruncate(fd, self.size)
        self.pages.clear()
        self.base_size = self.cut_size = self.size
