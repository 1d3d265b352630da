"""A small disk for an outbox: a tmpfs of ``size_bytes`` mounted on ``mount_dir``, to fill up.

``start`` (or ``mount``) mounts it, which needs root (CAP_SYS_ADMIN): a refused mount is a
``DiskError`` saying so. ``fill`` writes a filler file until the filesystem answers ENOSPC, down
to the last byte, so that the next write of anyone (an outbox's) fails with ENOSPC; ``free``
removes the filler. ``stop`` (or ``unmount``, or leaving the ``with`` block) unmounts it; a mount
still in use by a process that was not stopped is detached lazily, so that nothing stays mounted
on the directory either way.

tmpfs is memory: SIZE_BYTES_MAX keeps a chaos run from taking much of it.
"""

from __future__ import annotations

import abc
import errno
import os
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self

SIZE_BYTES_MIN = 64 * 1024
SIZE_BYTES_MAX = 1024 * 1024 * 1024
# The filler is written in chunks this large, halved on ENOSPC down to one byte.
FILL_CHUNK_BYTES = 1024 * 1024
MOUNT_DEADLINE_S = 30.0
FILLER_NAME = ".chaos-filler"


class DiskError(RuntimeError):
    """The small disk could not be mounted or unmounted."""


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            args, capture_output=True, text=True, timeout=MOUNT_DEADLINE_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DiskError(f"{' '.join(args)} failed: {e}") from e


class MountedDisk(abc.ABC):
    """A disk the suite mounts for a scenario: started and stopped as its servers are."""

    @abc.abstractmethod
    def mount(self) -> Self: ...

    @abc.abstractmethod
    def unmount(self) -> None: ...

    def start(self) -> Self:
        return self.mount()

    def stop(self) -> None:
        self.unmount()

    def __enter__(self) -> Self:
        return self.mount()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unmount()


class SmallDisk(MountedDisk):
    def __init__(self, mount_dir: Path, size_bytes: int) -> None:
        if not SIZE_BYTES_MIN <= size_bytes <= SIZE_BYTES_MAX:
            raise ValueError(
                f"size_bytes must be within {SIZE_BYTES_MIN}..{SIZE_BYTES_MAX}, not {size_bytes}"
            )
        self.mount_dir = mount_dir
        self.size_bytes = size_bytes
        self.filler = mount_dir / FILLER_NAME
        self.mounted = False

    def mount(self) -> Self:
        if self.mounted:
            raise DiskError(f"{self.mount_dir} is already mounted by this SmallDisk")
        self.mount_dir.mkdir(parents=True, exist_ok=True)
        if os.path.ismount(self.mount_dir):
            raise DiskError(f"{self.mount_dir} is a mount point already: not mounting over it")
        done = _run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes},mode=0755",
             "chaos-small-disk", str(self.mount_dir)]
        )  # fmt: skip
        if done.returncode != 0:
            raise DiskError(
                f"mounting a {self.size_bytes}-byte tmpfs on {self.mount_dir} was refused "
                f"(it needs root with CAP_SYS_ADMIN): {done.stderr.strip()}"
            )
        self.mounted = True
        return self

    def unmount(self) -> None:
        if not self.mounted:
            return
        done = _run(["umount", str(self.mount_dir)])
        if done.returncode != 0:
            # Busy: a process still has a file open on it. Detached now, freed when it closes.
            lazy = _run(["umount", "--lazy", str(self.mount_dir)])
            if lazy.returncode != 0:
                raise DiskError(
                    f"cannot unmount {self.mount_dir}: {done.stderr.strip()}; "
                    f"lazily: {lazy.stderr.strip()}"
                )
        self.mounted = False

    def fill(self) -> int:
        """Write the filler until ENOSPC, to the last byte; the bytes it added."""
        self._require_mounted()
        written = 0
        chunk = bytes(FILL_CHUNK_BYTES)
        size = FILL_CHUNK_BYTES
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while size:
                try:
                    written += os.write(fd, chunk[:size])
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    size //= 2
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        """Remove the filler: the room it took is free again."""
        self._require_mounted()
        self.filler.unlink(missing_ok=True)

    def free_bytes(self) -> int:
        """The bytes still free on it."""
        self._require_mounted()
        stats = os.statvfs(self.mount_dir)
        return stats.f_bavail * stats.f_frsize

    def _require_mounted(self) -> None:
        if not self.mounted:
            raise DiskError(f"the small disk on {self.mount_dir} is not mounted")
