"""The app-facing gRPC service (rocketbox.v1.SidecarService): validate → convert → intake.

Every message gets exactly one answer. Errors are translated here, once:

| raised by intake | Send (call status) | SendBatch / SendStream (Rejection) |
|---|---|---|
| SendRejectedError | INVALID_ARGUMENT / NOT_FOUND + google.rpc.BadRequest | same code and field |
| OutboxFullError | RESOURCE_EXHAUSTED + google.rpc.RetryInfo | same, retry_after |
| more than intake_in_flight_max inside | RESOURCE_EXHAUSTED + google.rpc.RetryInfo | same |
| OutboxUnavailableError, shutting down | UNAVAILABLE | same |

Admission control: at most ``intake_in_flight_max`` messages are inside the sidecar at once
(from intake to answer, over all calls). One more is refused at once with RESOURCE_EXHAUSTED and
a retry-after rather than queued, so under overload the latency of what is accepted stays bounded
and the excess costs the sidecar next to nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from prometheus_client import Counter, Histogram

from outbox.entry import OutboxMessage
from outbox.errors import OutboxError, OutboxFullError
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from sidecar.clock import now_ms
from sidecar.converter import duration_from_ms, to_outbox_message, to_rejected, to_result
from sidecar.errors import SendRejectedError
from sidecar.intake import Accepted, Intake, Stored
from sidecar.message_id import MessageIdGenerator
from sidecar.metrics import SidecarMetrics

LOG = logging.getLogger(__name__)
UNAVAILABLE_RETRY_AFTER_MS = 1_000
# What an app refused by admission control waits: a few coalesced requests' time.
INTAKE_FULL_RETRY_AFTER_MS = 100


class Rejected(Exception):  # noqa: N818 - an outcome, carried to the edge as one value
    def __init__(self, code: grpc.StatusCode, field: str, reason: str, retry_after_ms: int = 0):
        super().__init__(f"{field}: {reason}" if field else reason)
        self.code = code
        self.field = field
        self.reason = reason
        self.retry_after_ms = retry_after_ms


class SidecarService(sidecar_pb2_grpc.SidecarServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        intake: Intake,
        send_batch_entries_max: int,
        send_batch_bytes_max: int,
        send_stream_in_flight_max: int,
        intake_in_flight_max: int,
        on_answer: Callable[[int, str, str, Accepted], None] | None = None,
        metrics: SidecarMetrics | None = None,
    ) -> None:
        self._intake = intake
        self._ids = MessageIdGenerator()
        self._batch_entries_max = send_batch_entries_max
        self._batch_bytes_max = send_batch_bytes_max
        self._stream_in_flight_max = send_stream_in_flight_max
        self._intake_in_flight_max = intake_in_flight_max
        self.intake_in_flight = 0
        self._children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._on_answer = on_answer
        self._metrics = metrics or SidecarMetrics()
        self.accepting = True

    def _intake_message(self, m: api.Message) -> OutboxMessage:
        return to_outbox_message(m, self._ids, now_ms())

    async def _accept(self, message: OutboxMessage) -> api.SendResult:
        """One message's result; raises Rejected. Every answer is counted."""
        started_s = time.monotonic()
        try:
            accepted = await self._answer(message)
        except Rejected as r:
            self._count("REJECTED", r.code.name, started_s)
            raise
        if isinstance(accepted, Stored):
            self._count("STORED", "", started_s)
        else:
            self._count("SPOOLED", accepted.entry.cause.value, started_s)
        return to_result(message.message_id, accepted)

    def _count(self, state: str, cause: str, started_s: float) -> None:
        # The labelled children are looked up once per (state, cause), not per message.
        children = self._children.get((state, cause))
        if children is None:
            children = self._children[(state, cause)] = (
                self._metrics.sends.labels(state, cause),
                self._metrics.send_seconds.labels(state),
            )
        children[0].inc()
        children[1].observe(time.monotonic() - started_s)

    async def _answer(self, message: OutboxMessage) -> Accepted:
        if not self.accepting:
            raise Rejected(
                grpc.StatusCode.UNAVAILABLE, "", "the sidecar is shutting down",
                UNAVAILABLE_RETRY_AFTER_MS,
            )  # fmt: skip
        if self.intake_in_flight >= self._intake_in_flight_max:
            raise Rejected(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "", f"the sidecar is at its limit of "
                f"{self._intake_in_flight_max} messages in flight (intake_in_flight_max)",
                INTAKE_FULL_RETRY_AFTER_MS,
            )  # fmt: skip
        self.intake_in_flight += 1
        try:
            return await self._intake_answer(message)
        finally:
            self.intake_in_flight -= 1

    async def _intake_answer(self, message: OutboxMessage) -> Accepted:
        try:
            accepted = await self._intake.accept(message)
        except SendRejectedError as e:
            raise Rejected(e.code, e.field, e.reason) from e
        except OutboxFullError as e:
            raise Rejected(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "", f"outbox is full: {e}", e.retry_after_ms
            ) from e
        except OutboxError as e:
            raise Rejected(
                grpc.StatusCode.UNAVAILABLE, "", f"the broker did not take it and the outbox "
                f"could not spool it: {e}", UNAVAILABLE_RETRY_AFTER_MS,
            ) from e  # fmt: skip
        if self._on_answer is not None:
            self._on_answer(now_ms(), message.message_id, message.topic, accepted)
        return accepted

    async def _result_or_rejection(self, m: api.Message) -> api.SendResult:
        message = self._intake_message(m)
        try:
            return await self._accept(message)
        except Rejected as r:
            return to_rejected(message.message_id, r.code, r.field, r.reason, r.retry_after_ms)

    async def Send(  # noqa: N802 - the API's name
        self, request: api.SendRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.SendResponse:
        if not request.HasField("message"):
            await _abort(
                context, Rejected(grpc.StatusCode.INVALID_ARGUMENT, "message", "is required")
            )
        try:
            result = await self._accept(self._intake_message(request.message))
            return api.SendResponse(result=result)
        except Rejected as r:
            await _abort(context, r)
            raise  # unreachable: abort raises

    async def SendBatch(  # noqa: N802
        self, request: api.SendBatchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.SendBatchResponse:
        count = len(request.messages)
        if count > self._batch_entries_max:
            await _abort(context, Rejected(
                grpc.StatusCode.INVALID_ARGUMENT, "messages",
                f"has {count} messages; the limit is {self._batch_entries_max}",
            ))  # fmt: skip
        size = sum(len(m.body) for m in request.messages)
        if size > self._batch_bytes_max:
            await _abort(context, Rejected(
                grpc.StatusCode.INVALID_ARGUMENT, "messages",
                f"bodies total {size} bytes; the limit is {self._batch_bytes_max}",
            ))  # fmt: skip
        # Tasks are created in request order, and intake serialises a FIFO group in the order its
        # messages arrive: a group's messages keep their request order; the rest go in parallel.
        results = await asyncio.gather(*(self._result_or_rejection(m) for m in request.messages))
        return api.SendBatchResponse(results=results)

    async def SendStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[api.SendStreamRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[api.SendStreamResponse]:
        slots = asyncio.Semaphore(self._stream_in_flight_max)
        # Bounded too: answers the app does not read hold their tasks, and so the reading.
        answers: asyncio.Queue[api.SendStreamResponse | None] = asyncio.Queue(
            maxsize=self._stream_in_flight_max
        )
        tasks: set[asyncio.Task[None]] = set()

        async def answer(request: api.SendStreamRequest) -> None:
            try:
                result = await self._result_or_rejection(request.message)
                await answers.put(
                    api.SendStreamResponse(request_id=request.request_id, result=result)
                )
            finally:
                slots.release()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    # Back-pressure: stop reading while the limit is in flight.
                    await slots.acquire()
                    task = asyncio.create_task(answer(request))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if tasks:
                    await asyncio.gather(*tasks)
            finally:
                await answers.put(None)

        reader = asyncio.create_task(read())
        try:
            while (response := await answers.get()) is not None:
                yield response
        finally:
            reader.cancel()
            for task in list(tasks):
                task.cancel()


async def _abort(context: grpc.aio.ServicerContext[Any, Any], r: Rejected) -> None:
    details: list[any_pb2.Any] = []
    if r.field:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=r.field, description=r.reason)
            ]
        )
        packed = any_pb2.Any()
        packed.Pack(bad)
        details.append(packed)
    if r.retry_after_ms:
        retry = error_details_pb2.RetryInfo(retry_delay=duration_from_ms(r.retry_after_ms))
        packed = any_pb2.Any()
        packed.Pack(retry)
        details.append(packed)
    status = status_pb2.Status(code=getattr(code_pb2, r.code.name), message=str(r), details=details)
    await context.abort_with_status(rpc_status.to_status(status))


__all__ = ["Rejected", "SidecarService", "Stored"]
