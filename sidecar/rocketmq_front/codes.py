"""A rocketbox answer as the apache.rocketmq.v2 ``Code`` an official client reads.

The sidecar's one rejection type (SendRejectedError: a gRPC code, the field at fault, a reason)
becomes the code the RocketMQ proxy would have answered, so an app's SDK raises the exception it
raises against a proxy (docs/rocketmq-protocol.md §4.2):

| rejection | Code (what the Python client raises) |
|---|---|
| refused by the broker with a code of its own | that code, passed on |
| INVALID_ARGUMENT on topic, tag, keys, | ILLEGAL_TOPIC, ILLEGAL_MESSAGE_TAG, ILLEGAL_MESSAGE_KEY, |
|   message_group, delivery_time, message_id |   ILLEGAL_MESSAGE_GROUP, ILLEGAL_DELIVERY_TIME, |
|   | ILLEGAL_MESSAGE_ID (BadRequestException) |
| INVALID_ARGUMENT on user_properties | ILLEGAL_MESSAGE_PROPERTY_KEY (BadRequestException); |
|   | over a count or size limit MESSAGE_PROPERTIES_TOO_LARGE |
|   | (RequestHeaderFieldsTooLargeException) |
| INVALID_ARGUMENT on body | MESSAGE_BODY_EMPTY (PayloadEmptyException), else |
|   | MESSAGE_BODY_TOO_LARGE (PayloadTooLargeException) |
| INVALID_ARGUMENT on message_type | MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (BadRequestException) |
| any other INVALID_ARGUMENT (namespace, | BAD_REQUEST (BadRequestException) |
|   body_encoding, the request's limits) | |
| NOT_FOUND | TOPIC_NOT_FOUND (NotFoundException) |
| RESOURCE_EXHAUSTED (outbox full, | TOO_MANY_REQUESTS (TooManyRequestsException, never retried) |
|   intake_in_flight_max) | |
| UNAVAILABLE (shutting down, the outbox | INTERNAL_ERROR (InternalErrorException, retried) |
|   cannot write) | |
| INTERNAL (a bug) | INTERNAL_SERVER_ERROR (InternalErrorException) |

TOO_MANY_REQUESTS is the only code both clients treat as "slow down"
(docs/rocketmq-protocol.md §4.3): a full outbox or admission control says exactly that. UNAVAILABLE
has no code of its own in the protocol; the clients retry every code but TOO_MANY_REQUESTS at once,
which is what a sidecar that is stopping or cannot spool asks for (the app's next attempt may reach
a sidecar that can). It is answered INTERNAL_ERROR, apart from a bug's INTERNAL_SERVER_ERROR, so
logs tell the two apart.
"""

from __future__ import annotations

import grpc
from rocketmq.grpc_protocol import Code

from sidecar.errors import SendRejectedError

INVALID_ARGUMENT_CODES: dict[str, int] = {
    "topic": Code.ILLEGAL_TOPIC,
    "tag": Code.ILLEGAL_MESSAGE_TAG,
    "keys": Code.ILLEGAL_MESSAGE_KEY,
    "message_group": Code.ILLEGAL_MESSAGE_GROUP,
    "user_properties": Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    "delivery_time": Code.ILLEGAL_DELIVERY_TIME,
    "message_id": Code.ILLEGAL_MESSAGE_ID,
    "body": Code.MESSAGE_BODY_TOO_LARGE,
    "message_type": Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
}
STATUS_CODES: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.NOT_FOUND: Code.TOPIC_NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Code.TOO_MANY_REQUESTS,
    grpc.StatusCode.UNAVAILABLE: Code.INTERNAL_ERROR,
    grpc.StatusCode.INTERNAL: Code.INTERNAL_SERVER_ERROR,
}
# The stubs leave Code untyped: its values as ints, once.
INTERNAL_SERVER_ERROR = int(Code.INTERNAL_SERVER_ERROR)
BODY_EMPTY = int(Code.MESSAGE_BODY_EMPTY)
BODY_TOO_LARGE = int(Code.MESSAGE_BODY_TOO_LARGE)
PROPERTIES_TOO_LARGE = int(Code.MESSAGE_PROPERTIES_TOO_LARGE)
BAD_REQUEST = int(Code.BAD_REQUEST)
# The words of the message rules' limits on a count or a size ("…; the limit is N",
# rocketbox_api/message_rules.py): a property over them is too large, not illegal.
LIMIT_WORDS = "; the limit is"


def rocketmq_code(e: SendRejectedError) -> int:
    """The Code an official client is answered for this rejection."""
    if e.rocketmq_code:
        return e.rocketmq_code
    if e.code != grpc.StatusCode.INVALID_ARGUMENT:
        return STATUS_CODES.get(e.code, INTERNAL_SERVER_ERROR)
    if e.field == "body":
        return BODY_EMPTY if e.reason.startswith("is empty") else BODY_TOO_LARGE
    if e.field == "user_properties" and LIMIT_WORDS in e.reason:
        return PROPERTIES_TOO_LARGE
    return INVALID_ARGUMENT_CODES.get(e.field, BAD_REQUEST)


def reason(e: SendRejectedError) -> str:
    """The status message: the field and why, and when to try again if that may work."""
    text = f"{e.field}: {e.reason}" if e.field else e.reason
    if e.retry_after_ms:
        text += f" (retry after {e.retry_after_ms} ms)"
    return text
