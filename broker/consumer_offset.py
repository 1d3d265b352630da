"""Committed offsets of offset-based (pull) consumers (RocketMQ's ConsumerOffsetManager).

A pull consumer reads a queue from an offset it chooses and commits how far it got
(UpdateOffset); after a restart it asks for the committed offset (GetOffset) and resumes there.
Offsets live in memory and are written to ``config/pull_offsets.json`` at most every
``FLUSH_INTERVAL_S`` and at stop: a broker crash may lose the last second of commits, so a
consumer re-reads at most that much (at least once).
"""

from __future__ import annotations

from pathlib import Path

from broker.background import BackgroundTasks
from broker.state_file import StateWriter, read_json

OFFSETS_FILE_NAME = "pull_offsets.json"
FLUSH_INTERVAL_S = 1.0


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path) -> None:
        self._path = config_dir / OFFSETS_FILE_NAME
        # "group@topic" -> queue id (as text, for JSON) -> offset
        self._offsets: dict[str, dict[str, int]] = {}
        self._writer = StateWriter(
            self._path, lambda: {k: dict(v) for k, v in self._offsets.items()}, FLUSH_INTERVAL_S
        )

    async def start(self, tasks: BackgroundTasks) -> None:
        raw = read_json(self._path)
        if isinstance(raw, dict):
            self._offsets = {k: {q: int(o) for q, o in v.items()} for k, v in raw.items()}
        self._writer.start(tasks)

    async def stop(self) -> None:
        await self._writer.stop()

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._offsets.setdefault(f"{group}@{topic}", {})[str(queue_id)] = offset
        self._writer.dirty = True

    def saved(self) -> dict[str, dict[str, int]]:
        return {k: dict(v) for k, v in self._offsets.items()}

    def sync_from(self, master: dict[str, dict[str, int]]) -> None:
        """A slave takes its master's pull offsets (each moves forward, never back)."""
        for key, queues in master.items():
            mine = self._offsets.setdefault(key, {})
            for queue_id, offset in queues.items():
                mine[queue_id] = max(mine.get(queue_id, 0), int(offset))
        self._writer.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get(f"{group}@{topic}", {}).get(str(queue_id))
