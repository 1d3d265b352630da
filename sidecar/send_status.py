"""What a broker's answer means for the message: the cause classification of docs/design.md §4.2, in
one place for the send path, the resend path and route lookups.

| answer | meaning |
|---|---|
| OK | stored, durable |
| MASTER/SLAVE_PERSISTENCE_TIMEOUT, HA_NOT_AVAILABLE | stored, weak: never resent |
| TOO_MANY_REQUESTS, gRPC RESOURCE_EXHAUSTED | THROTTLED: no immediate retry (RocketMQ's rule) |
| an ILLEGAL_*/BODY/PROPERTIES/TOPIC_NOT_FOUND code | terminal: rejected, naming the field |
| PROXY_TIMEOUT, REQUEST_TIMEOUT, gRPC DEADLINE_EXCEEDED/CANCELLED | AMBIGUOUS: maybe stored |
| gRPC UNAVAILABLE before a connection existed | UNAVAILABLE, certainly not stored |
| gRPC UNAVAILABLE on a live connection, other errors | UNAVAILABLE, maybe stored |
| UNAUTHORIZED, gRPC UNAUTHENTICATED | UNAUTHORIZED: the sidecar's credentials were refused |
| FORBIDDEN, gRPC PERMISSION_DENIED | FORBIDDEN: the sidecar may not send to the topic |
| any other code (INTERNAL_*, …) | UNAVAILABLE: the broker said it failed |

Auth failures are spooled rather than rejected: they are the sidecar's configuration, not the
message, and the message must survive until an operator fixes it. They are resent with the
back-off like any spooled message, and drain once the credentials or the rights are fixed.
"""

from __future__ import annotations

import grpc
from rocketmq.grpc_protocol import Code

from outbox.entry import SpoolCause
from sidecar.errors import SendFailedError, SendRejectedError

STORED_DURABLE = frozenset({Code.OK})
STORED_WEAK = frozenset(
    {Code.MASTER_PERSISTENCE_TIMEOUT, Code.SLAVE_PERSISTENCE_TIMEOUT, Code.HA_NOT_AVAILABLE}
)
AMBIGUOUS_CODES = frozenset({Code.PROXY_TIMEOUT, Code.REQUEST_TIMEOUT})
# The broker's refusals of the sidecar itself, by its answer's code or gRPC status.
AUTH_CAUSES: dict[int, SpoolCause] = {
    Code.UNAUTHORIZED: SpoolCause.UNAUTHORIZED,
    Code.FORBIDDEN: SpoolCause.FORBIDDEN,
}
AUTH_RPC_CAUSES = {
    grpc.StatusCode.UNAUTHENTICATED: SpoolCause.UNAUTHORIZED,
    grpc.StatusCode.PERMISSION_DENIED: SpoolCause.FORBIDDEN,
}
# Terminal codes → the field of rocketbox.v1.Message they are about.
REJECTED_FIELDS: dict[int, str] = {
    Code.ILLEGAL_TOPIC: "topic",
    Code.TOPIC_NOT_FOUND: "topic",
    Code.ILLEGAL_MESSAGE_TAG: "tag",
    Code.ILLEGAL_MESSAGE_KEY: "keys",
    Code.ILLEGAL_MESSAGE_GROUP: "message_group",
    Code.ILLEGAL_MESSAGE_PROPERTY_KEY: "user_properties",
    Code.MESSAGE_PROPERTIES_TOO_LARGE: "user_properties",
    Code.ILLEGAL_MESSAGE_ID: "message_id",
    Code.ILLEGAL_DELIVERY_TIME: "delivery_time",
    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: "topic",
    Code.MESSAGE_BODY_TOO_LARGE: "body",
    Code.PAYLOAD_TOO_LARGE: "body",
    Code.MESSAGE_BODY_EMPTY: "body",
    Code.MESSAGE_CORRUPTED: "message",
    Code.BAD_REQUEST: "message",
}
# Words of grpc-core's errors when no connection could be made: the request never left.
NOT_CONNECTED_MARKERS = (
    "failed to connect",
    "connection refused",
    "connect failed",
    "no connection",
    "dns resolution failed",
)


def check_send_status(code: int, message: str) -> bool:
    """For a broker's answer to SendMessage: True when stored durably, False when stored weakly;
    raises SendRejectedError (terminal) or SendFailedError (spool) otherwise."""
    if code in STORED_DURABLE:
        return True
    if code in STORED_WEAK:
        return False
    name = Code.Name(code) if code in Code.values() else str(code)
    detail = f"{name}: {message}" if message else name
    if code == Code.TOO_MANY_REQUESTS:
        raise SendFailedError(SpoolCause.THROTTLED, detail)
    field = REJECTED_FIELDS.get(code)
    if field is not None:
        grpc_code = (
            grpc.StatusCode.NOT_FOUND
            if code == Code.TOPIC_NOT_FOUND
            else grpc.StatusCode.INVALID_ARGUMENT
        )
        raise SendRejectedError(
            field, f"refused by the broker: {detail}", code=grpc_code, rocketmq_code=code
        )
    if code in AMBIGUOUS_CODES:
        raise SendFailedError(SpoolCause.AMBIGUOUS, detail, maybe_stored=True)
    raise SendFailedError(AUTH_CAUSES.get(code, SpoolCause.UNAVAILABLE), detail)


def classify_rpc_error(e: BaseException) -> SendFailedError:
    """A failed RPC (no answer from the broker) as a spool cause."""
    if not isinstance(e, grpc.aio.AioRpcError):
        return SendFailedError(SpoolCause.UNAVAILABLE, f"{type(e).__name__}: {e}")
    code = e.code()
    detail = f"{code.name}: {e.details() or ''}"
    if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return SendFailedError(SpoolCause.AMBIGUOUS, detail, maybe_stored=True)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return SendFailedError(SpoolCause.THROTTLED, detail)
    if code in AUTH_RPC_CAUSES:  # refused before anything was stored
        return SendFailedError(AUTH_RPC_CAUSES[code], detail)
    if code == grpc.StatusCode.UNAVAILABLE:
        text = f"{e.details()} {e.debug_error_string()}".lower()
        never_sent = any(marker in text for marker in NOT_CONNECTED_MARKERS)
        return SendFailedError(SpoolCause.UNAVAILABLE, detail, maybe_stored=not never_sent)
    return SendFailedError(SpoolCause.UNAVAILABLE, detail, maybe_stored=True)
