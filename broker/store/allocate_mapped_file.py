"""Segments prepared before the writer needs them (RocketMQ's AllocateMappedFileService)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from broker.store.mapped_file import WARMING_SUFFIX, MappedFile
from broker.store.service_thread import ServiceThread

LOG = logging.getLogger(__name__)

WARM_CHUNK_BYTES = 1 << 20
_ZERO_CHUNK = bytes(WARM_CHUNK_BYTES)


class AllocateMappedFileService(ServiceThread):
    """Prepares the next segment before the writer needs it (RocketMQ's
    AllocateMappedFileService with warmMappedFile).

    The first write to each page of a fresh, preallocated file costs a page fault and an extent
    conversion, which makes an append many times dearer than on a warmed segment. So the next
    segment is created under a temporary name, every block is written with zeros, fdatasync'd
    (so the first group commit on it does not also write back a whole segment of zeros) and
    only then renamed to its real name. The writer takes it if it is ready and
    otherwise creates the segment itself: it never waits, and never shares a file with a
    warm-up in progress.
    """

    def __init__(self) -> None:
        super().__init__("AllocateMappedFileService")
        self._lock = threading.Lock()
        self._requested: tuple[Path, int] | None = None
        self._ready: dict[Path, MappedFile] = {}

    def request(self, path: Path, file_size: int) -> None:
        with self._lock:
            self._requested = (path, file_size)
        self.wakeup()

    @property
    def prepared_count(self) -> int:
        """Segments prepared and not yet taken."""
        with self._lock:
            return len(self._ready)

    def take_or_create(self, path: Path, file_size: int) -> MappedFile:
        """The prepared segment for ``path``, or a new cold one. Under the same lock as the
        warm-up's final rename, so the two can never both create ``path``."""
        with self._lock:
            mf = self._ready.pop(path, None)
            if mf is None:
                mf = MappedFile(path, file_size)
                LOG.info("created segment %s (not prepared in time)", path)
            return mf

    def run(self) -> None:
        while not self.is_stopped:
            self.wait_for_running(100)
            with self._lock:
                job, self._requested = self._requested, None
            if job is not None and not self.is_stopped:
                self._prepare(*job)
        with self._lock:
            for mf in self._ready.values():
                mf.close()  # ready but unused: the file stays, empty, for the next start
            self._ready.clear()

    def _prepare(self, path: Path, file_size: int) -> None:
        if path.exists():
            return
        temp = path.with_name(path.name + WARMING_SUFFIX)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            mf = MappedFile(path, file_size, create_at=temp)
        except OSError as e:
            LOG.warning("cannot prepare segment %s: %s", path, e)
            return
        # pwrite, not writes through the mapping: the syscall releases the GIL, so the warm-up
        # runs on the other core instead of taking turns with the writer.
        for pos in range(0, file_size, WARM_CHUNK_BYTES):
            if self.is_stopped:
                mf.close()
                temp.unlink(missing_ok=True)
                return
            os.pwrite(mf._fd, _ZERO_CHUNK[: min(WARM_CHUNK_BYTES, file_size - pos)], pos)
        os.fdatasync(mf._fd)
        with self._lock:
            if path.exists():  # the writer got there first and created it cold
                mf.close()
                temp.unlink(missing_ok=True)
                return
            temp.rename(path)
            self._ready[path] = mf
        LOG.info("prepared segment %s", path)
