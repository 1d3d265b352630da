"""The sidecar's exceptions, and what the app is told for each.

    SidecarError
    ├── SendRejectedError  terminal: never succeeds as sent (INVALID_ARGUMENT / NOT_FOUND
    │                      naming the field); never spooled, never retried
    └── SendFailedError    the broker did not take it: ``cause`` says why (THROTTLED,
                           UNAVAILABLE, AMBIGUOUS); retriable, so the message is spooled

Driver errors (grpc.aio) are classified into these in one place: sidecar/send_status.py.
"""

from __future__ import annotations

import grpc

from outbox.entry import SpoolCause


class SidecarError(Exception):
    retriable = False


class SendRejectedError(SidecarError):
    """Bad input: the app must change the message. ``field`` names the offending field of
    ``rocketbox.v1.Message``."""

    def __init__(
        self, field: str, reason: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT
    ) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
        self.code = code


class SendFailedError(SidecarError):
    retriable = True

    def __init__(self, cause: SpoolCause, detail: str, maybe_stored: bool = False) -> None:
        super().__init__(f"{cause.value}: {detail}")
        self.cause = cause
        self.detail = detail
        # The request may have reached the broker: a resend must check first (DESIGN §3).
        self.maybe_stored = maybe_stored
