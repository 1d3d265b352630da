"""The RocksDB outbox's emergency reserve: disk space held back so that a full disk stops new
spools, not the delivery of what the outbox already holds.

Why it is needed. Everything the RocksDB outbox does is a write: a claim rewrites its entry
with the lease, a delivery writes a tombstone. On a full disk RocksDB fails the write, and its
write-ahead log stays failed ("No space left on device", then "Writer has previous error") even
once space is back: only closing and reopening the database recovers it, and the reopen itself
writes (it flushes the log it recovers into a table file, and starts a new log). So with no room
kept back, a full disk stops the claims and tombstones that would shrink the outbox, and the
drain with them.

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

How large. The reserve must first hold what the reopen writes, or every reopen fails for want
of space and the drain stops as if there were none: the log it recovers, flushed to tables. That
log holds what the write buffers (memtables) hold, at most ``WRITE_BUFFERS`` of
``write_buffer_bytes`` each (the outbox sets both, so the bound is known), and the reopen adds a
new info LOG, OPTIONS and MANIFEST file and the tables' own overhead, which
``REOPEN_MARGIN_BYTES`` covers with room to spare. ``reserve_bytes_min`` is that sum; a smaller
``reserve_bytes`` is refused at open, naming the minimum (0, no reserve, stays allowed). RocksDB
keeps ``INFO_LOGS_KEPT`` info LOG files, not its default thousand: each reopen starts one, and
a disk that stays full must not fill with them.

Limits, named:
- The reserve is a margin, not a guarantee: after the reopen it must also hold the drain's
  writes (each claim rewrites its entry's state, a few hundred bytes; each delivery writes a
  tombstone; a table flush every write buffer of them; compaction, which frees the space of
  delivered bodies, needs room of its own). ``RESERVE_BYTES_DEFAULT`` is twice what a reopen
  with the default write buffers needs: the reopen, then about two write buffers of drain. A
  larger outbox, or a disk that something else keeps filling, can use it up: the drain then
  stops too, as without a reserve, until space comes back; the reopens tried meanwhile (every
  ``SPACE_CHECK_INTERVAL_S``) log one line per ``REOPEN_LOG_INTERVAL_S``, saying how many more
  failed.
- Reschedules write too, but never a body (the RocksDB outbox keeps bodies apart from the
  state that claims and reschedules change): while the disk is full and the broker still away,
  a backlog's resends that fail rewrite their entries' state, once per back-off each, in the
  reserve's room, until compaction takes the old versions back.
- ``reserve_bytes=0`` keeps no reserve: a full disk still refuses spools and reopens the
  database, but the reopen and the drain go on only as far as whatever room is left.
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

from outbox.errors import OutboxConfigError

log = logging.getLogger(__name__)

MIB = 1024 * 1024
RESERVE_FILE_NAME = "ROCKETBOX-RESERVE"
# RocksDB's memtables: the outbox sets their size and number, which bound what a reopen writes.
WRITE_BUFFERS = 2
WRITE_BUFFER_BYTES_DEFAULT = 32 * MIB
# RocksDB raises a smaller write buffer to 64 KiB; a larger one would only grow the reserve.
WRITE_BUFFER_BYTES_MIN = 64 * 1024
WRITE_BUFFER_BYTES_MAX = 1024 * MIB
# What a reopen writes beside the tables of its recovered log: the new info LOG (most of it
# the options it lists), OPTIONS and MANIFEST files, the tables' index and footer.
REOPEN_MARGIN_BYTES = 512 * 1024
INFO_LOGS_KEPT = 4
# A reopen that keeps failing (a disk something else keeps full) logs once in this long.
REOPEN_LOG_INTERVAL_S = 10.0
# With no reserve (or a small one), spools still wait for this much free space.
RESUME_FREE_BYTES_MIN = 8 * 1024 * 1024
SPACE_CHECK_INTERVAL_S = 0.5
# Zeros written at a time where posix_fallocate is not supported.
_ZEROS_CHUNK_BYTES = 1024 * 1024
_NO_SPACE_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"


def reserve_bytes_min(write_buffer_bytes: int) -> int:
    """The least reserve that holds what a reopen writes with these write buffers."""
    return WRITE_BUFFERS * write_buffer_bytes + REOPEN_MARGIN_BYTES


RESERVE_BYTES_DEFAULT = 2 * reserve_bytes_min(WRITE_BUFFER_BYTES_DEFAULT)


def check_sizes(reserve_bytes: int, write_buffer_bytes: int) -> None:
    """Refuse a write buffer out of bounds, or a reserve (other than none) too small for a
    reopen with it: OutboxConfigError naming the field and the limit."""
    if not WRITE_BUFFER_BYTES_MIN <= write_buffer_bytes <= WRITE_BUFFER_BYTES_MAX:
        raise OutboxConfigError(
            f"write_buffer_bytes={write_buffer_bytes} is out of bounds: "
            f"{WRITE_BUFFER_BYTES_MIN} .. {WRITE_BUFFER_BYTES_MAX}"
        )
    least = reserve_bytes_min(write_buffer_bytes)
    if reserve_bytes < 0 or 0 < reserve_bytes < least:
        raise OutboxConfigError(
            f"reserve_bytes={reserve_bytes} is too small: a reopen on a full disk may write "
            f"{least} bytes ({WRITE_BUFFERS} write buffers of write_buffer_bytes="
            f"{write_buffer_bytes}, and {REOPEN_MARGIN_BYTES} for its new files), so the "
            f"reserve must be at least reserve_bytes={least} (or lower write_buffer_bytes)"
        )


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
