"""``AsyncBatchingSender``: ``BatchingSender`` (sender.py) for asyncio.

Structured: ``start`` (or ``async with``) starts one task owned by the sender, which runs
``batches_in_flight_max`` workers in a TaskGroup; ``close`` lets them drain the buffer, waits for
that task and so for every request, and answers every message. ``await send(message)`` returns
the message's SendResult or raises its error; cancelling the await before its batch leaves keeps
the message from being sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import TYPE_CHECKING, Self

import grpc

from rocketbox_client._proto import sidecar_pb2 as api
from rocketbox_client._rpc import Deadline
from rocketbox_client.batching import (
    BatchBuffer,
    BatchingLimits,
    Pending,
    SenderStats,
    buffer_full,
    earliest_deadline,
    results_of,
)
from rocketbox_client.converter import to_proto
from rocketbox_client.errors import RocketboxError, deadline_exceeded, translate
from rocketbox_client.message import Message, SendResult
from rocketbox_client.message_id import stamp

if TYPE_CHECKING:
    from rocketbox_client.async_client import AsyncClient

LOG = logging.getLogger(__name__)
_Pending = Pending["asyncio.Future[SendResult]"]


class AsyncBatchingSender:
    """Made by ``AsyncClient.batching_sender``; serving once started."""

    def __init__(self, client: AsyncClient, limits: BatchingLimits) -> None:
        self._client = client
        self.limits = limits
        self._lock = asyncio.Lock()
        self._batch_ready = asyncio.Condition(self._lock)
        self._room = asyncio.Condition(self._lock)
        self._buffer: BatchBuffer[asyncio.Future[SendResult]] = BatchBuffer(limits)
        self._unanswered: set[asyncio.Future[SendResult]] = set()
        self._in_flight = 0
        self._flushing = 0
        self._closing = False
        self._runner: asyncio.Task[None] | None = None
        self._batches_sent = 0
        self._messages_sent = 0

    async def start(self) -> None:
        """Starts the sender's task; returns once it takes messages."""
        if self._runner is not None:
            raise RuntimeError("the batching sender was already started")
        self._runner = asyncio.create_task(self._run(), name="rocketbox-batching-sender")

    async def send(self, message: Message, *, timeout_s: float | None = None) -> SendResult:
        """The message's answer: Stored or Spooled, or raises its error (see sender.py). Waits
        while ``buffer_messages_max`` messages wait, within the deadline (the client's
        ``timeout_s`` unless given; it covers the wait, the batch and its retries): past it
        raises ResourceExhaustedError, the message not sent. RuntimeError when not running."""
        deadline = Deadline(self._client.timeout_s if timeout_s is None else timeout_s)
        message_id = stamp(message)
        future: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        pending = Pending(
            message_id, to_proto(message, message_id), deadline, future, time.monotonic()
        )
        async with self._lock:
            while not self._buffer.has_room() and not self._closing:
                remaining_s = deadline.remaining_s()
                if remaining_s <= 0:
                    raise buffer_full(message_id, self.limits, deadline.timeout_s)
                try:
                    async with asyncio.timeout(remaining_s):
                        await self._room.wait()
                except TimeoutError:
                    pass
            if self._runner is None or self._closing:
                raise RuntimeError("the batching sender is not running (start it, or it closed)")
            self._buffer.append(pending)
            self._unanswered.add(future)
            self._batch_ready.notify()
        return await future

    async def flush(self) -> None:
        """Sends what waits at once (no linger) and returns when every message handed over
        before the call is answered."""
        async with self._lock:
            self._flushing += 1
            waiting = list(self._unanswered)
            self._batch_ready.notify_all()
        try:
            if waiting:
                await asyncio.wait(waiting)
        finally:
            async with self._lock:
                self._flushing -= 1

    async def close(self) -> None:
        """Refuses new messages, sends and answers every one it holds, stops its task. Returns
        within the longest deadline of the messages held. Idempotent."""
        async with self._lock:
            self._closing = True
            self._batch_ready.notify_all()
            self._room.notify_all()
        if self._runner is not None:
            await self._runner
        left = [f for f in self._unanswered if not f.done()]
        assert not left, "every batch answers its messages"

    @property
    def stats(self) -> SenderStats:
        return SenderStats(self._batches_sent, self._messages_sent)

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as workers:
            for i in range(self.limits.batches_in_flight_max):
                workers.create_task(self._work(), name=f"rocketbox-batching-sender-{i}")

    async def _work(self) -> None:
        while True:
            async with self._lock:
                batch = await self._next_batch()
                if batch is None:
                    return
                self._in_flight += 1
            sent = 0
            try:
                sent = await self._send(batch)
            finally:
                # Cancelled (the loop is ending): the batch's messages are still told.
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(RocketboxError(
                            "the batching sender was cancelled before an answer; the message "
                            "may or may not be stored", p.message_id,
                        ))  # fmt: skip
                async with self._lock:
                    self._in_flight -= 1
                    self._batches_sent += 1 if sent else 0
                    self._messages_sent += sent
                    self._unanswered.difference_update(p.future for p in batch)
                    self._batch_ready.notify()

    async def _next_batch(self) -> list[_Pending] | None:
        """The next due batch, waiting for it; None once closing and drained. Lock held."""
        while True:
            hurry = self._closing or self._flushing > 0
            due_in_s = self._buffer.due_in_s(time.monotonic(), self._in_flight, hurry)
            if due_in_s is None:
                if self._closing:
                    return None
                await self._batch_ready.wait()
            elif due_in_s <= 0:
                batch = self._buffer.take()
                self._room.notify(len(batch))
                if self._buffer:
                    self._batch_ready.notify()
                return batch
            else:
                try:
                    async with asyncio.timeout(due_in_s):
                        await self._batch_ready.wait()
                except TimeoutError:
                    pass

    async def _send(self, batch: list[_Pending]) -> int:
        """Sends the batch and answers each message; returns how many were sent."""
        to_send: list[_Pending] = []
        for p in batch:
            if p.future.done():  # the app stopped waiting before it left: not sent
                continue
            if p.deadline.remaining_s() > 0:
                to_send.append(p)
            else:
                _answer_error(p.future, deadline_exceeded(
                    p.message_id, p.deadline.timeout_s, "it waited in the sender's buffer",
                    sent=False,
                ))  # fmt: skip
        if not to_send:
            return 0
        request = api.SendBatchRequest(messages=[p.message for p in to_send])
        try:
            response = await self._client.send_batch_request(request, earliest_deadline(to_send))
            results = results_of(response, [p.message_id for p in to_send])
        except grpc.RpcError as e:
            for p in to_send:
                _answer_error(p.future, translate(e, p.message_id, p.deadline.timeout_s))
            return len(to_send)
        except Exception as e:  # a fault of ours or the answer's: still answer every message
            LOG.exception("batch of %d messages failed", len(to_send))
            for p in to_send:
                error = RocketboxError(f"the batch failed: {e!r}", p.message_id)
                error.__cause__ = e
                _answer_error(p.future, error)
            return len(to_send)
        for p, result in zip(to_send, results, strict=True):
            if p.future.done():
                continue
            if isinstance(result, RocketboxError):
                p.future.set_exception(result)
            else:
                p.future.set_result(result)
        return len(to_send)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _answer_error(future: asyncio.Future[SendResult], error: RocketboxError) -> None:
    if not future.done():
        future.set_exception(error)
