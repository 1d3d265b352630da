"""Flow control on the send path (RocketMQ's BrokerFastFailure), and forced flow control.

Sends go through a bounded queue drained by a fixed number of workers. A send is refused with
``FlowControlled`` (the edge answers TOO_MANY_REQUESTS, "system busy") when
- the queue already holds ``send_queue_capacity_max`` sends;
- it waited in the queue longer than ``wait_time_ms_in_send_queue`` before a worker took it;
- an operator forced flow control on for its topic or for the whole broker (drills and tests).
Nothing of a refused send is stored, so the producer may retry it later without duplicates.

A send that finds the queue empty and fewer than ``workers`` sends running is run at once by its
own coroutine: queueing it would only cost a hand-off to a worker and a future, per request,
for a wait of zero. The bound is the same either way: at most ``workers`` sends run at once, and
the rest queue in order.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from broker.background import BackgroundTasks

LOG = logging.getLogger(__name__)
T = TypeVar("T")


class FlowControlReason(enum.StrEnum):
    """Why a send was refused: the label of the broker's flow-control metric."""

    FORCED = "forced"
    SEND_QUEUE_FULL = "send_queue_full"
    SEND_QUEUE_WAIT = "send_queue_wait"
    TIMER_FULL = "timer_full"


class FlowControlled(Exception):  # noqa: N818 - an outcome the edge maps to TOO_MANY_REQUESTS
    """The broker will not take this send now; retry later."""

    def __init__(self, message: str, reason: FlowControlReason) -> None:
        super().__init__(message)
        self.reason = reason


class ForcedFlowControl:
    """Operator switches: flow control for the whole broker or for single topics."""

    def __init__(self) -> None:
        self.broker_wide = False
        self.topics: frozenset[str] = frozenset()

    def set(self, on: bool, topic: str | None = None) -> None:
        if topic is None:
            self.broker_wide = on
        elif on:
            self.topics = self.topics | {topic}
        else:
            self.topics = self.topics - {topic}
        LOG.warning("forced flow control %s for %s", "on" if on else "off", topic or "the broker")

    def check(self, topic: str) -> None:
        if self.broker_wide:
            raise FlowControlled(
                "flow control forced on for the broker by an operator", FlowControlReason.FORCED
            )
        if topic in self.topics:
            raise FlowControlled(
                f"flow control forced on for topic {topic!r} by an operator",
                FlowControlReason.FORCED,
            )


@dataclass(slots=True)
class _Job:
    work: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any]
    enqueued_at: float


class SendQueue:
    def __init__(self, capacity_max: int, wait_time_ms_max: int, workers: int) -> None:
        self._capacity_max = capacity_max
        self._wait_s_max = wait_time_ms_max / 1000
        self._wait_time_ms_max = wait_time_ms_max
        self._queue: asyncio.Queue[_Job] = asyncio.Queue(maxsize=capacity_max)
        self._workers_n = workers
        self._workers: list[asyncio.Task[None]] = []
        # Sends running now, by workers or by their own coroutines: at most ``workers``.
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self, tasks: BackgroundTasks) -> None:
        self._workers = [
            tasks.start(self._work(), f"send-worker-{n}") for n in range(self._workers_n)
        ]

    async def stop(self) -> None:
        """Finish every send already queued or running, then stop the workers."""
        await self._queue.join()
        await self._idle.wait()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    async def submit(self, work: Callable[[], Awaitable[T]]) -> T:
        if self._running < self._workers_n and self._queue.empty():
            self._begin()
            try:
                return await work()
            finally:
                self._end()
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Job(work, fut, time.monotonic()))
        except asyncio.QueueFull:
            raise FlowControlled(
                f"send queue full (send_queue_capacity_max={self._capacity_max})",
                FlowControlReason.SEND_QUEUE_FULL,
            ) from None
        return await fut

    def _begin(self) -> None:
        self._running += 1
        self._idle.clear()

    def _end(self) -> None:
        self._running -= 1
        if self._running == 0:
            self._idle.set()

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            self._begin()
            try:
                waited_s = time.monotonic() - job.enqueued_at
                if waited_s > self._wait_s_max:
                    job.future.set_exception(
                        FlowControlled(
                            f"waited {waited_s * 1000:.0f} ms in the send queue "
                            f"(wait_time_ms_in_send_queue={self._wait_time_ms_max})",
                            FlowControlReason.SEND_QUEUE_WAIT,
                        )
                    )
                    continue
                try:
                    result = await job.work()
                except Exception as e:  # handed to the sender, which owns the error
                    if not job.future.done():
                        job.future.set_exception(e)
                else:
                    if not job.future.done():
                        job.future.set_result(result)
            finally:
                self._end()
                self._queue.task_done()
