"""Bounds on the values of apache.rocketmq.v2 requests besides message contents (validator.py):
entry counts, receipt handles, message ids, resource namespaces, and well-formed Timestamps and
Durations.

They exist so that no request, whatever it holds, makes the broker build an answer near its own
message size limit (``grpc_receive_message_bytes_max``, 16 MiB) or compute with absurd values:
an answer has at most SEND_MESSAGES_MAX or ACK_ENTRIES_MAX entries, each echoing at most a
MESSAGE_ID_LENGTH_MAX id and a RECEIPT_HANDLE_LENGTH_MAX handle beside a status message of at
most STATUS_MESSAGE_CHARS_MAX (protocol.py): about 2 MiB at worst. Each check raises
ProtocolError with the protocol's code for the field, and a message naming the field and limit.
"""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.grpc_service.protocol import Code, ProtocolError
from rocketbox_api.message_rules import MESSAGE_ID_LENGTH_MAX, shown
from rocketbox_api.names import TOPIC_LENGTH_MAX
from rocketbox_api.protobuf_ranges import (
    DURATION_SECONDS_MAX,
    NANOS_MAX,
    TIMESTAMP_SECONDS_MAX,
    TIMESTAMP_SECONDS_MIN,
)

# Messages in one SendMessage: the official clients send 1, the sidecar coalesces up to 1,024.
SEND_MESSAGES_MAX = 1024
# Entries in one AckMessage: the official clients ack one message per request.
ACK_ENTRIES_MAX = 1024
# The clients' ids are 34 characters (docs/rocketmq-protocol.md §5.2); MESSAGE_ID_LENGTH_MAX,
# RocketMQ's message rules' bound, lets apps of the sidecar choose up to 128.
# Ours are under 64 characters; the proxy's (docs/rocketmq-protocol.md §8.6) under 256.
RECEIPT_HANDLE_LENGTH_MAX = 512
RESOURCE_NAMESPACE_LENGTH_MAX = TOPIC_LENGTH_MAX
# A TAG expression ("tagA||tagB"); RocketMQ keeps subscriptions small too.
FILTER_EXPRESSION_LENGTH_MAX = 4096


def timestamp_ms_of(ts: Timestamp, field: str, code: int) -> int:
    """A request's Timestamp in ms, refused with ``code`` unless well-formed."""
    seconds, nanos = int(ts.seconds), int(ts.nanos)
    if not (TIMESTAMP_SECONDS_MIN <= seconds <= TIMESTAMP_SECONDS_MAX and 0 <= nanos <= NANOS_MAX):
        raise ProtocolError(
            code,
            f"{field} (seconds {seconds}, nanos {nanos}) is not a valid Timestamp: nanos "
            f"0..{NANOS_MAX}, seconds {TIMESTAMP_SECONDS_MIN}..{TIMESTAMP_SECONDS_MAX}",
        )
    return seconds * 1000 + nanos // 1_000_000


def duration_ms_of(d: Duration, field: str, code: int) -> int:
    """A request's Duration in ms, refused with ``code`` unless well-formed and not negative."""
    seconds, nanos = int(d.seconds), int(d.nanos)
    if not (0 <= seconds <= DURATION_SECONDS_MAX and 0 <= nanos <= NANOS_MAX):
        raise ProtocolError(
            code,
            f"{field} (seconds {seconds}, nanos {nanos}) is not a valid duration: seconds "
            f"0..{DURATION_SECONDS_MAX}, nanos 0..{NANOS_MAX}",
        )
    return seconds * 1000 + nanos // 1_000_000


def validate_message_id(message_id: str, field: str = "message_id") -> None:
    if not message_id.strip():
        raise ProtocolError(Code.ILLEGAL_MESSAGE_ID, f"{field} is blank")
    if len(message_id) > MESSAGE_ID_LENGTH_MAX:
        raise ProtocolError(
            Code.ILLEGAL_MESSAGE_ID,
            f"{field} is {len(message_id)} characters (limit {MESSAGE_ID_LENGTH_MAX})",
        )


def echoed_id(message_id: str) -> str:
    """A message id as an answer may echo it: not one beyond the limit."""
    return message_id if len(message_id) <= MESSAGE_ID_LENGTH_MAX else ""


def validate_receipt_handle(handle: str, field: str = "receipt_handle") -> None:
    """Handles are opaque to clients but always printable ASCII without spaces, ours too."""
    if not handle:
        raise ProtocolError(Code.INVALID_RECEIPT_HANDLE, f"{field} is empty")
    if len(handle) > RECEIPT_HANDLE_LENGTH_MAX:
        raise ProtocolError(
            Code.INVALID_RECEIPT_HANDLE,
            f"{field} is {len(handle)} characters (limit {RECEIPT_HANDLE_LENGTH_MAX})",
        )
    if not (handle.isascii() and handle.isprintable()) or " " in handle:
        raise ProtocolError(
            Code.INVALID_RECEIPT_HANDLE,
            f"{field} {shown(handle)}: printable ASCII without spaces",
        )


def validate_namespace(resource: pb.Resource, field: str, code: int) -> None:
    """``resource_namespace`` is echoed in answers (routes, assignments, messages)."""
    namespace = resource.resource_namespace
    if len(namespace) > RESOURCE_NAMESPACE_LENGTH_MAX or not namespace.isprintable():
        raise ProtocolError(
            code,
            f"{field}.resource_namespace {shown(namespace)}: at most "
            f"{RESOURCE_NAMESPACE_LENGTH_MAX} printable characters",
        )


def validate_entry_count(count: int, field: str, limit: int) -> None:
    if count == 0:
        raise ProtocolError(Code.BAD_REQUEST, f"{field} is empty (1 entry at least)")
    if count > limit:
        raise ProtocolError(Code.BAD_REQUEST, f"{field} has {count} entries (limit {limit})")
