"""The client's exceptions, and the one place where gRPC's errors become them.

    RocketboxError                  retriable?
    ├── RejectedError               (per subclass; the base for a code this client does not know)
    │   ├── InvalidMessageError     no:  INVALID_ARGUMENT, ``field`` names what is wrong
    │   │   └── RequestTooLargeError no: the request was over gRPC's size cap (the sidecar's or
    │   │                                the client's; gRPC's own RESOURCE_EXHAUSTED)
    │   ├── TopicNotFoundError      no:  NOT_FOUND, the topic does not exist (field "topic")
    │   ├── ResourceExhaustedError  yes, after ``retry_after_ms``: the sidecar's outbox or intake
    │   │                                is full, or the batching sender's buffer stayed full
    │   └── UnavailableError        yes: the sidecar was unreachable or shutting down, also after
    │                                    the client's own retries; nothing was accepted
    ├── DeadlineExceededError       yes, with the same message id: the deadline passed before an
    │                                    answer; the message MAY OR MAY NOT be stored
    └── UnauthenticatedError        no:  the sidecar requires a token and the call carried none,
                                         or another (the client's ``token``); nothing was taken

A rejected message was not taken: nothing of it is stored or spooled. Every error carries the
message's id (``None`` for a whole-request error of ``send_batch``). ``RocketboxError`` itself
is raised for a gRPC status the sidecar's API does not answer with (a fault, not an outcome).

``translate`` is the boundary: every ``grpc.RpcError`` the client meets goes through it, and the
error it returns has the gRPC error as its ``__cause__``. It reads gRPC's rich error model from
the ``grpc-status-details-bin`` trailer itself, with googleapis-common-protos' ``google.rpc``
messages (BadRequest for the field, RetryInfo for the retry-after).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, cast

import grpc
from google.rpc import error_details_pb2, status_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"
# How gRPC's core words its refusal of a message over its size cap (grpc/src/core's message
# size filter): "Received message larger than max (N vs. M)" from the sidecar's receive cap,
# "CLIENT: Sent message larger than max (N vs. M)" from this client's own send cap.
GRPC_TOO_LARGE_TEXT = "message larger than max ("
_CODES_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


class RocketboxError(Exception):
    """The base of every error the client raises."""

    retriable: ClassVar[bool] = False

    def __init__(self, text: str, message_id: str | None = None) -> None:
        super().__init__(text)
        self.message_id = message_id


class RejectedError(RocketboxError):
    """The sidecar did not take the message; ``code`` says why, ``field`` names the message's
    field at fault (``""`` when none), ``reason`` says what is wrong, with the limit."""

    def __init__(
        self,
        code: grpc.StatusCode,
        field: str,
        reason: str,
        message_id: str | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        where = f"{field}: " if field else ""
        about = f" (message {message_id})" if message_id else ""
        super().__init__(f"{code.name}: {where}{reason}{about}", message_id)
        self.code = code
        self.field = field
        self.reason = reason
        self.retry_after_ms = retry_after_ms


class InvalidMessageError(RejectedError):
    """INVALID_ARGUMENT: the message breaks one of RocketMQ's limits; resending it as is fails
    the same way."""


class RequestTooLargeError(InvalidMessageError):
    """The request was larger than gRPC's size cap, the sidecar's receive cap or this client's
    send cap (the same by default), far above the API's limits (4 MiB of body a message, 16 MiB
    of bodies a batch). gRPC itself refused it with RESOURCE_EXHAUSTED before the sidecar read
    it; unlike the sidecar's own RESOURCE_EXHAUSTED ("full, retry later") sending it again fails
    the same way. ``code`` stays gRPC's."""


class TopicNotFoundError(RejectedError):
    """NOT_FOUND: the topic does not exist and the broker does not create topics on use."""


class ResourceExhaustedError(RejectedError):
    """RESOURCE_EXHAUSTED: the sidecar's outbox (or intake) is full, or the batching sender's
    buffer stayed full for the whole deadline. Try again after ``retry_after_ms``."""

    retriable = True


class UnavailableError(RejectedError):
    """UNAVAILABLE: the sidecar could not be reached or is shutting down, after the client's own
    retries; nothing was accepted."""

    retriable = True


class DeadlineExceededError(RocketboxError):
    """The deadline passed before the sidecar answered. The message may or may not be stored:
    the sidecar may still store or spool it. Sending it again with the same ``message_id`` is
    safe for consumers that deduplicate by it (delivery is at least once)."""

    retriable = True


_REJECTIONS: dict[grpc.StatusCode, type[RejectedError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidMessageError,
    grpc.StatusCode.NOT_FOUND: TopicNotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
}


def rejection(
    code: grpc.StatusCode | int,
    field: str,
    reason: str,
    message_id: str | None,
    retry_after_ms: int | None = None,
) -> RejectedError:
    """The error for a rejection: a Send's status, or a SendBatch entry's Rejection (its code is
    a google.rpc.Code number, which is gRPC's)."""
    if isinstance(code, int):
        code = _CODES_BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN)
    kind = _REJECTIONS.get(code, RejectedError)
    return kind(code, field, reason, message_id, retry_after_ms)


class UnauthenticatedError(RocketboxError):
    """The sidecar refused the call: it requires a bearer token (``token=``) and this one is
    missing or not its own. Nothing was taken; fix the token, then send again."""


def deadline_exceeded(
    message_id: str | None, timeout_s: float, detail: str, sent: bool = True
) -> DeadlineExceededError:
    """``sent`` False: the deadline passed before the message left the client."""
    about = f"message {message_id}" if message_id else "the batch"
    fate = (
        "it may or may not be stored (sending it again with the same message id is safe for "
        "consumers that deduplicate by it)"
        if sent
        else "it was not sent"
    )
    return DeadlineExceededError(
        f"{about}: no answer within the deadline ({timeout_s:g} s): {detail}; {fate}", message_id
    )


def translate(error: grpc.RpcError, message_id: str | None, timeout_s: float) -> RocketboxError:
    """The client's error for a failed call, chained to it. ``timeout_s``: the call's deadline,
    for the text of a DeadlineExceededError."""
    code = error.code()
    details = error.details() or ""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        translated: RocketboxError = deadline_exceeded(message_id, timeout_s, details)
    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED and GRPC_TOO_LARGE_TEXT in details:
        translated = RequestTooLargeError(
            code, "", f"the request is too large for the sidecar ({details}); it can never pass: "
            "send smaller messages or fewer per batch", message_id,
        )  # fmt: skip
    elif code == grpc.StatusCode.UNAUTHENTICATED:
        about = f" (message {message_id})" if message_id else ""
        translated = UnauthenticatedError(f"the sidecar refused the call: {details}{about}",
                                          message_id)  # fmt: skip
    elif code in _REJECTIONS:
        field, reason, retry_after_ms = _rich_details(error, details)
        translated = rejection(code, field, reason, message_id, retry_after_ms)
    else:
        about = f" (message {message_id})" if message_id else ""
        translated = RocketboxError(
            f"the sidecar call failed: {code.name}: {details}{about}", message_id
        )
    translated.__cause__ = error
    return translated


def _rich_details(error: grpc.RpcError, details: str) -> tuple[str, str, int | None]:
    """(field, reason, retry_after_ms) from google.rpc.BadRequest and RetryInfo; without them,
    the status message is the reason."""
    field, reason, retry_after_ms = "", details, None
    # Sync calls give (key, value) namedtuples, grpc.aio plain tuples (its stubs differ).
    trailers = cast("Iterable[tuple[str, str | bytes]]", error.trailing_metadata() or ())
    for key, value in trailers:
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                if bad.field_violations:
                    violation = bad.field_violations[0]
                    field, reason = str(violation.field), str(violation.description)
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                retry_after_ms = int(retry.retry_delay.ToMilliseconds())
    return field, reason, retry_after_ms
