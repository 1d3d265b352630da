"""The RocksDB outbox's emergency reserve: disk space held back so that a full disk stops new
spools, not the delivery of what the outbox already holds.

Why it is needed. Everything the RocksDB outbox does is a write: a claim rewrites its entry
with the lease, a delivery writes a tombstone. On a full disk RocksDB fails the write, and its
write-ahead log stays failed ("No space left on device", then "Writer has previous error") even
once space is back: only closing and reopening the database recovers it, and the reopen itself
writes (it flushes the log it recovers into a table file, and starts a new log). So with no room
kept back, a full disk stops the claims and tombstones that would shrink the outbox, and the
drain with them (issue #13: 2,507 entries stuck for 158 s with the broker back).

What it is. A file, ``RESERVE_FILE_NAME`` in the outbox's directory, of ``reserve_bytes`` real
blocks (``posix_fallocate``, then fsynced), as CockroachDB keeps an emergency ballast. When a
write fails for want of space the outbox deletes the file, reopens the database in the room it
leaves, and from then on refuses every ``put`` (OutboxNoSpaceError, which the sidecar answers
UNAVAILABLE and shows as its readiness reason) while claims, reschedules and tombstones go on
in the reserve's room. Spools are taken again once the filesystem has ``resume_free_bytes`` free
(twice the reserve, at least ``RESUME_FREE_BYTES_MIN``), checked at most every
``SPACE_CHECK_INTERVAL_S`` by puts and by readiness: the reserve is made again first, so the
next full disk finds it there.

Why not leases kept in memory once a lease write fails (RocksDB is one process's): the failed
log refuses every write, tombstones included, until a reopen, and the reopen needs room; and a
lease that never reached the disk would not mark its entry maybe stored should the process die
mid-send (outbox/outbox.py), so its restart would send it again unchecked.

Limits, named:
- The reserve is a margin, not a guarantee: it must hold what RocksDB writes to reopen (the
  recovered log flushed to a table: up to its two 64 MiB write buffers) and then the drain's
  writes (each claim rewrites its entry's state, a few hundred bytes; each delivery writes a
  tombstone; a table flush every 64 MiB of them; compaction, which frees the space of delivered
  bodies, needs room of its own). ``RESERVE_BYTES_DEFAULT`` covers a reopen with a full write
  buffer and the first 64 MiB of a drain. A larger outbox, or a disk that something else keeps
  filling, can use it up: the drain then stops too, as without a reserve, until space comes
  back.
- Reschedules write too, but never a body (the RocksDB outbox keeps bodies apart from the
  state that claims and reschedules change): while the disk is full and the broker still away,
  a backlog's resends that fail rewrite their entries' state, once per back-off each, in the
  reserve's room, until compaction takes the old versions back.
- ``reserve_bytes=0`` keeps no reserve: a full disk still refuses spools and reopens the
  database, but the drain goes on only as far as whatever room is left.
- The reserve needs a filesystem with ``posix_fallocate`` or one where written zeros take
  blocks (not a compressing or deduplicating one); free space is what ``statvfs`` reports to an
  unprivileged process (``f_bavail``).
- A reserve that cannot be made at open (less than ``resume_free_bytes`` free) leaves the outbox
  refusing spools from the start, saying why: a volume too small for its reserve is found at
  once, not at the first full disk.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

RESERVE_FILE_NAME = "ROCKETBOX-RESERVE"
RESERVE_BYTES_DEFAULT = 128 * 1024 * 1024
# With no reserve (or a small one), spools still wait for this much free space.
RESUME_FREE_BYTES_MIN = 8 * 1024 * 1024
SPACE_CHECK_INTERVAL_S = 0.5
# Zeros written at a time where posix_fallocate is not supported.
_ZEROS_CHUNK_BYTES = 1024 * 1024
_NO_SPACE_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"


def is_no_space(e: BaseException) -> bool:
    """A failure for want of disk space: an OSError, or RocksDB's IO error quoting ENOSPC."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(e)
    return _NO_SPACE_TEXT in text or os.strerror(errno.EDQUOT) in text


class DiskReserve:
    """The reserve file of one outbox directory. Not thread-safe: the outbox serialises calls."""

    def __init__(self, directory: Path, reserve_bytes: int) -> None:
        if reserve_bytes < 0:
            raise ValueError(f"reserve_bytes must be >= 0, got {reserve_bytes}")
        self.path = directory / RESERVE_FILE_NAME
        self.reserve_bytes = reserve_bytes
        self.resume_free_bytes = max(2 * reserve_bytes, RESUME_FREE_BYTES_MIN)

    def free_bytes(self) -> int:
        st = os.statvfs(self.path.parent)
        return st.f_bavail * st.f_frsize

    def held(self) -> bool:
        """The reserve is in place (or none is wanted)."""
        if self.reserve_bytes == 0:
            return True
        try:
            return self.path.stat().st_blocks * 512 >= self.reserve_bytes
        except FileNotFoundError:
            return False

    def release(self) -> bool:
        """Give the reserve's room to the outbox; whether there was one to give."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        _fsync_directory(self.path.parent)
        return True

    def restore(self) -> bool:
        """Make the reserve again if ``resume_free_bytes`` are free; whether spools may go on."""
        if self.free_bytes() < self.resume_free_bytes:
            return False
        if self.held():
            return True
        partial = self.path.with_name(self.path.name + ".partial")
        try:
            _allocate(partial, self.reserve_bytes)
            partial.replace(self.path)
            _fsync_directory(self.path.parent)
        except OSError as e:
            # Someone else took the room meanwhile: no reserve, no spools; try again later.
            with contextlib.suppress(OSError):
                partial.unlink()
            log.warning("the outbox's disk reserve %s could not be made: %s", self.path, e)
            return False
        return True

    def describe(self) -> str:
        return (
            f"{self.free_bytes()} bytes free in {self.path.parent}, spools wait for "
            f"{self.resume_free_bytes} (a {self.reserve_bytes}-byte reserve is made from them)"
        )


def _allocate(path: Path, size_bytes: int) -> None:
    """A file of ``size_bytes`` real blocks, durable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size_bytes)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            zeros = bytes(_ZEROS_CHUNK_BYTES)
            for start in range(0, size_bytes, _ZEROS_CHUNK_BYTES):
                os.write(fd, zeros[: min(_ZEROS_CHUNK_BYTES, size_bytes - start)])
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
