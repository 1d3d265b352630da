"""Who holds a RocksDB outbox: the holder file beside its directory.

A RocksDB outbox admits one process (RocksDB's LOCK file). The sidecar holding one records itself
in ``<outbox dir>.holder.json`` (its pid, and the HOST:PORT of its OutboxAdminService), so that
``rocketbox outbox`` can ask that sidecar to make a change instead of failing on the lock, and
can say who holds the outbox when the holder does not answer.

The file is written atomically (a temporary file beside it, fsynced, renamed over) once the
sidecar serves, and removed at its clean close. A process killed before it could remove it
leaves a stale one: that is recognised by its pid no longer running, and the next sidecar to
open the outbox writes over it. Redis and MySQL outboxes are shared by many processes and have
no holder.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

HOLDER_SUFFIX = ".holder.json"
# A holder file is a few dozen bytes: anything larger is not one of ours.
HOLDER_FILE_BYTES_MAX = 4_096


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    # HOST:PORT of the holder's OutboxAdminService.
    admin_endpoint: str
    # What the process is, for messages: "rocketbox sidecar".
    process: str
    started_ms: int

    def alive(self) -> bool:
        """The pid still runs (on this machine: the outbox is a local directory)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process: it runs
            return True
        return True

    def describe(self) -> str:
        return f"{self.process} pid {self.pid}, admin at {self.admin_endpoint}"


def holder_path(outbox_dir: Path) -> Path:
    """The holder file of the RocksDB outbox in ``outbox_dir``: beside it, not in it (the
    directory is RocksDB's)."""
    return outbox_dir.with_name(outbox_dir.name + HOLDER_SUFFIX)


def rocksdb_dir(url: str) -> Path | None:
    """The directory of a ``rocksdb://`` URL; None for the other backends (no holder)."""
    if urlsplit(url).scheme.lower() != "rocksdb":
        return None
    from outbox.backends.rocksdb.store import rocksdb_path  # noqa: PLC0415 - imports rocksdict

    return rocksdb_path(url)


def write_holder(outbox_dir: Path, holder: Holder) -> None:
    """Record ``holder`` atomically: a reader sees the old file or the new one, never a part."""
    path = holder_path(outbox_dir)
    scratch = path.with_name(f"{path.name}.{holder.pid}.tmp")
    with scratch.open("w", encoding="utf-8") as f:
        json.dump(asdict(holder), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(scratch, path)


def remove_holder(outbox_dir: Path, pid: int) -> None:
    """Remove the holder file if it names ``pid``: another process's is left alone."""
    found = read_holder(outbox_dir)
    if found is not None and found.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            holder_path(outbox_dir).unlink()


def read_holder(outbox_dir: Path) -> Holder | None:
    """The recorded holder, alive or not; None when there is no readable holder file."""
    try:
        with holder_path(outbox_dir).open("rb") as f:
            raw = f.read(HOLDER_FILE_BYTES_MAX + 1)
    except OSError:
        return None
    if len(raw) > HOLDER_FILE_BYTES_MAX:
        return None
    try:
        data = json.loads(raw)
        return Holder(
            pid=int(data["pid"]),
            admin_endpoint=str(data["admin_endpoint"]),
            process=str(data["process"]),
            started_ms=int(data["started_ms"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
