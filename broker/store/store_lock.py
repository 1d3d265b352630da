"""The store directory's lock: one writer process per directory (the commitlog has exactly one
writer). An ``flock`` on a lock file, released by the kernel when the process dies, so a crash
never leaves the directory locked; the file itself stays."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from broker.store.errors import StoreLockedError
from rocketbox_api.lock_holder import held_by


class StoreLock:
    def __init__(self, lock_file_path: Path, store_path_root_dir: Path) -> None:
        self._lock_file_path = lock_file_path
        self._store_path_root_dir = store_path_root_dir
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock (again: a no-op); StoreLockedError naming the process that holds it."""
        if self._fd >= 0:
            return
        self._store_path_root_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_file_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(fd)
            raise StoreLockedError(
                f"{self._store_path_root_dir} is in use by another process"
                f"{held_by(self._lock_file_path)}: one broker per store directory"
            ) from e
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing releases the flock
            self._fd = -1
