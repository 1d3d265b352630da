"""``Client``: the app's synchronous connection to its sidecar (one gRPC channel).

``send`` answers Stored or Spooled, or raises; ``send_batch`` answers each message in its slot;
``batching_sender`` groups concurrent sends into SendBatch requests (sender.py). Message ids are
stamped here, before the first attempt (message_id.py); UNAVAILABLE is retried with the same
request (_rpc.py); every gRPC error is translated by errors.translate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from rocketbox_client import _rpc
from rocketbox_client._proto import sidecar_pb2 as api
from rocketbox_client.batching import (
    BATCH_BYTES_MAX_DEFAULT,
    BATCH_MESSAGES_MAX_DEFAULT,
    BATCHES_IN_FLIGHT_MAX_DEFAULT,
    BUFFER_MESSAGES_MAX_DEFAULT,
    LINGER_MS_DEFAULT,
    BatchingLimits,
    check_batch,
    results_of,
)
from rocketbox_client.converter import from_result, to_proto
from rocketbox_client.errors import RejectedError, RocketboxError, translate
from rocketbox_client.message import Message, SendResult
from rocketbox_client.message_id import stamp
from rocketbox_client.security import Metadata, TlsConfig, call_metadata
from rocketbox_client.sender import BatchingSender

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Client:
    """A synchronous client of one sidecar (``target``: ``host:port``); thread-safe.

    ``timeout_s`` is each call's deadline unless the call gives its own; it covers the retries.
    UNAVAILABLE is retried ``unavailable_retries_max`` times, after ``retry_backoff_ms``
    doubling (with jitter, at most 2 s). ``channel_options`` are gRPC's, passed on. ``tls``:
    TLS (and mTLS) to the sidecar; ``token``: the bearer token a sidecar started with a token
    requires (sent as ``authorization: Bearer <token>``; a missing or wrong one raises
    UnauthenticatedError).
    """

    def __init__(
        self,
        target: str,
        *,
        timeout_s: float = 10.0,
        unavailable_retries_max: int = 3,
        retry_backoff_ms: int = 100,
        channel_options: Sequence[tuple[str, Any]] = (),
        tls: TlsConfig | None = None,
        token: str | None = None,
    ) -> None:
        _rpc.Deadline(timeout_s)  # checks it
        self._metadata = call_metadata(token)
        self.target = target
        self.timeout_s = timeout_s
        self._retry = _rpc.RetryPolicy(unavailable_retries_max, retry_backoff_ms)
        options = _rpc.channel_options(retry_backoff_ms, channel_options)
        if tls is None:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            self._channel = grpc.secure_channel(target, tls.channel_credentials(), options=options)
        self._send = self._channel.unary_unary(
            _rpc.SEND_PATH,
            request_serializer=api.SendRequest.SerializeToString,
            response_deserializer=api.SendResponse.FromString,
        )
        self._send_batch = self._channel.unary_unary(
            _rpc.SEND_BATCH_PATH,
            request_serializer=api.SendBatchRequest.SerializeToString,
            response_deserializer=api.SendBatchResponse.FromString,
        )
        self._senders: list[BatchingSender] = []
        self._closed = False

    def send(
        self, message: Message, *, timeout_s: float | None = None, metadata: Metadata = ()
    ) -> SendResult:
        """Stored or Spooled; raises a RejectedError subclass (the message was not taken) or
        DeadlineExceededError (it may or may not be stored). ``metadata``: the call's own gRPC
        metadata, such as a W3C ``traceparent`` and ``tracestate``, which the sidecar adds to
        the properties of a message that has none of its own (docs/tracing.md)."""
        deadline = _rpc.Deadline(self.timeout_s if timeout_s is None else timeout_s)
        message_id = stamp(message)
        request = api.SendRequest(message=to_proto(message, message_id))
        try:
            response = self._call_with_retries(self._send, request, deadline, metadata)
        except grpc.RpcError as e:
            raise translate(e, message_id, deadline.timeout_s) from e
        result = from_result(response.result)
        if isinstance(result, RocketboxError):
            raise result  # Send answers rejections with its status; a Rejection is a fault.
        return result

    def send_batch(
        self,
        messages: Sequence[Message],
        *,
        timeout_s: float | None = None,
        metadata: Metadata = (),
    ) -> list[SendResult | RejectedError]:
        """One answer per message, in order: Stored, Spooled, or the RejectedError of that
        message alone. One SendBatch request: more than 1,000 messages or 16 MiB (encoded) raise
        InvalidMessageError (field "messages") before anything is sent — split the batch, or use
        ``batching_sender``. Raises for the whole request: UnavailableError after the retries,
        DeadlineExceededError (any of them may or may not be stored). ``metadata``: as
        ``send``'s, for every message of the batch."""
        deadline = _rpc.Deadline(self.timeout_s if timeout_s is None else timeout_s)
        if not messages:
            return []
        ids = [stamp(m) for m in messages]
        protos = [to_proto(m, i) for m, i in zip(messages, ids, strict=True)]
        check_batch(protos)
        request = api.SendBatchRequest(messages=protos)
        try:
            response = self._call_with_retries(self._send_batch, request, deadline, metadata)
        except grpc.RpcError as e:
            raise translate(e, None, deadline.timeout_s) from e
        return results_of(response, ids)

    def batching_sender(
        self,
        *,
        linger_ms: float = LINGER_MS_DEFAULT,
        batch_messages_max: int = BATCH_MESSAGES_MAX_DEFAULT,
        batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT,
        batches_in_flight_max: int = BATCHES_IN_FLIGHT_MAX_DEFAULT,
        buffer_messages_max: int = BUFFER_MESSAGES_MAX_DEFAULT,
    ) -> BatchingSender:
        """A sender that groups concurrent ``send`` calls into SendBatch requests; it is running
        when returned, and closed by its ``close`` or by this client's."""
        if self._closed:
            raise RuntimeError("the client is closed")
        limits = BatchingLimits(
            linger_ms, batch_messages_max, batch_bytes_max, batches_in_flight_max,
            buffer_messages_max,
        )  # fmt: skip
        sender = BatchingSender(self, limits)
        self._senders.append(sender)
        return sender

    def send_batch_request(
        self, request: api.SendBatchRequest, deadline: _rpc.Deadline
    ) -> api.SendBatchResponse:
        """One SendBatch with the client's retries; raises the last grpc.RpcError (the batching
        sender translates it for each message)."""
        return self._call_with_retries(self._send_batch, request, deadline)

    def _call_with_retries(
        self,
        method: grpc.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        deadline: _rpc.Deadline,
        metadata: Metadata = (),
    ) -> Resp:
        # The call's own metadata (a trace context) after the client's (its token).
        sent = (*(self._metadata or ()), *metadata) if metadata else self._metadata
        retry = 0
        while True:
            try:
                return method(request, timeout=deadline.attempt_timeout_s(), metadata=sent)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                delay_s = self._retry.delay_s(retry, deadline)
                if delay_s is None:
                    raise
                _rpc.log_retry(self.target, e, retry, delay_s, request)
            time.sleep(delay_s)
            retry += 1

    def close(self) -> None:
        """Closes the batching senders (each answers every message it holds), then the
        channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for sender in self._senders:
            sender.close()
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
