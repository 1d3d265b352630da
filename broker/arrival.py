"""Wake long polls when a message arrives (RocketMQ's NotifyMessageArrivingListener and its pop
long-polling service), without a thundering herd.

The store calls ``on_arrival`` on the thread that dispatched a record, once it is readable. One
wake per topic is queued to the event loop at a time: the records dispatched before it runs are
all readable by then, so a burst of a put batch costs one wake, not one per record.

Waiters wait per topic and key:
- a consumer group's pop receives share the group's messages: an arrival wakes **one** of them
  (the one waiting longest). A receive that fills its batch wakes the next (``notify`` with its
  group): more may be there. Waking every waiter of a topic on every arrival had N receives race
  for one message and N - 1 of them pass over the queues for nothing.
- ``EVERY_WAITER`` (pull consumers, each at an offset of its own): an arrival wakes all of them.
A waiter cancelled after its wake came (its client went away) passes the wake on, so no arrival is
lost for the group; a receive that was not woken still looks again when its poll time ends.
"""

from __future__ import annotations

import asyncio
import contextlib

from broker.store.codec.check import DispatchRequest
from broker.store.message_store import DefaultMessageStore

# The key of waiters that every arrival wakes (offset-based pull consumers).
EVERY_WAITER = ""

Waiters = dict["asyncio.Future[None]", None]  # insertion-ordered: the longest waiting first


class MessageArrivalNotifier:
    def __init__(self) -> None:
        # topic -> key (a consumer group, or EVERY_WAITER) -> waiters
        self._waiters: dict[str, dict[str, Waiters]] = {}
        self._wake_queued: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closing = False

    def attach(self, store: DefaultMessageStore) -> None:
        """Listen to ``store``; call on the event loop the waiters run on."""
        self._loop = asyncio.get_running_loop()
        store.add_message_arriving_listener(self._on_arrival)

    def _on_arrival(self, req: DispatchRequest) -> None:  # a dispatching thread
        topic = req.topic
        loop = self._loop
        # Queued whether or not anyone waits now: a receive that found nothing may be about to
        # wait (its look and its wait are one step on the loop, which this wake follows). The
        # set is read and written under the GIL; at worst a wake is queued twice.
        if topic in self._wake_queued:
            return
        if loop is not None and not loop.is_closed():
            self._wake_queued.add(topic)
            loop.call_soon_threadsafe(self._arrived, topic)

    def _arrived(self, topic: str) -> None:
        self._wake_queued.discard(topic)
        self.notify(topic)

    def notify(self, topic: str, key: str | None = None) -> None:
        """Wake one waiter of each consumer group of ``topic`` (only of ``key``'s, when given)
        and every EVERY_WAITER waiter."""
        by_key = self._waiters.get(topic)
        if not by_key:
            return
        keys = list(by_key) if key is None else [key, EVERY_WAITER]
        for k in keys:
            waiters = by_key.get(k)
            if not waiters:
                continue
            if k == EVERY_WAITER or self.closing:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
                continue
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
                    break

    async def wait(self, topic: str, timeout_s: float, key: str = EVERY_WAITER) -> None:
        """Until a wake for ``key`` on ``topic`` (see the module's docstring), or the timeout."""
        if self.closing or timeout_s <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(topic, {}).setdefault(key, {})
        waiters[fut] = None
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and key != EVERY_WAITER:
                self._forget(topic, key, fut)
                self.notify(topic, key)  # the wake was this waiter's: the next one gets it
            raise
        finally:
            self._forget(topic, key, fut)

    def waiting(self, topic: str, key: str) -> int:
        """Waiters of ``key`` on ``topic`` not woken yet."""
        waiters = self._waiters.get(topic, {}).get(key, {})
        return sum(1 for fut in waiters if not fut.done())

    def waiting_counts(self) -> list[tuple[str, str, int]]:
        """(topic, key, waiters not woken yet) for every topic and key with any: what the
        ``rocketbox_broker_long_polls_waiting`` gauge shows. Safe from the scraping thread:
        each dict is copied first, and a copy is one step under the GIL."""
        counts = []
        for topic, by_key in self._waiters.copy().items():
            for key, waiters in by_key.copy().items():
                n = sum(1 for fut in waiters.copy() if not fut.done())
                if n:
                    counts.append((topic, key, n))
        return counts

    def _forget(self, topic: str, key: str, fut: asyncio.Future[None]) -> None:
        by_key = self._waiters.get(topic)
        if by_key is None:
            return
        waiters = by_key.get(key)
        if waiters is not None:
            waiters.pop(fut, None)
            if not waiters:
                del by_key[key]
        if not by_key:
            del self._waiters[topic]

    def wake_all(self) -> None:
        """Shutting down: every waiter returns now, and later waits return at once."""
        self.closing = True
        for topic in list(self._waiters):
            self.notify(topic)
