"""The app-facing gRPC service (rocketbox.v1.SidecarService): validate → convert → intake.

Every message gets exactly one answer, and the structure is what guarantees it: everything done
for one message (its id stamped, conversion, validation, admission, intake, metrics) runs inside
one boundary, ``accept``, which turns whatever it raises into that message's outcome. The
calls around it only route answers:

- Send: a rejection is the call's status, with google.rpc details;
- SendBatch: one answer per message, in request order. The call fails as a whole only for its own
  limits (messages, bytes), checked before any message is started; once one may be stored, never;
- SendStream: every request read is answered with its request_id (a request without a message
  too), and the stream ends only after the last of those answers went out (sidecar/send_stream.py).
  A request whose request_id is in flight is answered REJECTED naming request_id, unsent.

A message is rejected by one exception type, SendRejectedError (sidecar/errors.py), raised where
the refusal is known and never translated on its way; its answer is built in one place
(converter.py's ``to_rejection``), and Send's call status is that same answer:

| rejected by | code (Send: + google.rpc details) |
|---|---|
| conversion, validation, the broker | INVALID_ARGUMENT / NOT_FOUND, naming the field (BadRequest) |
| the outbox's bound (intake) | RESOURCE_EXHAUSTED + retry-after (RetryInfo) |
| more than intake_in_flight_max inside | RESOURCE_EXHAUSTED + retry-after |
| shutting down; an outbox that cannot spool (intake) | UNAVAILABLE + retry-after |
| anything else raised: a bug | INTERNAL, the traceback logged |

An answer is never UNKNOWN.

The RocketMQ front's SendMessage (sidecar/rocketmq_front/send.py) passes its messages through
the same ``accept``, ``batch_refusal`` and ``record_when_done``: admission control, the shutting
down refusal, the metrics, the ledger and the INTERNAL net are this module's alone, whichever API
a message came by; the front only converts and words the answers in its protocol.
A bug is logged with its traceback at most once per ``INTERNAL_ERROR_LOG_INTERVAL_S``, with the
count of those left out (rocketbox_api/rate_limited_log.py): a bug every message hits must not
flood the log. Once a message is
STORED or SPOOLED its answer says so whatever fails after (counting it, building the result): a
rejection then would have the app resend, and duplicate, a message already taken.

``on_sent`` (the acknowledgement ledger, sidecar/ledger.py) is given the STORED and SPOOLED
answers once gRPC has sent them: for Send and SendBatch when the call finished without being
cancelled (its done callback), for SendStream once the response was written to the stream. The
answers of a call cancelled before the sidecar replied are never given to it.

Trace context: a call's W3C ``traceparent`` / ``tracestate`` metadata is read once per call, by
the handler (sidecar/tracing.py), and added to each of its messages' properties unless the
message has its own: what a consumer receives links to the app's trace.

Admission control: at most ``intake_in_flight_max`` messages are inside the sidecar at once
(from intake to answer, over all calls). One more is refused at once with RESOURCE_EXHAUSTED and
a retry-after rather than queued, so under overload the latency of what is accepted stays bounded
and the excess costs the sidecar next to nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from prometheus_client import Counter, Histogram

from outbox.entry import OutboxMessage
from rocketbox_api.rate_limited_log import RateLimitedLog
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from sidecar.clock import now_ms
from sidecar.converter import (
    message_id_of,
    rejection_status,
    to_outbox_message,
    to_outcome_result,
    to_rejected,
    to_rejection,
    to_result,
)
from sidecar.errors import SendRejectedError, internal_error
from sidecar.intake import Accepted, Intake, Stored
from sidecar.ledger import SentAnswer
from sidecar.message_id import MessageIdGenerator
from sidecar.metrics import SidecarMetrics
from sidecar.send_stream import answer_stream
from sidecar.tracing import call_trace

LOG = logging.getLogger(__name__)
SHUTTING_DOWN_RETRY_AFTER_MS = 1_000
# What an app refused by admission control waits: a few coalesced requests' time.
INTAKE_FULL_RETRY_AFTER_MS = 100
# A bug's traceback is logged at most this often (the others are counted).
INTERNAL_ERROR_LOG_INTERVAL_S = 10.0
# Never raised, only answered: one object serves every request without a message.
MESSAGE_REQUIRED = SendRejectedError("message", "is required")
REQUEST_ID_IN_FLIGHT = SendRejectedError(
    "request_id",
    "is a request of this stream not yet answered: unique among the requests in flight, "
    "the same id may come again once its answer is read (this message was not sent)",
)

# One message's answer, and what on_sent is given once it was sent (STORED and SPOOLED only).
Answer = tuple[api.SendResult, SentAnswer | None]
StreamAnswer = tuple[api.SendStreamResponse, SentAnswer | None]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One message's outcome at the boundary, whichever API it came by: STORED or SPOOLED
    (``sent``: what ``on_sent`` is given once the answer went out), or REJECTED."""

    message_id: str
    answer: Accepted | SendRejectedError
    sent: SentAnswer | None


class SidecarService(sidecar_pb2_grpc.SidecarServiceServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    def __init__(
        self,
        intake: Intake,
        send_batch_entries_max: int,
        send_batch_bytes_max: int,
        send_stream_in_flight_max: int,
        intake_in_flight_max: int,
        on_sent: Callable[[int, Sequence[SentAnswer]], None] | None = None,
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
        self._on_sent = on_sent
        self._metrics = metrics or SidecarMetrics()
        # Two budgets: a failure after an answer (a metric, the ledger) must not hide a bug
        # that answers INTERNAL, nor the other way round.
        self.internal_errors = RateLimitedLog(LOG, logging.ERROR, INTERNAL_ERROR_LOG_INTERVAL_S)
        self.after_answer_errors = RateLimitedLog(LOG, logging.ERROR, INTERNAL_ERROR_LOG_INTERVAL_S)
        self.accepting = True

    # -- one message: the boundary -----------------------------------------------------------
    async def accept(
        self, stamp: Callable[[], str], convert: Callable[[str], OutboxMessage]
    ) -> Outcome:
        """One message through the boundary, from either API: its id (``stamp``), its
        conversion (``convert``), admission, intake and metrics. Whatever these raise becomes the
        message's answer: a SendRejectedError as itself, anything else INTERNAL. Raises only
        CancelledError (the call is gone: nobody is left to answer)."""
        started_s = time.monotonic()
        message_id = ""
        try:
            message_id = stamp()
            message = convert(message_id)
            accepted = await self._admit(message)
        except SendRejectedError as e:
            rejected = e
        except Exception as e:
            _log(self.internal_errors, "a message answered INTERNAL: an unexpected error", e,
                 message_id)  # fmt: skip
            rejected = internal_error(e)
        else:
            if isinstance(accepted, Stored):
                self._count("STORED", "", started_s, message_id)
            else:
                self._count("SPOOLED", accepted.entry.cause.value, started_s, message_id)
            return Outcome(message_id, accepted, (message_id, message.topic, accepted))
        self._count("REJECTED", rejected.code.name, started_s, message_id)
        return Outcome(message_id, rejected, None)

    def failed(self, e: BaseException, message_id: str = "") -> Outcome:
        """The outcome of a message whose handling failed outside ``accept``'s own net."""
        _log(
            self.internal_errors, "a message answered INTERNAL outside its boundary", e, message_id
        )
        return Outcome(message_id, internal_error(e), None)

    async def _answer_one(self, trace: dict[str, str] | None, m: api.Message) -> Answer:
        """This message's rocketbox.v1 answer (``accept``); ``trace``: the call's trace
        context (sidecar/tracing.py), added to its properties."""
        outcome = await self.accept(
            functools.partial(message_id_of, m, self._ids),
            lambda message_id: to_outbox_message(m, message_id, now_ms(), trace),
        )
        if isinstance(outcome.answer, SendRejectedError):
            return to_rejected(outcome.message_id, outcome.answer), None
        return self._result(outcome.message_id, outcome.answer), outcome.sent

    def _result(self, message_id: str, accepted: Accepted) -> api.SendResult:
        """STORED or SPOOLED, in full when the result can be built, else the outcome alone."""
        try:
            return to_result(message_id, accepted)
        except Exception as e:
            _log(self.after_answer_errors, "building a result failed; answered the outcome "
                 "alone", e, message_id)  # fmt: skip
            return to_outcome_result(message_id, accepted)

    def _count(self, state: str, cause: str, started_s: float, message_id: str) -> None:
        try:
            # The labelled children are looked up once per (state, cause), not per message.
            children = self._children.get((state, cause))
            if children is None:
                children = self._children[(state, cause)] = (
                    self._metrics.sends.labels(state, cause),
                    self._metrics.send_seconds.labels(state),
                )
            children[0].inc()
            children[1].observe(time.monotonic() - started_s)
        except Exception as e:  # a metric must never change an answer
            _log(self.after_answer_errors, "counting an answer failed", e, message_id)

    async def _admit(self, message: OutboxMessage) -> Accepted:
        """Intake's answer, once admission control let the message in."""
        if not self.accepting:
            raise SendRejectedError(
                "", "the sidecar is shutting down", grpc.StatusCode.UNAVAILABLE,
                SHUTTING_DOWN_RETRY_AFTER_MS,
            )  # fmt: skip
        if self.intake_in_flight >= self._intake_in_flight_max:
            raise SendRejectedError(
                "", f"the sidecar is at its limit of {self._intake_in_flight_max} messages in "
                "flight (intake_in_flight_max)", grpc.StatusCode.RESOURCE_EXHAUSTED,
                INTAKE_FULL_RETRY_AFTER_MS,
            )  # fmt: skip
        self.intake_in_flight += 1
        try:
            return await self._intake.accept(message)
        finally:
            self.intake_in_flight -= 1

    def _failed(self, e: BaseException, message_id: str = "") -> api.SendResult:
        """The rocketbox.v1 answer of a message whose handling failed outside ``accept``."""
        rejected = self.failed(e, message_id).answer
        assert isinstance(rejected, SendRejectedError)
        return to_rejected(message_id, rejected)

    def batch_refusal(self, count: int, size_bytes: int) -> SendRejectedError | None:
        """Why a request of ``count`` messages of ``size_bytes`` bodies is refused as a whole,
        before any of its messages is started (send_batch_entries_max, send_batch_bytes_max)."""
        if count > self._batch_entries_max:
            limit = self._batch_entries_max
            return SendRejectedError("messages", f"has {count} messages; the limit is {limit}")
        if size_bytes > self._batch_bytes_max:
            limit = self._batch_bytes_max
            return SendRejectedError(
                "messages", f"bodies total {size_bytes} bytes; the limit is {limit}"
            )
        return None

    # -- what was sent ---------------------------------------------------------------------------
    def record_when_done(
        self, context: grpc.aio.ServicerContext[Any, Any], sent: list[SentAnswer]
    ) -> None:
        if self._on_sent is not None and sent:
            done = functools.partial(self._call_done, sent)
            context.add_done_callback(done)  # type: ignore[arg-type]  # the stubs type the callback as a class of their own, which no function matches

    def _call_done(
        self, sent: list[SentAnswer], context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        # Called once gRPC finished the call. done(): the handler returned and gRPC sent its
        # response and status (a client that cancels while the handler runs cancels the handler,
        # which then registers nothing). gRPC does not tell a handler whether that last write
        # failed: a cancel crossing the answer on the wire is recorded as sent (sidecar/ledger.py).
        if context.done() and not context.cancelled():
            self._record(sent)

    def _record(self, sent: Sequence[SentAnswer]) -> None:
        assert self._on_sent is not None
        try:
            self._on_sent(now_ms(), sent)
        except Exception as e:  # the answers went out: recording them cannot change them
            _log(self.after_answer_errors, "recording answers that were sent failed", e, sent[0][0])

    # -- the calls ---------------------------------------------------------------------------------
    async def Send(  # noqa: N802 - the API's name
        self, request: api.SendRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.SendResponse:
        if not request.HasField("message"):
            await _abort(context, to_rejection(MESSAGE_REQUIRED))
        result, sent = await self._answer_one(call_trace(context), request.message)
        if result.HasField("rejected"):
            await _abort(context, result.rejected)
        if sent is not None:
            self.record_when_done(context, [sent])
        return api.SendResponse(result=result)

    async def SendBatch(  # noqa: N802 - the protocol's method name
        self, request: api.SendBatchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.SendBatchResponse:
        # The whole-call refusals: before any message is started, so none may be stored.
        refusal = self.batch_refusal(
            len(request.messages), sum(len(m.body) for m in request.messages)
        )
        if refusal is not None:
            await _abort(context, to_rejection(refusal))
        # Tasks are created in request order, and intake serialises a FIFO group in the order its
        # messages arrive: a group's messages keep their request order; the rest go in parallel.
        # _answer_one answers for itself; return_exceptions is the net under it, so that one
        # message's failure can never fail the call its neighbours were stored in.
        trace = call_trace(context)
        outcomes = await asyncio.gather(
            *(self._answer_one(trace, m) for m in request.messages), return_exceptions=True
        )
        results: list[api.SendResult] = []
        sent: list[SentAnswer] = []
        for m, outcome in zip(request.messages, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                results.append(self._failed(outcome, _app_id(m)))
                continue
            results.append(outcome[0])
            if outcome[1] is not None:
                sent.append(outcome[1])
        self.record_when_done(context, sent)
        return api.SendBatchResponse(results=results)

    async def SendStream(  # noqa: N802 - the protocol's method name
        self,
        request_iterator: AsyncIterator[api.SendStreamRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[api.SendStreamResponse]:
        answer = functools.partial(self._stream_answer, call_trace(context))
        answers = answer_stream(
            request_iterator,
            answer,
            self._stream_in_flight_max,
            _request_id,
            _duplicate_refusal,
        )
        async with contextlib.aclosing(answers):
            async for response, sent in answers:
                yield response
                # Resumed only once gRPC wrote the response to the stream.
                if sent is not None and self._on_sent is not None:
                    self._record((sent,))

    async def _stream_answer(
        self, trace: dict[str, str] | None, request: api.SendStreamRequest
    ) -> StreamAnswer:
        try:
            if not request.HasField("message"):
                result, sent = to_rejected("", MESSAGE_REQUIRED), None
            else:
                result, sent = await self._answer_one(trace, request.message)
        except Exception as e:
            result, sent = self._failed(e, _app_id(request.message)), None
        return api.SendStreamResponse(request_id=request.request_id, result=result), sent


def _request_id(request: api.SendStreamRequest) -> int:
    return int(request.request_id)


def _duplicate_refusal(request: api.SendStreamRequest) -> StreamAnswer:
    """The answer of a request whose request_id is in flight (sidecar/send_stream.py): never
    sent, so nothing to record."""
    result = to_rejected(_app_id(request.message), REQUEST_ID_IN_FLIGHT)
    return api.SendStreamResponse(request_id=request.request_id, result=result), None


def _log(errors: RateLimitedLog, what: str, e: BaseException, message_id: str) -> None:
    errors.log("%s (message %s)", what, message_id or "without an id", exc_info=e)


def _app_id(m: api.Message) -> str:
    return m.message_id if m.HasField("message_id") else ""


async def _abort(context: grpc.aio.ServicerContext[Any, Any], r: api.Rejection) -> NoReturn:
    await context.abort_with_status(rejection_status(r))
    raise AssertionError("abort returns only by raising")


__all__ = ["Outcome", "SidecarService", "Stored"]
