"""What both batching senders (sender.py, threads; async_sender.py, asyncio) and ``send_batch``
share: the limits, the buffer of messages waiting for a batch, and the reading of a batch's
answer.

A batch leaves the buffer (as in Kafka's producer) when it is full (``batch_messages_max``
messages or ``batch_bytes_max`` encoded bytes), when its oldest message has waited
``linger_ms``, or at once when no batch is in flight: an idle sender adds no latency, a busy one
coalesces the messages that arrive while its requests are out. At most ``batches_in_flight_max``
requests are out; at most ``buffer_messages_max`` messages wait, and ``send`` waits for room
(within its deadline) past that.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import grpc

from rocketbox_client._proto import sidecar_pb2 as api
from rocketbox_client._rpc import SEND_BATCH_BYTES_MAX, SEND_BATCH_MESSAGES_MAX, Deadline
from rocketbox_client.converter import from_result
from rocketbox_client.errors import (
    InvalidMessageError,
    RejectedError,
    ResourceExhaustedError,
    RocketboxError,
)
from rocketbox_client.message import SendResult

LINGER_MS_DEFAULT = 1.0
BATCH_MESSAGES_MAX_DEFAULT = 256
BATCH_BYTES_MAX_DEFAULT = 4 * 1024 * 1024
BATCHES_IN_FLIGHT_MAX_DEFAULT = 4
BUFFER_MESSAGES_MAX_DEFAULT = 10_000
# Bounds on the limits themselves: a linger is a latency added to every message; more requests in
# flight than this is more concurrency than one sidecar serves better.
LINGER_MS_MAX = 1_000.0
BATCHES_IN_FLIGHT_MAX_MAX = 64
BUFFER_MESSAGES_MAX_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class BatchingLimits:
    linger_ms: float = LINGER_MS_DEFAULT
    batch_messages_max: int = BATCH_MESSAGES_MAX_DEFAULT
    batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT
    batches_in_flight_max: int = BATCHES_IN_FLIGHT_MAX_DEFAULT
    buffer_messages_max: int = BUFFER_MESSAGES_MAX_DEFAULT

    def __post_init__(self) -> None:
        _check("linger_ms", self.linger_ms, 0, LINGER_MS_MAX)
        _check("batch_messages_max", self.batch_messages_max, 1, SEND_BATCH_MESSAGES_MAX)
        _check("batch_bytes_max", self.batch_bytes_max, 1, SEND_BATCH_BYTES_MAX)
        _check("batches_in_flight_max", self.batches_in_flight_max, 1, BATCHES_IN_FLIGHT_MAX_MAX)
        _check("buffer_messages_max", self.buffer_messages_max, 1, BUFFER_MESSAGES_MAX_MAX)


def _check(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} is {value}; it must be within {low:g} .. {high:g}")


def check_batch(messages: Sequence[api.Message]) -> None:
    """A SendBatch within the sidecar's limits, or InvalidMessageError naming the limit."""
    if len(messages) > SEND_BATCH_MESSAGES_MAX:
        raise InvalidMessageError(
            grpc.StatusCode.INVALID_ARGUMENT, "messages",
            f"has {len(messages)} messages; the limit is {SEND_BATCH_MESSAGES_MAX} (split the "
            "batch, or use a batching sender)",
        )  # fmt: skip
    size = sum(m.ByteSize() for m in messages)
    if size > SEND_BATCH_BYTES_MAX:
        raise InvalidMessageError(
            grpc.StatusCode.INVALID_ARGUMENT, "messages",
            f"is {size} bytes encoded; the limit is {SEND_BATCH_BYTES_MAX} (split the batch, or "
            "use a batching sender)",
        )  # fmt: skip


def results_of(
    response: api.SendBatchResponse, message_ids: Sequence[str]
) -> list[SendResult | RejectedError]:
    if len(response.results) != len(message_ids):
        raise RocketboxError(
            f"the sidecar answered {len(response.results)} results to {len(message_ids)} messages"
        )
    return [from_result(r) for r in response.results]


def buffer_full(
    message_id: str, limits: BatchingLimits, timeout_s: float
) -> ResourceExhaustedError:
    return ResourceExhaustedError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "",
        f"the batching sender's buffer held buffer_messages_max={limits.buffer_messages_max} "
        f"messages for the whole deadline ({timeout_s:g} s); this one was not sent",
        message_id,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class SenderStats:
    """What a batching sender sent so far: SendBatch requests (retries not counted) and the
    messages in them."""

    batches_sent: int
    messages_sent: int


F = TypeVar("F")


class Pending(Generic[F]):
    """A message in a batching sender, from ``send`` until its future is answered."""

    __slots__ = ("deadline", "enqueued_s", "future", "message", "message_id", "size_bytes")

    def __init__(
        self, message_id: str, message: api.Message, deadline: Deadline, future: F, now_s: float
    ) -> None:
        self.message_id = message_id
        self.message = message
        self.size_bytes = message.ByteSize()
        self.deadline = deadline
        self.future = future
        self.enqueued_s = now_s


class BatchBuffer(Generic[F]):
    """The messages waiting for a batch, oldest first. Not thread-safe: its sender locks."""

    def __init__(self, limits: BatchingLimits) -> None:
        self._limits = limits
        self._linger_s = limits.linger_ms / 1000
        self._entries: deque[Pending[F]] = deque()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def has_room(self) -> bool:
        return len(self._entries) < self._limits.buffer_messages_max

    def append(self, pending: Pending[F]) -> None:
        assert self.has_room(), "the sender waits for room before appending"
        self._entries.append(pending)
        self._bytes += pending.size_bytes

    def due_in_s(self, now_s: float, in_flight: int, hurry: bool) -> float | None:
        """0: a batch should leave now; more: when the oldest message's linger ends; None: no
        message waits. ``hurry``: flush or close, linger no more."""
        if not self._entries:
            return None
        if (
            hurry
            or in_flight == 0
            or len(self._entries) >= self._limits.batch_messages_max
            or self._bytes >= self._limits.batch_bytes_max
        ):
            return 0.0
        return max(0.0, self._entries[0].enqueued_s + self._linger_s - now_s)

    def take(self) -> list[Pending[F]]:
        """The oldest messages, within the batch limits; always one at least (a message larger
        than ``batch_bytes_max`` goes alone: whatever the sidecar answers is its alone)."""
        batch: list[Pending[F]] = []
        size = 0
        while self._entries and len(batch) < self._limits.batch_messages_max:
            head = self._entries[0]
            if batch and size + head.size_bytes > self._limits.batch_bytes_max:
                break
            self._entries.popleft()
            batch.append(head)
            size += head.size_bytes
        self._bytes -= size
        return batch


def earliest_deadline(batch: Sequence[Pending[F]]) -> Deadline:
    """A batch's request deadline: its most urgent message's."""
    return min((p.deadline for p in batch), key=lambda d: d.at_s)
