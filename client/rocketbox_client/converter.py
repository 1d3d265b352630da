"""The client's types ↔ rocketbox.v1 protobuf. Protobuf stops here."""

from __future__ import annotations

from rocketbox_client._proto import sidecar_pb2 as api
from rocketbox_client.errors import RejectedError, RocketboxError, rejection
from rocketbox_client.message import Message, SendResult, Spooled, Stored

_CAUSE_PREFIX = "SPOOL_CAUSE_"


def to_proto(message: Message, message_id: str) -> api.Message:
    """The message as sent, with the id stamped for it (its own, when it has one)."""
    m = api.Message(
        topic=message.topic,
        body=message.body,
        keys=message.keys,
        user_properties=message.properties,
        message_id=message_id,
    )
    if message.tag is not None:
        m.tag = message.tag
    if message.message_group is not None:
        m.message_group = message.message_group
    if message.delivery_time_ms is not None:
        m.delivery_time.FromMilliseconds(message.delivery_time_ms)
    return m


def from_result(result: api.SendResult) -> SendResult | RejectedError:
    """One message's answer: Stored, Spooled, or (SendBatch only) the rejection as an error."""
    outcome = result.WhichOneof("outcome")
    if outcome == "stored":
        s = result.stored
        return Stored(
            message_id=result.message_id,
            broker_name=s.broker_name,
            queue_id=s.queue_id,
            queue_offset=s.queue_offset,
            durable=s.durable,
            attempts=s.attempts,
        )
    if outcome == "spooled":
        p = result.spooled
        return Spooled(
            message_id=result.message_id,
            cause=_cause_name(p.cause),
            detail=p.detail,
            next_attempt_time_ms=p.next_attempt_time.ToMilliseconds(),
            maybe_stored=p.maybe_stored,
        )
    if outcome == "rejected":
        r = result.rejected
        retry_after_ms = r.retry_after.ToMilliseconds() if r.HasField("retry_after") else None
        return rejection(r.code, r.field, r.reason, result.message_id, retry_after_ms)
    raise RocketboxError(
        f"the sidecar answered message {result.message_id} with no outcome", result.message_id
    )


def _cause_name(cause: int) -> str:
    """``"THROTTLED"`` for SPOOL_CAUSE_THROTTLED; a cause newer than this client
    is ``"UNKNOWN(n)"``."""
    try:
        return api.SpoolCause.Name(cause).removeprefix(_CAUSE_PREFIX)
    except ValueError:
        return f"UNKNOWN({cause})"
