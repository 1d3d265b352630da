"""The sidecar's exceptions, and what the app is told for each.

    SidecarError
    ├── SendRejectedError  REJECTED: the message was not taken, and the app is told why: a gRPC
    │                      ``code``, the ``field`` of rocketbox.v1.Message at fault ("" when it is
    │                      not one field's fault), a ``reason``, and a ``retry_after_ms`` when
    │                      sending it again later may work (retriable then). Never spooled.
    └── SendFailedError    the broker did not take it: ``cause`` says why (THROTTLED,
                           UNAVAILABLE, AMBIGUOUS); retriable, so the message is spooled

SendRejectedError is the one rejection type, from wherever it is raised: conversion and
validation (INVALID_ARGUMENT), the broker's refusal (INVALID_ARGUMENT / NOT_FOUND), admission
control and the outbox's bound (RESOURCE_EXHAUSTED), shutting down or an outbox that cannot spool
(UNAVAILABLE), a bug (INTERNAL, ``internal_error``). It reaches the app unchanged: converter.py's
``to_rejection`` is the one place it becomes an answer, whose code is also a Send call's status.

Driver errors (grpc.aio) are classified into these in one place: sidecar/send_status.py.
"""

from __future__ import annotations

import grpc

from outbox.entry import SpoolCause

# What a REJECTED answer says when the outbox did not confirm a spool it may have written: the
# message may still be delivered, and sent again under the same id it cannot be twice. A checker
# of answers finds these by it.
SPOOL_OUTCOME_OPEN = "may still be delivered: send it again with the same message_id"


class SidecarError(Exception):
    retriable = False


class SendRejectedError(SidecarError):
    """REJECTED with ``code``: bad input names its ``field`` and the app must change the message;
    a refusal with ``retry_after_ms`` (a limit, shutting down) may be sent again after it."""

    def __init__(
        self,
        field: str,
        reason: str,
        code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT,
        retry_after_ms: int = 0,
        rocketmq_code: int = 0,
    ) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason
        self.code = code
        self.retry_after_ms = retry_after_ms
        # The apache.rocketmq.v2 Code the broker refused it with (0: not the broker's refusal),
        # kept so the RocketMQ front answers the app the broker's own code.
        self.rocketmq_code = rocketmq_code
        self.retriable = retry_after_ms > 0


class SendFailedError(SidecarError):
    retriable = True

    def __init__(self, cause: SpoolCause, detail: str, maybe_stored: bool = False) -> None:
        super().__init__(f"{cause.value}: {detail}")
        self.cause = cause
        self.detail = detail
        # The request may have reached the broker: a resend must check first (docs/design.md §5.4).
        # An AMBIGUOUS failure is one by definition, so the flag alone says it wherever it is read.
        self.maybe_stored = maybe_stored or cause is SpoolCause.AMBIGUOUS


def internal_error(e: BaseException) -> SendRejectedError:
    """The rejection that answers a bug (the caller logs its traceback): INTERNAL, never
    UNKNOWN, naming the exception so the app's report points at it."""
    return SendRejectedError(
        "",
        f"the sidecar failed while handling it ({type(e).__name__}: {e}); this is a bug, "
        "logged by the sidecar",
        grpc.StatusCode.INTERNAL,
    )
