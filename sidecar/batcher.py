"""Coalescing: items submitted while a request is in flight leave together as the next request.

This is how Kafka's producer and RocketMQ's group commit make the cost of a call (a gRPC round
trip costs several times our own Python per message: docs/benchmarks.md) a cost per batch rather
than per message, without a linger timer:

    submit(item) ──► waiting ──(fewer than requests_in_flight_max in flight)──► one request
                        ▲                                                          │
                        └──────── items that arrive meanwhile wait here ◄──────────┘

- Idle, an item leaves at once (on the loop's next turn, so that items submitted in the same
  turn, e.g. a SendBatch's, share its request): no added latency.
- Busy, the items that arrive while ``requests_in_flight_max`` requests are out accumulate and
  leave as one request the moment one returns, up to ``items_max`` items and ``bytes_max``
  bytes a request; the rest wait for the next.
- Each item keeps its own answer: ``flush`` answers a request with one answer per item, in
  order; if it raises, every item of that request gets the exception. No item is ever left
  without an answer.

The number of items waiting is not bounded here: the sidecar's admission control
(``intake_in_flight_max``) bounds every message inside the sidecar.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

ItemT = TypeVar("ItemT")
AnswerT = TypeVar("AnswerT")

Flush = Callable[[Sequence[ItemT]], Awaitable[Sequence[AnswerT]]]


class InFlightBatcher(Generic[ItemT, AnswerT]):
    def __init__(
        self,
        flush: Flush[ItemT, AnswerT],
        items_max: int,
        bytes_max: int,
        requests_in_flight_max: int,
        size_bytes: Callable[[ItemT], int] = lambda _: 0,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        if items_max < 1 or bytes_max < 1 or requests_in_flight_max < 1:
            raise ValueError(
                "items_max, bytes_max and requests_in_flight_max must be >= 1, got "
                f"{items_max}, {bytes_max}, {requests_in_flight_max}"
            )
        self._flush = flush
        self._items_max = items_max
        self._bytes_max = bytes_max
        self._requests_in_flight_max = requests_in_flight_max
        self._size_bytes = size_bytes
        # Told when the last request returned with nothing waiting (the owner may drop us).
        self._on_idle = on_idle
        self._waiting: deque[tuple[ItemT, asyncio.Future[AnswerT]]] = deque()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._dispatch_scheduled = False

    @property
    def idle(self) -> bool:
        """Nothing waiting and nothing in flight."""
        return not self._waiting and not self._in_flight

    async def submit(self, item: ItemT) -> AnswerT:
        """The item's answer (or the exception its request raised)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[AnswerT] = loop.create_future()
        self._waiting.append((item, answer))
        if not self._dispatch_scheduled and len(self._in_flight) < self._requests_in_flight_max:
            self._dispatch_scheduled = True
            loop.call_soon(self._dispatch)
        return await answer

    async def wait_idle(self) -> None:
        """Until every request in flight has answered (for a clean stop)."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    def _dispatch(self) -> None:
        self._dispatch_scheduled = False
        while self._waiting and len(self._in_flight) < self._requests_in_flight_max:
            batch = self._take()
            task = asyncio.create_task(self._request(batch))
            self._in_flight.add(task)
            task.add_done_callback(self._request_done)

    def _take(self) -> list[tuple[ItemT, asyncio.Future[AnswerT]]]:
        batch = [self._waiting.popleft()]
        size = self._size_bytes(batch[0][0])
        while self._waiting and len(batch) < self._items_max:
            item_size = self._size_bytes(self._waiting[0][0])
            if size + item_size > self._bytes_max:
                break
            size += item_size
            batch.append(self._waiting.popleft())
        return batch

    async def _request(self, batch: list[tuple[ItemT, asyncio.Future[AnswerT]]]) -> None:
        try:
            answers = await self._flush([item for item, _ in batch])
            assert len(answers) == len(batch), "flush must answer every item"
        except BaseException as e:  # every item must get an answer, also on cancellation
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            if not future.done():  # its caller may have gone (a cancelled call)
                future.set_result(answer)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        if self._waiting and not self._dispatch_scheduled:
            # What accumulated while this request was out leaves now.
            self._dispatch()
        if self.idle and not self._dispatch_scheduled and self._on_idle is not None:
            self._on_idle()
