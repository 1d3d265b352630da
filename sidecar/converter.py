"""rocketbox.v1 protobuf ↔ the sidecar's domain types. Protobuf stops here.

A rejection (SendRejectedError, sidecar/errors.py) becomes an answer in ``to_rejection`` only:
SendBatch and SendStream carry that Rejection; Send's call status is the same Rejection
(``rejection_status``), so the three calls cannot disagree on a code.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2, timestamp_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from outbox.entry import OutboxMessage, SpoolCause
from rocketbox_api.tracing import traced_properties
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.delivery_budget import delivery_timeout_ms_of
from sidecar.errors import SendRejectedError
from sidecar.intake import Accepted, Stored
from sidecar.message_id import MessageIdGenerator
from sidecar.validation import validate_timestamp

STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}
SPOOL_CAUSES: dict[SpoolCause, int] = {
    SpoolCause.THROTTLED: api.SPOOL_CAUSE_THROTTLED,
    SpoolCause.UNAVAILABLE: api.SPOOL_CAUSE_UNAVAILABLE,
    SpoolCause.AMBIGUOUS: api.SPOOL_CAUSE_AMBIGUOUS,
    SpoolCause.FIFO_FENCE: api.SPOOL_CAUSE_FIFO_FENCE,
    SpoolCause.UNAUTHORIZED: api.SPOOL_CAUSE_UNAUTHORIZED,
    SpoolCause.FORBIDDEN: api.SPOOL_CAUSE_FORBIDDEN,
}


def message_id_of(m: api.Message, ids: MessageIdGenerator) -> str:
    """The message's id: the app's own, or one stamped now, once (before anything else can fail,
    so that every answer, a rejection too, carries it)."""
    return m.message_id if m.HasField("message_id") else ids.next_id()


def to_outbox_message(
    m: api.Message, message_id: str, now_ms: int, trace: dict[str, str] | None = None
) -> OutboxMessage:
    """The app's message under ``message_id``, with the call's ``trace`` context unless it
    has its own; raises SendRejectedError for what cannot be converted (a Timestamp outside its
    range)."""
    delivery_timestamp_ms = None
    if m.HasField("delivery_time"):
        t = m.delivery_time
        validate_timestamp("delivery_time", t.seconds, t.nanos)
        delivery_timestamp_ms = t.ToMilliseconds()
    delivery_timeout_ms = None
    if m.HasField("delivery_timeout"):
        d = m.delivery_timeout
        delivery_timeout_ms = delivery_timeout_ms_of("delivery_timeout", d.seconds, d.nanos)
    return OutboxMessage(
        topic=m.topic,
        body=m.body,
        message_id=message_id,
        tag=m.tag if m.HasField("tag") else None,
        keys=tuple(m.keys),
        message_group=m.message_group if m.HasField("message_group") else None,
        delivery_timestamp_ms=delivery_timestamp_ms,
        properties=traced_properties(m.user_properties, trace),
        born_timestamp_ms=now_ms,
        delivery_timeout_ms=delivery_timeout_ms,
    )


def to_result(message_id: str, accepted: Accepted) -> api.SendResult:
    if isinstance(accepted, Stored):
        r = accepted.receipt
        return api.SendResult(
            message_id=message_id,
            stored=api.Stored(
                broker_name=r.broker_name,
                queue_id=r.queue_id,
                queue_offset=r.queue_offset,
                durable=r.durable,
                attempts=r.attempts,
            ),
        )
    entry = accepted.entry
    next_attempt = timestamp_pb2.Timestamp()
    next_attempt.FromMilliseconds(entry.next_send_time_ms)
    return api.SendResult(
        message_id=message_id,
        spooled=api.Spooled(
            cause=SPOOL_CAUSES[entry.cause],  # type: ignore[arg-type]  # the stubs type enum fields as their wrapper, not int
            detail=entry.last_error.removeprefix(f"{entry.cause.value}: "),
            next_attempt_time=next_attempt,
            maybe_stored=entry.maybe_stored,
        ),
    )


def to_outcome_result(message_id: str, accepted: Accepted) -> api.SendResult:
    """STORED or SPOOLED and nothing more: the answer when ``to_result`` failed, which must still
    say the message was taken."""
    if isinstance(accepted, Stored):
        return api.SendResult(message_id=message_id, stored=api.Stored())
    return api.SendResult(message_id=message_id, spooled=api.Spooled())


def to_rejection(e: SendRejectedError) -> api.Rejection:
    """The one mapping of a rejection to what the app is told."""
    rejection = api.Rejection(code=e.code.value[0], field=e.field, reason=e.reason)
    if e.retry_after_ms:
        rejection.retry_after.CopyFrom(duration_from_ms(e.retry_after_ms))
    return rejection


def to_rejected(message_id: str, e: SendRejectedError) -> api.SendResult:
    return api.SendResult(message_id=message_id, rejected=to_rejection(e))


def rejection_status(r: api.Rejection) -> grpc.Status:
    """The Rejection as a call's status: its code, ``field: reason`` as the message, and the
    google.rpc details a client library reads (BadRequest naming the field, RetryInfo)."""
    details: list[any_pb2.Any] = []
    if r.field:
        violation = error_details_pb2.BadRequest.FieldViolation(field=r.field, description=r.reason)
        details.append(_packed(error_details_pb2.BadRequest(field_violations=[violation])))
    if r.HasField("retry_after"):
        details.append(_packed(error_details_pb2.RetryInfo(retry_delay=r.retry_after)))
    code = STATUS_CODES[r.code]
    status = status_pb2.Status(
        code=getattr(code_pb2, code.name),
        message=f"{r.field}: {r.reason}" if r.field else r.reason,
        details=details,
    )
    return rpc_status.to_status(status)


def _packed(detail: error_details_pb2.BadRequest | error_details_pb2.RetryInfo) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(detail)
    return packed


def duration_from_ms(ms: int) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromMilliseconds(ms)
    return d
