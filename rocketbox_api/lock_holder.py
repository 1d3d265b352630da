"""Who holds a lock file: a second process refused a directory is told which process has it.

``lock_holders`` names the processes holding a lock (flock or fcntl) on a file (the broker's store
lock, RocksDB's LOCK), read from ``/proc/locks``: empty where that file is missing (not Linux),
so the refusal then names no one rather than failing.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC_LOCKS = Path("/proc/locks")


def lock_holders(path: Path) -> list[int]:
    """The process ids holding a lock (flock or fcntl) on ``path``; [] when none does, the file
    is missing, or ``/proc/locks`` cannot be read."""
    try:
        st = path.stat()
        table = PROC_LOCKS.read_text()
    except OSError:
        return []
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in table.splitlines():
        # "1: POSIX  ADVISORY  WRITE 3786 fe:00:1466769 0 EOF"; "1: -> FLOCK …" is a waiter.
        fields = line.split()
        if len(fields) >= 6 and fields[1] != "->" and fields[5] == device:
            pids.append(int(fields[4]))
    return sorted(set(pids))


def held_by(path: Path) -> str:
    """``" (pid N)"`` naming the lock's holders, or "" when they cannot be told."""
    pids = lock_holders(path)
    if not pids:
        return ""
    return f" (pid {', '.join(str(p) for p in pids)})"
