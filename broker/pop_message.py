"""Pop consumption (RocketMQ 5's pop / ack / change-invisible-time), over the consume queues.

Per consumer group, topic and queue the service keeps (pop_state.QueueState):
- ``ack_offset``: every queue offset below it is done (acked, filtered out, or dead-lettered).
  This is the group's consume progress.
- ``done``: offsets at or above ``ack_offset`` that are done out of order (at most the scan
  window). Both are persisted (pop_progress.py), so nothing acked comes back.
- ``inflight``: offsets delivered and not done, with their receipt, attempt and invisibility.
An offset at or above ``ack_offset`` that is neither is available. At most
INFLIGHT_WINDOW_ENTRIES offsets from ``ack_offset`` on are handed out (a slow message holds the
window, as RocketMQ's pop in-flight threshold does). In-flight messages whose invisibility expired
are handed out again, with ``delivery_attempt`` + 1; a message that would exceed the group's
maximum attempts goes to ``%DLQ%<group>`` instead (dead_letter.py).

Concurrent groups read each queue from a cursor, ``scan_offset`` (every offset below it is done or
in flight), and find expired in-flight messages on a heap ordered by invisibility: a receive's
work is the messages it hands out, not everything in flight before them (re-scanning from
``ack_offset`` cost a receive up to the window's 2,048 entries a queue under a backlog).

FIFO groups (``consume_message_orderly``): a message group's next message is not handed out while
an earlier one of that group is in flight; different message groups proceed in parallel. Their
receive scans the window from ``ack_offset``, in offset order, as that rule needs.

In-flight state is kept in memory: after a broker restart every message from ``ack_offset`` on is
available again (at least once, as RocketMQ promises). A receive with nothing to hand out waits
for an arrival (arrival.py wakes one waiting receive of the group; one that fills its batch wakes
the next), or until the earliest invisibility expires. A broadcast group's member has all this
under its own key (broadcast_members.py), which ack and the others then take as ``group``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.arrival import MessageArrivalNotifier
from broker.background import BackgroundTasks
from broker.dead_letter import dead_letter
from broker.group_config import GroupConfig
from broker.pop_progress import PopProgress
from broker.pop_state import (
    InFlight,
    InvalidReceiptHandleError,
    QueueState,
    make_handle,
    parse_handle,
)
from broker.store.codec.message import (
    PROPERTY_SHARDING_KEY,
    MessageExt,
    tags_string_to_tags_code,
)
from broker.store.consume_queue import ConsumeQueue, CqEntry
from broker.store.message_store import DefaultMessageStore
from broker.topic_config import TopicConfigManager

LOG = logging.getLogger(__name__)

# Offsets from ack_offset on that may be handed out: bounds the messages in flight per queue and
# group (and so the memory a consumer that never acks can hold), and a FIFO receive's scan.
INFLIGHT_WINDOW_ENTRIES = 2_048
# The window is read this many entries at a time: a receive that fills its batch early stops
# early (reading the whole window as one list cost a fifth of the broker's CPU under load).
SCAN_CHUNK_ENTRIES = 64


@dataclass(slots=True)
class _Take:
    """One receive's request, shared by its pass over the queues."""

    group: GroupConfig
    # Whose progress: the group's name, or a broadcast member's key (broadcast_members.py).
    key: str
    queue_id: int
    tags: frozenset[str] | None
    codes: set[int] | None
    batch_max: int
    invisible_ms: int
    now: int
    deliveries: list[Delivery]


@dataclass(slots=True)
class Delivery:
    message: MessageExt
    receipt_handle: str
    attempt: int
    invisible_until_ms: int


class PopMessageService:
    def __init__(
        self,
        store: DefaultMessageStore,
        topics: TopicConfigManager,
        config_dir: Path,
        arrivals: MessageArrivalNotifier,
        connected: Callable[[str], bool] = lambda _client_id: False,
        dead_letter_enable: bool = True,  # False on a SLAVE: see _hand_out
    ) -> None:
        self._dead_letter_enable = dead_letter_enable
        self._arrivals = arrivals
        self._store = store
        self._topics = topics
        self.progress = PopProgress(store, config_dir, connected)
        self._next_queue: dict[tuple[str, str], int] = {}

    # -- life cycle ----------------------------------------------------------------------
    async def start(self, tasks: BackgroundTasks) -> None:
        self.progress.start(tasks)

    async def stop(self) -> None:
        self._arrivals.wake_all()
        await self.progress.stop()

    def reset_offset(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        """Start the group over at ``queue_offset`` in this queue (``rocketbox group
        reset-offset``): nothing in flight or acked out of order is remembered. Clamped to the
        queue's offsets still stored."""
        low = self._store.get_min_offset_in_queue(topic, queue_id)
        high = self._store.get_max_offset_in_queue(topic, queue_id)
        qs = self.progress.state(group, topic, queue_id)
        qs.ack_offset = min(max(queue_offset, low), high)
        qs.done.clear()
        qs.inflight.clear()
        qs.restart_scan()
        self.progress.changed()
        self._arrivals.notify(topic)
        LOG.info("group %s: %s queue %s reset to offset %s", group, topic, queue_id, qs.ack_offset)

    # -- receive ---------------------------------------------------------------------------
    async def receive(
        self,
        group: GroupConfig,
        topic: str,
        queue_ids: Sequence[int],
        tags: frozenset[str] | None,
        batch_max: int,
        invisible_ms: int,
        poll_ms: int,
        key: str | None = None,
    ) -> list[Delivery]:
        """Up to ``batch_max`` messages, waiting up to ``poll_ms`` for the first to arrive.
        ``key``: a broadcast member's progress key (the group's own progress when None); an
        arrival wakes one waiting receive per key, so every member of a broadcast group."""
        key = group.group_name if key is None else key
        deadline = time.monotonic() + poll_ms / 1000
        while True:
            deliveries, next_expiry_ms = await self._take(
                group, key, topic, queue_ids, tags, batch_max, invisible_ms
            )
            if len(deliveries) >= batch_max:
                # A full batch: more may be there for the group's next waiting receive.
                self._arrivals.notify(topic, key)
            remaining_s = deadline - time.monotonic()
            if deliveries or remaining_s <= 0 or self._arrivals.closing:
                return deliveries
            wait_s = remaining_s
            if next_expiry_ms is not None:
                wait_s = min(wait_s, max(0.0, (next_expiry_ms - _now_ms()) / 1000) + 0.001)
            await self._arrivals.wait(topic, wait_s, key)

    async def _take(
        self,
        group: GroupConfig,
        key: str,
        topic: str,
        queue_ids: Sequence[int],
        tags: frozenset[str] | None,
        batch_max: int,
        invisible_ms: int,
    ) -> tuple[list[Delivery], int | None]:
        """One pass over the queues; returns the deliveries and the earliest invisibility
        expiry seen (when to look again if there was nothing)."""
        now = _now_ms()
        codes = {tags_string_to_tags_code(t) for t in tags} if tags is not None else None
        deliveries: list[Delivery] = []
        next_expiry: int | None = None
        # Each receive starts one queue further on: starting at queue 0 every time starved the
        # high queues under a backlog (seconds of latency on queue 7, milliseconds on queue 0).
        first = self._next_queue.get((key, topic), 0) % max(1, len(queue_ids))
        self._next_queue[(key, topic)] = first + 1
        for queue_id in [*queue_ids[first:], *queue_ids[:first]]:
            if len(deliveries) >= batch_max:
                break
            take = _Take(
                group, key, queue_id, tags, codes, batch_max, invisible_ms, now, deliveries
            )
            expiry = await self._take_from_queue(topic, take)
            if expiry is not None:
                next_expiry = expiry if next_expiry is None else min(next_expiry, expiry)
        return deliveries, next_expiry

    async def _take_from_queue(self, topic: str, take: _Take) -> int | None:
        qs = self.progress.state(take.key, topic, take.queue_id)
        cq = self._store.consume_queue_store.find(topic, take.queue_id)
        if cq is None:
            return None
        if qs.ack_offset < cq.min_offset_in_queue:  # retention removed what was left
            qs.ack_offset = cq.min_offset_in_queue
            qs.done = {o for o in qs.done if o >= qs.ack_offset}
            qs.scan_offset = max(qs.scan_offset, qs.ack_offset)
        if take.group.consume_message_orderly:
            return await self._take_orderly(cq, qs, take)
        return await self._take_concurrently(cq, qs, take)

    async def _take_concurrently(self, cq: ConsumeQueue, qs: QueueState, take: _Take) -> int | None:
        """Expired in-flight messages first (oldest invisibility first), then new ones from the
        cursor, within the in-flight window."""
        deliveries = take.deliveries
        while len(deliveries) < take.batch_max:
            expired = qs.pop_expired(take.now)
            if expired is None:
                break
            offset, flight = expired
            msg = self._store.look_message_by_offset(flight.phy_offset, flight.size)
            if msg is None:  # gone (retention)
                qs.mark_done(offset)
                self.progress.changed()
                continue
            await self._hand_out(qs, take, offset, flight.phy_offset, flight.size, msg, flight)
        window_end = qs.ack_offset + INFLIGHT_WINDOW_ENTRIES
        if len(deliveries) < take.batch_max and qs.scan_offset < window_end:
            for entry in _window(cq, qs.scan_offset, window_end):
                if len(deliveries) >= take.batch_max:
                    break
                offset = entry.queue_offset
                if qs.skip_blanks(offset, qs.scan_offset):
                    self.progress.changed()
                qs.scan_offset = offset + 1
                if offset in qs.done or offset in qs.inflight:
                    continue  # acked out of order before a restart; taken by a FIFO receive
                msg = None
                if take.codes is None or entry.tag_code in take.codes:
                    msg = self._store.look_message_by_offset(entry.phy_offset, entry.size)
                if msg is None or (take.tags is not None and msg.tags not in take.tags):
                    # Gone, or not for this group's filter: done, as the proxy does.
                    qs.mark_done(offset)
                    self.progress.changed()
                    continue
                await self._hand_out(qs, take, offset, entry.phy_offset, entry.size, msg, None)
        return qs.next_expiry_ms()

    async def _take_orderly(self, cq: ConsumeQueue, qs: QueueState, take: _Take) -> int | None:
        """The window from ack_offset in offset order: a message group's next message only once
        none of that group is in flight."""
        deliveries = take.deliveries
        next_expiry: int | None = None
        blocked: set[str] = set()
        expected = qs.ack_offset  # the next offset, were there no blank entries
        for entry in _window(cq, qs.ack_offset, qs.ack_offset + INFLIGHT_WINDOW_ENTRIES):
            if len(deliveries) >= take.batch_max:
                break
            offset = entry.queue_offset
            if qs.skip_blanks(offset, expected):
                self.progress.changed()
            expected = offset + 1
            if offset in qs.done:
                continue
            flight = qs.inflight.get(offset)
            if flight is not None and flight.invisible_until_ms > take.now:
                if flight.message_group is not None:
                    blocked.add(flight.message_group)
                next_expiry = _earliest(next_expiry, flight.invisible_until_ms)
                continue
            msg = None
            if flight is not None or take.codes is None or entry.tag_code in take.codes:
                msg = self._store.look_message_by_offset(entry.phy_offset, entry.size)
            if msg is None or (
                flight is None and take.tags is not None and msg.tags not in take.tags
            ):
                qs.mark_done(offset)
                self.progress.changed()
                continue
            message_group = msg.properties.get(PROPERTY_SHARDING_KEY)
            if message_group is not None:
                if message_group in blocked:
                    continue
                blocked.add(message_group)  # one message of a group in flight at a time
            await self._hand_out(qs, take, offset, entry.phy_offset, entry.size, msg, flight)
        return next_expiry

    async def _hand_out(
        self,
        qs: QueueState,
        take: _Take,
        offset: int,
        phy_offset: int,
        size: int,
        msg: MessageExt,
        flight: InFlight | None,
    ) -> None:
        """Deliver ``msg`` (again, when ``flight``), or dead-letter it past the attempts."""
        attempt = flight.attempt + 1 if flight is not None else 1
        handle = make_handle(take.queue_id, offset)
        until = take.now + take.invisible_ms
        if attempt > take.group.max_delivery_attempts:
            if not self._dead_letter_enable:  # a SLAVE writes no log: held in flight, not sent
                qs.hand_out(offset, InFlight(phy_offset, size, attempt - 1, until, handle, None))
                return
            await dead_letter(self._store, self._topics, take.group.group_name, msg, attempt - 1)
            qs.mark_done(offset)
            self.progress.changed()
            return
        message_group = msg.properties.get(PROPERTY_SHARDING_KEY)
        qs.hand_out(offset, InFlight(phy_offset, size, attempt, until, handle, message_group))
        take.deliveries.append(Delivery(msg, handle, attempt, until))

    # -- ack, change invisible, dead letter --------------------------------------------------
    def _flight(self, group: str, topic: str, handle: str) -> tuple[QueueState, int, InFlight]:
        queue_id, offset = parse_handle(handle)
        qs = self.progress.find(group, topic, queue_id)
        flight = qs.inflight.get(offset) if qs is not None else None
        # A handle stays current until the message is handed out again (then it is replaced):
        # an ack just after the invisibility expired, before a redelivery, is still accepted.
        if qs is None or flight is None or flight.handle != handle:
            raise InvalidReceiptHandleError(
                f"receipt handle {handle!r} is unknown or stale (group {group!r}, topic {topic!r})"
            )
        return qs, offset, flight

    def ack(self, group: str, topic: str, handle: str) -> None:
        qs, offset, _ = self._flight(group, topic, handle)
        qs.mark_done(offset)
        self.progress.changed()

    def change_invisible_duration(
        self, group: str, topic: str, handle: str, invisible_ms: int
    ) -> Delivery:
        qs, offset, flight = self._flight(group, topic, handle)
        queue_id, _ = parse_handle(handle)
        flight.handle = make_handle(queue_id, offset)
        flight.invisible_until_ms = _now_ms() + invisible_ms
        qs.push_expiry(offset, flight)
        msg = self._store.look_message_by_offset(flight.phy_offset, flight.size)
        if msg is None:
            qs.mark_done(offset)
            raise InvalidReceiptHandleError(f"the message of {handle!r} is gone")
        if invisible_ms == 0:
            self._arrivals.notify(topic, group)
        return Delivery(msg, flight.handle, flight.attempt, flight.invisible_until_ms)

    async def forward_to_dead_letter(
        self, group: str, topic: str, handle: str, key: str | None = None
    ) -> None:
        qs, offset, flight = self._flight(group if key is None else key, topic, handle)
        msg = self._store.look_message_by_offset(flight.phy_offset, flight.size)
        if msg is not None:
            await dead_letter(self._store, self._topics, group, msg, flight.attempt)
        qs.mark_done(offset)
        self.progress.changed()


def _window(cq: ConsumeQueue, start: int, end: int) -> Iterator[CqEntry]:
    """The entries in [start, end), read lazily in chunks."""
    offset = start
    while offset < end:
        entries = cq.iter_entries(offset, min(SCAN_CHUNK_ENTRIES, end - offset))
        if not entries:
            return
        yield from entries
        offset = entries[-1].queue_offset + 1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _earliest(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)
