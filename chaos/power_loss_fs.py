"""A filesystem that forgets what was not synced when the power is cut: the operations of a FUSE
passthrough over a backing directory, mounted by chaos/power_loss_daemon.py (a process of its
own) and driven by chaos/power_loss.py.

The model (unsynced file data is lost, as LazyFS's page cache loses it; metadata is not):

- **File data** (write, pwrite, and the size a write past the end gives the file) is kept in
  memory, per file (per inode: hard links and renames keep it), until that file is fsynced or
  fdatasynced (either one, through any of its descriptors; a write through a descriptor opened
  with O_SYNC or O_DSYNC is synced as it is written), which writes it to the backing file. Reads
  see it at once, as they see a page cache. Shared mappings (mmap) take the same path: the
  kernel writes their dirty pages to the filesystem at msync, fsync, munmap or its own
  writeback, and they are kept like any write.
- **Metadata** goes to the backing directory at once and survives a cut, as a journaling
  filesystem (ext4, XFS) commits it in order: namespace changes (create, mkdir, rename, link,
  unlink, rmdir, symlink, mknod), explicit size changes (truncate, ftruncate, O_TRUNC,
  fallocate) and attributes (chmod, chown, utimens). A file created and written but never synced
  is there after the cut, empty; one truncated and rewritten without a sync is there, empty; a
  file preallocated and renamed into place is there at its full size, zeros where its unsynced
  data was. Directory fsyncs change nothing.
- Under memory pressure (more than ``unsynced_bytes_max`` unsynced in all), the file being
  written is written back to the backing file, as a kernel writes back dirty pages: that data
  then survives a cut, as it may on a real disk. The stats count these write-backs.

``cut`` drops every file's unsynced state at once, under the lock every operation takes, so an
operation is wholly before it or wholly after it; after it every operation fails with EIO until
the filesystem is unmounted. The backing directory then holds
exactly what was synced before the cut, and a new mount over it is the machine after the power
came back.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mfusepy  # type: ignore[import-untyped]  # mfusepy ships no types

from chaos.unsynced import PAGE_BYTES, UnsyncedFile

LOG = logging.getLogger(__name__)
STAT_FIELDS = (
    "st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_rdev",
)  # fmt: skip
STATVFS_FIELDS = (
    "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
    "f_flag", "f_namemax",
)  # fmt: skip
FALLOC_FL_KEEP_SIZE = 0x01


@dataclass(slots=True)
class _Handle:
    ino: int
    # Opened with O_SYNC or O_DSYNC: every write is synced before it returns.
    sync_each: bool


class PowerLossOperations(mfusepy.Operations):  # type: ignore[misc]  # an untyped base
    use_ns = True
    # Operations on open files get their descriptor (and no path: hard_remove unlinks at once).
    flag_nopath = True
    flag_nullpath_ok = True

    def __init__(self, backing_dir: Path, unsynced_bytes_max: int) -> None:
        self._root = str(backing_dir)
        self._unsynced_bytes_max = unsynced_bytes_max
        self._mutex = threading.Lock()
        self._files: dict[int, UnsyncedFile] = {}
        self._handles: dict[int, _Handle] = {}
        self._open_count: dict[int, int] = {}
        self._dead = False
        self._counts = {"syncs": 0, "writes": 0, "writebacks": 0}
        # Called once the kernel has connected (libfuse's init).
        self.on_mounted: list[Callable[[], None]] = []

    # -- the control commands -----------------------------------------------------------------
    def cut(self) -> dict[str, Any]:
        with self._mutex:
            self._dead = True
            report = self._stats()
            self._files.clear()
        LOG.info("power cut: dropped %s", report)
        return report

    def stats(self) -> dict[str, Any]:
        with self._mutex:
            return self._stats()

    def _stats(self) -> dict[str, Any]:
        unsynced = [f for f in self._files.values() if f.pages or f.size != f.base_size
                    or f.cut_size != f.base_size]  # fmt: skip
        return {
            "unsynced_files": len(unsynced),
            "unsynced_bytes": sum(f.dirty_bytes for f in unsynced),
            "dead": self._dead,
            **self._counts,
        }

    # -- helpers --------------------------------------------------------------------------------
    def _real(self, path: str | None) -> str:
        if path is None:
            raise mfusepy.FuseOSError(errno.ENOENT)
        return os.path.join(self._root, path.lstrip("/"))

    def _alive(self) -> None:
        if self._dead:
            raise mfusepy.FuseOSError(errno.EIO)

    def _state(self, ino: int, base_size: int) -> UnsyncedFile:
        state = self._files.get(ino)
        if state is None:
            state = self._files[ino] = UnsyncedFile(base_size)
        return state

    def _sync(self, fd: int) -> None:
        state = self._files.pop(self._handles[fd].ino, None)
        if state is not None:
            state.write_back(fd)
        self._counts["syncs"] += 1

    def _unsynced_pages(self) -> int:
        return sum(len(f.pages) for f in self._files.values())

    def _forget_if_gone(self, ino: int, nlink: int) -> None:
        """A file with no name left and no descriptor open can never be synced again."""
        if nlink == 0 and not self._open_count.get(ino):
            self._files.pop(ino, None)

    # -- files ----------------------------------------------------------------------------------
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self._mutex:
            self._alive()
            st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
            attrs: dict[str, Any] = {name: getattr(st, name) for name in STAT_FIELDS}
            attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns,
                         st_ctime=st.st_ctime_ns)  # fmt: skip
            state = self._files.get(st.st_ino)
            if state is not None and stat.S_ISREG(st.st_mode):
                attrs["st_size"] = state.size
                attrs["st_blocks"] = (state.size + 511) // 512
            return attrs

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            self._alive()
            return self._open(os.open(self._real(path), os.O_RDWR), flags)

    def create(self, path: str, mode: int, flags: int) -> int:
        with self._mutex:
            self._alive()
            fd = os.open(self._real(path), os.O_RDWR | os.O_CREAT | (flags & os.O_EXCL), mode)
            return self._open(fd, flags)

    def _open(self, fd: int, flags: int) -> int:
        st = os.fstat(fd)
        self._handles[fd] = _Handle(st.st_ino, bool(flags & os.O_DSYNC))
        self._open_count[st.st_ino] = self._open_count.get(st.st_ino, 0) + 1
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
            self._resized(st.st_ino, 0)
        return fd

    def _resized(self, ino: int, size: int) -> None:
        state = self._files.get(ino)
        if state is not None:
            state.resized(size)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            self._alive()
            state = self._files.get(self._handles[fh].ino)
            if state is None:
                return os.pread(fh, size, offset)
            return state.read(fh, offset, size)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            self._alive()
            handle = self._handles[fh]
            state = self._files.get(handle.ino)
            if state is None:
                state = self._state(handle.ino, os.fstat(fh).st_size)
            state.write(fh, offset, data)
            self._counts["writes"] += 1
            if handle.sync_each:
                self._sync(fh)
            elif (
                sum(len(f.pages) for f in self._files.values()) * PAGE_BYTES
                > self._unsynced_bytes_max
            ):
                self._sync(fh)
                self._counts["writebacks"] += 1
            return len(data)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._mutex:
            self._alive()
            st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
            if not stat.S_ISREG(st.st_mode):
                raise mfusepy.FuseOSError(errno.EINVAL)
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._real(path), length)
            self._resized(st.st_ino, length)
            return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        with self._mutex:
            self._alive()
            if mode & ~FALLOC_FL_KEEP_SIZE:
                raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
            if mode & FALLOC_FL_KEEP_SIZE:
                return 0
            os.posix_fallocate(fh, offset, size)
            state = self._files.get(self._handles[fh].ino)
            if state is not None:
                state.backing_grown(os.fstat(fh).st_size)
            return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mutex:
            self._alive()
            self._sync(fh)
            return 0

    def flush(self, path: str | None, fh: int) -> int:
        # close(2) syncs nothing.
        with self._mutex:
            self._alive()
            return 0

    def release(self, path: str | None, fh: int) -> int:
        with self._mutex:
            handle = self._handles.pop(fh)
            self._open_count[handle.ino] -= 1
            if not self._open_count[handle.ino]:
                del self._open_count[handle.ino]
            nlink = os.fstat(fh).st_nlink
            os.close(fh)
            self._forget_if_gone(handle.ino, nlink)
            return 0

    # -- the namespace: straight to the backing directory ---------------------------------------
    def unlink(self, path: str) -> int:
        with self._mutex:
            self._alive()
            real = self._real(path)
            st = os.lstat(real)
            os.unlink(real)
            self._forget_if_gone(st.st_ino, st.st_nlink - 1)
            return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            self._alive()
            try:
                replaced: os.stat_result | None = os.lstat(self._real(new))
            except FileNotFoundError:
                replaced = None
            os.rename(self._real(old), self._real(new))
            if replaced is not None and not stat.S_ISDIR(replaced.st_mode):
                self._forget_if_gone(replaced.st_ino, replaced.st_nlink - 1)
            return 0

    def _namespace(self, call: Any, *args: Any) -> int:
        with self._mutex:
            self._alive()
            call(*args)
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        return self._namespace(os.mkdir, self._real(path), mode)

    def rmdir(self, path: str) -> int:
        return self._namespace(os.rmdir, self._real(path))

    def mknod(self, path: str, mode: int, dev: int) -> int:
        return self._namespace(os.mknod, self._real(path), mode, dev)

    def symlink(self, target: str, source: str) -> int:
        return self._namespace(os.symlink, source, self._real(target))

    def link(self, target: str, source: str) -> int:
        return self._namespace(os.link, self._real(source), self._real(target))

    def chmod(self, path: str | None, mode: int, fh: int | None = None) -> int:
        return self._namespace(os.chmod, self._target(path, fh), mode)

    def chown(self, path: str | None, uid: int, gid: int, fh: int | None = None) -> int:
        return self._namespace(os.chown, self._target(path, fh), uid, gid)

    def utimens(
        self, path: str | None, times: tuple[int, int] | None = None, fh: int | None = None
    ) -> int:
        target = self._target(path, fh)
        if times is None:
            return self._namespace(os.utime, target)
        return self._namespace(lambda: os.utime(target, ns=times))

    def _target(self, path: str | None, fh: int | None) -> str | int:
        """The open descriptor when the call came through one, else the backing path."""
        return fh if fh is not None else self._real(path)

    def readlink(self, path: str) -> str:
        with self._mutex:
            self._alive()
            return os.readlink(self._real(path))

    def opendir(self, path: str) -> int:
        with self._mutex:
            self._alive()
            return os.open(self._real(path), os.O_RDONLY | os.O_DIRECTORY)

    def readdir(self, path: str | None, fh: int) -> list[str]:
        with self._mutex:
            self._alive()
            return [".", "..", *os.listdir(fh)]

    def releasedir(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mutex:
            self._alive()
            return 0

    def statfs(self, path: str) -> dict[str, int]:
        with self._mutex:
            self._alive()
            st = os.statvfs(self._real(path))
            return {name: getattr(st, name) for name in STATVFS_FIELDS}

    def init(self, path: str) -> None:
        for call in self.on_mounted:
            call()
