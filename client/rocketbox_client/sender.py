"""``BatchingSender``: concurrent ``send`` calls of one process, grouped into SendBatch requests.

Threads: ``batches_in_flight_max`` background threads, started with the sender, each taking the
next due batch from the shared buffer (batching.py says when one is due), sending it through the
client (with its UNAVAILABLE retries, the same message ids) and answering each message's future.
A thread is one request in flight, so the in-flight limit holds by construction.

Every message handed to ``send`` is answered through its future: Stored, Spooled, its
RejectedError (a per-entry RESOURCE_EXHAUSTED is ResourceExhaustedError: the app decides), the
request's error after the retries, or DeadlineExceededError. ``close`` sends what waits, answers
everything, and stops the threads; a future cancelled before its batch left is not sent.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, wait
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
    from rocketbox_client.client import Client

LOG = logging.getLogger(__name__)
_Pending = Pending["Future[SendResult]"]


class BatchingSender:
    """Made by ``Client.batching_sender``; running when made. Thread-safe."""

    def __init__(self, client: Client, limits: BatchingLimits) -> None:
        self._client = client
        self.limits = limits
        self._lock = threading.Lock()
        # Workers wait for a due batch; senders wait for room in the buffer.
        self._batch_ready = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._buffer: BatchBuffer[Future[SendResult]] = BatchBuffer(limits)
        self._unanswered: set[Future[SendResult]] = set()
        self._in_flight = 0
        self._flushing = 0
        self._closing = False
        self._batches_sent = 0
        self._messages_sent = 0
        self._workers = [
            threading.Thread(target=self._work, name=f"rocketbox-sender-{i}", daemon=True)
            for i in range(limits.batches_in_flight_max)
        ]
        for worker in self._workers:
            worker.start()

    def send(self, message: Message, *, timeout_s: float | None = None) -> Future[SendResult]:
        """Hands the message over; its future answers Stored or Spooled, or raises (see the
        module). Blocks while ``buffer_messages_max`` messages wait, within the deadline
        (the client's ``timeout_s`` unless given; it covers the wait, the batch and its
        retries): past it raises ResourceExhaustedError, the message not sent. Raises
        RuntimeError once closed."""
        deadline = Deadline(self._client.timeout_s if timeout_s is None else timeout_s)
        message_id = stamp(message)
        future: Future[SendResult] = Future()
        pending = Pending(
            message_id, to_proto(message, message_id), deadline, future, time.monotonic()
        )
        with self._lock:
            while not self._buffer.has_room() and not self._closing:
                remaining_s = deadline.remaining_s()
                if remaining_s <= 0:
                    raise buffer_full(message_id, self.limits, deadline.timeout_s)
                self._room.wait(remaining_s)
            if self._closing:
                raise RuntimeError("the batching sender is closed")
            self._buffer.append(pending)
            self._unanswered.add(future)
            self._batch_ready.notify()
        return future

    def flush(self) -> None:
        """Sends what waits at once (no linger) and returns when every message handed over
        before the call is answered."""
        with self._lock:
            self._flushing += 1
            waiting = list(self._unanswered)
            self._batch_ready.notify_all()
        try:
            wait(waiting)
        finally:
            with self._lock:
                self._flushing -= 1

    def close(self) -> None:
        """Refuses new messages, sends and answers every one it holds, stops its threads.
        Returns within the longest deadline of the messages held. Idempotent."""
        with self._lock:
            self._closing = True
            self._batch_ready.notify_all()
            self._room.notify_all()
        for worker in self._workers:
            worker.join()
        with self._lock:
            assert not self._buffer, "the workers drain the buffer before they stop"
            left = list(self._unanswered)
        for future in left:  # none: every batch answers its futures; kept as the last guard
            _answer_error(future, RocketboxError("the batching sender closed without an answer"))

    @property
    def stats(self) -> SenderStats:
        with self._lock:
            return SenderStats(self._batches_sent, self._messages_sent)

    def _work(self) -> None:
        while True:
            with self._lock:
                batch = self._next_batch()
                if batch is None:
                    return
                self._in_flight += 1
            sent = 0
            try:
                sent = self._send(batch)
            finally:
                with self._lock:
                    self._in_flight -= 1
                    self._batches_sent += 1 if sent else 0
                    self._messages_sent += sent
                    self._unanswered.difference_update(p.future for p in batch)
                    # A batch lingering behind this one may now leave (nothing in flight).
                    self._batch_ready.notify()

    def _next_batch(self) -> list[_Pending] | None:
        """The next due batch, waiting for it; None once closing and drained. Lock held."""
        while True:
            hurry = self._closing or self._flushing > 0
            due_in_s = self._buffer.due_in_s(time.monotonic(), self._in_flight, hurry)
            if due_in_s is None:
                if self._closing:
                    return None
                self._batch_ready.wait()
            elif due_in_s <= 0:
                batch = self._buffer.take()
                self._room.notify(len(batch))
                if self._buffer:
                    self._batch_ready.notify()  # the rest may be due for another thread
                return batch
            else:
                self._batch_ready.wait(due_in_s)

    def _send(self, batch: list[_Pending]) -> int:
        """Sends the batch and answers each message; returns how many were sent."""
        # A future cancelled by the app before now is not sent; the others cannot be cancelled.
        live = [p for p in batch if p.future.set_running_or_notify_cancel()]
        to_send: list[_Pending] = []
        for p in live:
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
            response = self._client.send_batch_request(request, earliest_deadline(to_send))
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
            if isinstance(result, RocketboxError):
                _answer_error(p.future, result)
            else:
                p.future.set_result(result)
        return len(to_send)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _answer_error(future: Future[SendResult], error: RocketboxError) -> None:
    if not future.done():
        future.set_exception(error)
