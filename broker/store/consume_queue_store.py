"""Every consume queue of the store, by topic and queue id (RocketMQ's consumeQueueTable)."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

from broker.store.consume_queue import ConsumeQueue, check_topic, is_valid_topic, parse_queue_id

__all__ = ["ConsumeQueueStore"]

LOG = logging.getLogger(__name__)


class ConsumeQueueStore:
    """Every consume queue under the consumequeue root (RocketMQ's consumeQueueTable).

    The table is copy-on-write: the dispatcher adds queues under a lock, readers look them up
    without one and always see a complete snapshot.
    """

    def __init__(self, store_path_root: Path, mapped_file_size_entries: int) -> None:
        self.store_path_root = store_path_root
        self.mapped_file_size_entries = mapped_file_size_entries
        self._table: Mapping[str, Mapping[int, ConsumeQueue]] = {}
        self._lock = threading.Lock()  # guards replacing _table

    def load(self) -> None:
        """Map every <topic>/<queue_id> directory; other names are logged and left alone."""
        assert not self._table, "load() runs once, before any queue is created"
        table: dict[str, dict[int, ConsumeQueue]] = {}
        try:
            topic_dirs = (
                sorted(self.store_path_root.iterdir()) if self.store_path_root.is_dir() else []
            )
            for topic_dir in topic_dirs:
                if not (topic_dir.is_dir() and is_valid_topic(topic_dir.name)):
                    LOG.warning("ignoring %s: not a topic directory", topic_dir)
                    continue
                for queue_dir in sorted(topic_dir.iterdir()):
                    queue_id = parse_queue_id(queue_dir.name)
                    if queue_id is None or not queue_dir.is_dir():
                        LOG.warning("ignoring %s: not a queue directory", queue_dir)
                        continue
                    cq = self._new_queue(topic_dir.name, queue_id)
                    table.setdefault(topic_dir.name, {})[queue_id] = cq
                    cq.load()
        except BaseException:
            for queues in table.values():
                for cq in queues.values():
                    cq.close()
            raise
        with self._lock:
            self._table = table

    def recover(self) -> None:
        for cq in self._queues():
            cq.recover()

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self._table.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.find(topic, queue_id)
        if cq is not None:
            return cq
        with self._lock:
            queues = self._table.get(topic, {})
            cq = queues.get(queue_id)
            if cq is None:
                cq = self._new_queue(topic, queue_id)
                cq.load()  # nothing on disk unless load() was skipped; then keep what is there
                cq.recover()
                self._table = {**self._table, topic: {**queues, queue_id: cq}}
            return cq

    def topics(self) -> list[str]:
        return sorted(self._table)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._table.get(topic, {}))

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self._queues()), default=-1)

    def is_empty(self) -> bool:
        """No queue has an entry on disk: the store then rebuilds them all from the commitlog."""
        return all(cq.max_physic_offset < 0 for cq in self._queues())

    def truncate_dirty(self, phy_offset: int) -> int:
        return sum(cq.truncate_dirty_logic_files(phy_offset) for cq in self._queues())

    def delete_expired(self, min_commit_log_offset: int) -> list[Path]:
        return [p for cq in self._queues() for p in cq.delete_expired_file(min_commit_log_offset)]

    def correct_min_offset(self, min_commit_log_offset: int) -> None:
        for cq in self._queues():
            cq.correct_min_offset(min_commit_log_offset)

    def flush_all(self) -> None:
        for cq in self._queues():
            cq.flush()

    def close(self) -> None:
        for cq in self._queues():
            cq.close()

    def destroy_topic(self, topic: str) -> None:
        check_topic(topic)  # the name becomes a path handed to rmtree
        with self._lock:
            queues = self._table.get(topic, {})
            self._table = {t: q for t, q in self._table.items() if t != topic}
        for cq in queues.values():
            cq.destroy()
        topic_dir = self.store_path_root / topic
        if topic_dir.is_dir():
            shutil.rmtree(topic_dir)

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, self.store_path_root, self.mapped_file_size_entries)

    def _queues(self) -> list[ConsumeQueue]:
        return [cq for queues in self._table.values() for cq in queues.values()]
