"""Wake long polls when a message arrives (RocketMQ's NotifyMessageArrivingListener).

The store's dispatcher calls ``on_arrival`` on its thread once a record is readable; waiters on
the event loop wait per topic. Each wait gets the topic's current event; a notification sets it
and starts a fresh one, so every waiter of that moment wakes once.
"""

from __future__ import annotations

import asyncio
import contextlib

from broker.store.codec import DispatchRequest
from broker.store.message_store import DefaultMessageStore


class MessageArrivalNotifier:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closing = False

    def attach(self, store: DefaultMessageStore) -> None:
        """Listen to ``store``; call on the event loop the waiters run on."""
        self._loop = asyncio.get_running_loop()
        store.add_message_arriving_listener(self._on_arrival)

    def _on_arrival(self, req: DispatchRequest) -> None:  # the dispatcher thread
        loop = self._loop
        if loop is not None and not loop.is_closed() and req.topic in self._events:
            loop.call_soon_threadsafe(self.notify, req.topic)

    def notify(self, topic: str) -> None:
        event = self._events.pop(topic, None)
        if event is not None:
            event.set()

    async def wait(self, topic: str, timeout_s: float) -> None:
        """Until a message of ``topic`` arrives, ``notify`` is called, or the timeout."""
        if self.closing or timeout_s <= 0:
            return
        event = self._events.setdefault(topic, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)

    def wake_all(self) -> None:
        """Shutting down: every waiter returns now, and later waits return at once."""
        self.closing = True
        for topic in list(self._events):
            self.notify(topic)
