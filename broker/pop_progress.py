"""The pop consumers' progress: every (group, topic, queue)'s QueueState, and its persistence in
``config/consumer_offsets.json`` (each queue's ``ack_offset`` and the offsets done out of order
above it), rewritten at most every PROGRESS_FLUSH_INTERVAL_S while something changed.

A queue's state is made on first use from what was saved, or, for a group new to the queue, from
the first message still stored (nothing is skipped). Queues saved but not touched since the start
are written back as they were. In-flight state is not persisted (see pop_message.py).

A broadcast group's members each have their own progress under the key ``<group>@<member id>``
(broadcast_members.py), in the same file and format; the members table is saved beside it under
``"@broadcast"``. A clustering group's entries are as before, so older files read unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.background import BackgroundTasks
from broker.broadcast_members import MEMBERS_KEY, BroadcastMembers
from broker.pop_state import QueueState
from broker.state_file import StateWriter, read_json
from broker.store.message_store import DefaultMessageStore

OFFSETS_FILE_NAME = "consumer_offsets.json"
PROGRESS_FLUSH_INTERVAL_S = 1.0

# group -> topic -> queue id -> {"ack": offset, "done": [offsets]}
Saved = dict[str, dict[str, dict[str, dict[str, Any]]]]


class PopProgress:
    def __init__(
        self,
        store: DefaultMessageStore,
        config_dir: Path,
        connected: Callable[[str], bool] = lambda _client_id: False,
    ) -> None:
        self._store = store
        self._path = config_dir / OFFSETS_FILE_NAME
        self._queues: dict[tuple[str, str, int], QueueState] = {}
        self._saved: Saved = {}
        self._writer = StateWriter(self._path, self._snapshot, PROGRESS_FLUSH_INTERVAL_S)
        self.members = BroadcastMembers(
            connected, self.forget, self.changed, lambda: time.time_ns() // 1_000_000
        )

    def start(self, tasks: BackgroundTasks) -> None:
        raw = read_json(self._path)
        self._saved = raw if isinstance(raw, dict) else {}
        self.members.load(self._saved.pop(MEMBERS_KEY, None))
        self._writer.start(tasks)

    async def stop(self) -> None:
        await self._writer.stop()

    def changed(self) -> None:
        """Some queue's ack_offset or done set changed: written with the next flush."""
        self._writer.dirty = True

    def _snapshot(self) -> Saved:
        data: Saved = {}
        for (group, topic, queue_id), qs in list(self._queues.items()):
            data.setdefault(group, {}).setdefault(topic, {})[str(queue_id)] = {
                "ack": qs.ack_offset,
                "done": sorted(qs.done),
            }
        for saved_group, topics in self._saved.items():  # queues not touched since the start
            for saved_topic, queues in topics.items():
                for saved_queue, offset in queues.items():
                    by_queue = data.setdefault(saved_group, {}).setdefault(saved_topic, {})
                    by_queue.setdefault(saved_queue, offset)
        members = self.members.snapshot()
        if members:
            data[MEMBERS_KEY] = members  # the members table, beside the progress
        return data

    def forget(self, key: str) -> None:
        """Drop every queue's progress of ``key`` (a broadcast member forgotten)."""
        for k in [k for k in self._queues if k[0] == key]:
            del self._queues[k]
        self._saved.pop(key, None)

    def saved(self) -> Saved:
        """Every queue's progress, as the file holds it (what a slave copies)."""
        return self._snapshot()

    def sync_from(self, master: Saved) -> None:
        """A slave takes its master's progress: each queue moves forward to it, never back (what
        was acked here while the master was away stays acked). The broadcast members table is
        the master's as it is, so a member's progress keeps its owner on the slave."""
        members = master.get(MEMBERS_KEY)
        if isinstance(members, dict):
            self.members.load(members)
        for group, topics in master.items():
            if group == MEMBERS_KEY:
                continue
            for topic, queues in topics.items():
                for queue_id, saved in queues.items():
                    qs = self.state(group, topic, int(queue_id))
                    qs.advance_to(int(saved["ack"]), (int(o) for o in saved["done"]))
        self.changed()

    def state(self, group: str, topic: str, queue_id: int) -> QueueState:
        key = (group, topic, queue_id)
        qs = self._queues.get(key)
        if qs is None:
            saved = self._saved.get(group, {}).get(topic, {}).get(str(queue_id))
            # A new group consumes from the first message still stored (nothing is skipped).
            start = self._store.get_min_offset_in_queue(topic, queue_id)
            if saved is None:
                qs = QueueState(start)
            else:
                ack = max(start, int(saved["ack"]))
                qs = QueueState(ack, {int(o) for o in saved["done"] if int(o) >= ack})
            self._queues[key] = qs
        return qs

    def find(self, group: str, topic: str, queue_id: int) -> QueueState | None:
        """The queue's state if it was used in this run (nothing is made)."""
        return self._queues.get((group, topic, queue_id))

    def consume_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.state(group, topic, queue_id).ack_offset

    def inflight_count(self, group: str, topic: str, queue_id: int) -> int:
        qs = self._queues.get((group, topic, queue_id))
        return len(qs.inflight) if qs is not None else 0

    def topics_of(self, group: str) -> list[str]:
        live = {t for (g, t, _) in self._queues if g == group}
        return sorted(live | set(self._saved.get(group, {})))
