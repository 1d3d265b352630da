"""Delayed messages: stored at once, delivered to their topic when their time comes.

A delayed message is put in the commitlog under the system topic ``SCHEDULE_TOPIC_XXXX`` (queue
0) with its real topic, queue and delivery time as properties, so it is as durable as any other
message the moment the send is answered. This service keeps the undelivered ones in a heap by
delivery time; when one is due it puts a copy under the real topic (same message id) and records
the schedule queue offset as delivered.

Progress (``config/timer_progress.json``): a low watermark below which every schedule entry is
delivered, plus the delivered offsets above it. It is written at most every
``PROGRESS_FLUSH_INTERVAL_S``; a crash may therefore forget recent deliveries, so before putting
a copy the service asks the index whether that message id is already in the real topic (at
least once becomes exactly once). On start the heap is rebuilt from the schedule queue above the
watermark: the timer survives restarts.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import threading
import time
from pathlib import Path

from broker.background import BackgroundTasks
from broker.state_file import StateWriter, read_json
from broker.store.codec.check import DispatchRequest
from broker.store.codec.message import PROPERTY_TIMER_DELIVER_MS, MessageExtBrokerInner
from broker.store.message_store import DefaultMessageStore
from broker.system_topic import park, real_topic_of, unparked_copy
from rocketbox_api.deadlines import wait_event

LOG = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SCHEDULE_QUEUE_ID = 0
PROGRESS_FILE_NAME = "timer_progress.json"
PROGRESS_FLUSH_INTERVAL_S = 1.0
IDLE_WAIT_S = 1.0
# A due message whose copy could not be stored is tried again this much later.
REDELIVER_DELAY_MS = 1_000


class TimerMessageService:
    def __init__(self, store: DefaultMessageStore, config_dir: Path, pending_max: int) -> None:
        self._store = store
        self._progress_path = config_dir / PROGRESS_FILE_NAME
        self._pending_max = pending_max
        self._lock = threading.Lock()  # the heap is fed by the dispatcher thread
        self._heap: list[tuple[int, int, int, int]] = []  # deliver_ms, queue_offset, phy, size
        self._pending: set[int] = set()
        self._watermark = 0
        self._delivered: set[int] = set()
        self._progress = StateWriter(
            self._progress_path, self._progress_snapshot, PROGRESS_FLUSH_INTERVAL_S
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.delivered_count = 0

    # -- the send side -------------------------------------------------------------------
    def wrap(self, inner: MessageExtBrokerInner, real_queue_id: int) -> None:
        """Turn a message for its topic into the schedule copy that waits for its time."""
        park(inner, SCHEDULE_TOPIC, SCHEDULE_QUEUE_ID, real_queue_id)

    @property
    def is_full(self) -> bool:
        return len(self._pending) >= self._pending_max

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # -- life cycle ----------------------------------------------------------------------
    async def start(self, tasks: BackgroundTasks) -> None:
        self._loop = asyncio.get_running_loop()
        self._load_progress()
        # Listen before scanning: an entry dispatched meanwhile is deduplicated by offset.
        self._store.add_message_arriving_listener(self._on_dispatch)
        self._scan_schedule_queue()
        self._task = tasks.start(self._run(), "timer-message-service")
        self._progress.start(tasks)
        LOG.info("timer: %s delayed messages pending", len(self._pending))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._progress.stop()

    def _load_progress(self) -> None:
        raw = read_json(self._progress_path)
        if raw is not None:
            self._watermark = int(raw["watermark"])
            self._delivered = {int(x) for x in raw["delivered"]}

    def _progress_snapshot(self) -> dict[str, object]:
        with self._lock:
            return {"watermark": self._watermark, "delivered": sorted(self._delivered)}

    def _scan_schedule_queue(self) -> None:
        cq = self._store.consume_queue_store.find(SCHEDULE_TOPIC, SCHEDULE_QUEUE_ID)
        if cq is None:
            return
        # Offsets below the queue's first (removed by retention) count as delivered.
        self._watermark = max(self._watermark, cq.min_offset_in_queue)
        for e in cq.scan(self._watermark):
            if e.queue_offset in self._delivered:
                continue
            msg = self._store.look_message_by_offset(e.phy_offset, e.size)
            if msg is None:
                continue
            deliver_ms = int(msg.properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
            self._push(deliver_ms, e.queue_offset, e.phy_offset, e.size)

    # -- the dispatcher thread -----------------------------------------------------------
    def _on_dispatch(self, req: DispatchRequest) -> None:
        if req.topic != SCHEDULE_TOPIC:
            return
        deliver_ms = int(req.properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
        if self._push(deliver_ms, req.consume_queue_offset, req.commit_log_offset, req.msg_size):
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._wake.set)

    def _push(self, deliver_ms: int, queue_offset: int, phy: int, size: int) -> bool:
        """Add an entry; True when it became the earliest (the timer must wake sooner)."""
        with self._lock:
            if queue_offset in self._pending or queue_offset in self._delivered:
                return False
            self._pending.add(queue_offset)
            heapq.heappush(self._heap, (deliver_ms, queue_offset, phy, size))
            return self._heap[0][1] == queue_offset

    # -- delivery ------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            now_ms = time.time_ns() // 1_000_000
            due: list[tuple[int, int, int, int]] = []
            with self._lock:
                while self._heap and self._heap[0][0] <= now_ms:
                    due.append(heapq.heappop(self._heap))
                wait_s = (self._heap[0][0] - now_ms) / 1000 if self._heap else IDLE_WAIT_S
            for entry in due:
                await self._deliver(entry)
            if due:
                continue
            self._wake.clear()
            await wait_event(self._wake, min(max(wait_s, 0.0), IDLE_WAIT_S))

    async def _deliver(self, entry: tuple[int, int, int, int]) -> None:
        deliver_ms, queue_offset, phy, size = entry
        msg = self._store.look_message_by_offset(phy, size)
        if msg is None:  # removed by retention before its time: nothing to deliver
            LOG.error("timer: schedule entry %s is gone from the commitlog", queue_offset)
            self._mark_delivered(queue_offset)
            return
        real_topic = real_topic_of(msg)
        msg_id = msg.msg_id
        if msg_id and self._store.look_message_by_id(msg_id, real_topic) is not None:
            self._mark_delivered(queue_offset)  # delivered before a crash forgot to record it
            return
        copy = unparked_copy(msg)
        [result] = await self._store.async_put_messages([copy])
        if result.ok:
            self._mark_delivered(queue_offset)
            self.delivered_count += 1
            LOG.debug(
                "timer: delivered %s to %s", msg_id, real_topic,
                extra={"message_id": msg_id, "topic": real_topic},
            )  # fmt: skip
        else:
            LOG.warning(
                "timer: delivering %s failed (%s); retrying", msg_id, result.status.value,
                extra={"message_id": msg_id, "topic": real_topic},
            )  # fmt: skip
            with self._lock:
                self._pending.discard(queue_offset)
            self._push(deliver_ms + REDELIVER_DELAY_MS, queue_offset, phy, size)

    def _mark_delivered(self, queue_offset: int) -> None:
        with self._lock:
            self._pending.discard(queue_offset)
            self._delivered.add(queue_offset)
            # Advance the watermark over the delivered prefix so the set stays small.
            while self._watermark in self._delivered:
                self._delivered.remove(self._watermark)
                self._watermark += 1
            self._progress.dirty = True
