"""What the sync and the async client share about calling the sidecar: the method paths, the
channel options, the retry policy and the deadline.

Retries: only UNAVAILABLE is retried (the sidecar was not reachable, or it refused the call while
shutting down or unable to spool: nothing was accepted), with the same request and so the same
message ids, after an exponential back-off with jitter, and never past the call's deadline.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from rocketbox_client._proto import sidecar_pb2 as api

LOG = logging.getLogger(__name__)

_SERVICE = api.DESCRIPTOR.services_by_name["SidecarService"]
SEND_PATH = f"/{_SERVICE.full_name}/Send"
SEND_BATCH_PATH = f"/{_SERVICE.full_name}/SendBatch"
assert {"Send", "SendBatch"} <= set(_SERVICE.methods_by_name), "the API lost a method"

# The sidecar's limits of one SendBatch (rocketbox/v1/sidecar.proto).
SEND_BATCH_MESSAGES_MAX = 1_000
SEND_BATCH_BYTES_MAX = 16 * 1024 * 1024
# The largest request the client sends: the sidecar's gRPC receive cap with its default limits
# (sidecar/config.py, SidecarConfig.grpc_receive_bytes_max: a valid batch's bytes, each message's
# other fields at most 32 KiB, and SEND_BATCH_BYTES_MAX above that). A request over the API's
# limits but under it reaches the sidecar, whose answer names the field, the size and the limit;
# one over it is refused here by gRPC (RequestTooLargeError), as the sidecar would.
REQUEST_BYTES_MAX = 2 * SEND_BATCH_BYTES_MAX + SEND_BATCH_MESSAGES_MAX * 32 * 1024
# No single back-off (ours, or the channel's between reconnects) grows past this: a sidecar that
# comes back is found again within it.
RETRY_BACKOFF_MAX_MS = 2_000


def channel_options(
    retry_backoff_ms: int, options: Sequence[tuple[str, Any]]
) -> list[tuple[str, Any]]:
    """The client's channel options, then the caller's (which win).

    gRPC waits between reconnects (1 s, growing to 120 s, by default) and fails calls at once
    meanwhile; the client's own retries would find the channel still waiting. So the channel
    reconnects on the client's back-off scale. (Not ``grpc.min_reconnect_backoff_ms``: gRPC
    takes it as the connection attempt's timeout too, 20 s by default.)
    """
    ours: dict[str, Any] = {
        "grpc.initial_reconnect_backoff_ms": retry_backoff_ms,
        "grpc.max_reconnect_backoff_ms": max(retry_backoff_ms, RETRY_BACKOFF_MAX_MS),
        "grpc.max_send_message_length": REQUEST_BYTES_MAX,
    }
    ours.update(dict(options))
    return list(ours.items())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    unavailable_retries_max: int
    retry_backoff_ms: int

    def __post_init__(self) -> None:
        if self.unavailable_retries_max < 0:
            raise ValueError(f"unavailable_retries_max is {self.unavailable_retries_max}; ≥ 0")
        if self.retry_backoff_ms < 1:
            raise ValueError(f"retry_backoff_ms is {self.retry_backoff_ms}; ≥ 1")

    def delay_s(self, retry: int, deadline: Deadline) -> float | None:
        """How long to wait before retry number ``retry`` (0-based); None: no retry is left, or
        it could not start before the deadline."""
        if retry >= self.unavailable_retries_max:
            return None
        ceiling_ms = min(self.retry_backoff_ms * 2**retry, RETRY_BACKOFF_MAX_MS)
        # "Equal jitter": at least half the back-off, so retries still spread out over time.
        delay_s = ceiling_ms * random.uniform(0.5, 1.0) / 1000  # noqa: S311 - not a secret
        return delay_s if delay_s < deadline.remaining_s() else None


class Deadline:
    """A call's deadline, on the monotonic clock."""

    __slots__ = ("at_s", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s is {timeout_s}; it must be positive")
        self.timeout_s = timeout_s
        self.at_s = time.monotonic() + timeout_s

    def remaining_s(self) -> float:
        return self.at_s - time.monotonic()

    def attempt_timeout_s(self) -> float:
        """The timeout of the next attempt: what is left, at least 1 ms, so that an exhausted
        deadline ends in gRPC's own DEADLINE_EXCEEDED, translated like any other."""
        return max(self.remaining_s(), 0.001)


def log_retry(
    target: str, error: grpc.RpcError, retry: int, delay_s: float, request: object
) -> None:
    if isinstance(request, api.SendRequest):
        what = f"message_id={request.message.message_id} topic={request.message.topic}"
    elif isinstance(request, api.SendBatchRequest):
        first = request.messages[0] if request.messages else api.Message()
        what = f"a batch of {len(request.messages)}, first message_id={first.message_id}"
    else:
        what = type(request).__name__
    LOG.info(
        "sidecar %s UNAVAILABLE (%s); retry %d in %d ms: %s",
        target, error.details(), retry + 1, delay_s * 1000, what,
    )  # fmt: skip
