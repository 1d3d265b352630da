"""Small JSON state files (topics, timer and transaction progress), replaced atomically.

Written to a temporary file, fsynced, renamed over the old one, and the directory fsynced: a
crash leaves the old state or the new one, never a torn mix.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.background import BackgroundTasks
from rocketbox_api.deadlines import wait_event


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    with temp.open("w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it does not exist."""
    if not path.exists():
        return None
    return json.loads(path.read_text())


class StateWriter:
    """Writes a state file every ``interval_s`` while ``dirty``, and once more at stop.

    ``snapshot`` runs on the event loop (where the state changes), so it sees a consistent
    state; only the file write runs in a worker thread. Writes never overlap and ``stop`` lets a
    write under way finish before the final one, so the newest snapshot always lands last.
    (Cancelling a loop that awaits ``to_thread`` would not stop the thread: two writes of the
    same temporary file could then race, and an older snapshot could overwrite the newest.)
    """

    def __init__(self, path: Path, snapshot: Callable[[], Any], interval_s: float) -> None:
        self._path = path
        self._snapshot = snapshot
        self._interval_s = interval_s
        self._write_lock = threading.Lock()
        self._stopping: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.dirty = False

    def start(self, tasks: BackgroundTasks) -> None:
        self._stopping = asyncio.Event()
        self._task = tasks.start(self._run(), f"state-writer {self._path.name}")

    async def _run(self) -> None:
        assert self._stopping is not None
        while not self._stopping.is_set():
            await wait_event(self._stopping, self._interval_s)
            await self.flush()

    async def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            data = self._snapshot()
            await asyncio.to_thread(self._write, data)

    def _write(self, data: Any) -> None:
        with self._write_lock:
            write_json_atomic(self._path, data)

    async def stop(self) -> None:
        if self._stopping is not None and self._task is not None:
            self._stopping.set()
            # A writer that died was reported by the broker's TaskGroup: not raised again here.
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.flush()
