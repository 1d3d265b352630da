"""``AsyncClient``: ``Client`` for asyncio (grpc.aio), with the same methods, answers and errors.

Make it inside the event loop that uses it (grpc.aio binds its channel to that loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from rocketbox_client import _rpc
from rocketbox_client._proto import sidecar_pb2 as api
from rocketbox_client.async_sender import AsyncBatchingSender
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

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class AsyncClient:
    """An asyncio client of one sidecar; see ``Client`` for the arguments."""

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
            self._channel = grpc.aio.insecure_channel(target, options=options)
        else:
            self._channel = grpc.aio.secure_channel(
                target, tls.channel_credentials(), options=options
            )
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
        self._senders: list[AsyncBatchingSender] = []
        self._closed = False

    async def send(
        self, message: Message, *, timeout_s: float | None = None, metadata: Metadata = ()
    ) -> SendResult:
        """As ``Client.send``."""
        deadline = _rpc.Deadline(self.timeout_s if timeout_s is None else timeout_s)
        message_id = stamp(message)
        request = api.SendRequest(message=to_proto(message, message_id))
        try:
            response = await self._call_with_retries(self._send, request, deadline, metadata)
        except grpc.RpcError as e:
            raise translate(e, message_id, deadline.timeout_s) from e
        result = from_result(response.result)
        if isinstance(result, RocketboxError):
            raise result  # Send answers rejections with its status; a Rejection is a fault.
        return result

    async def send_batch(
        self,
        messages: Sequence[Message],
        *,
        timeout_s: float | None = None,
        metadata: Metadata = (),
    ) -> list[SendResult | RejectedError]:
        """As ``Client.send_batch``."""
        deadline = _rpc.Deadline(self.timeout_s if timeout_s is None else timeout_s)
        if not messages:
            return []
        ids = [stamp(m) for m in messages]
        protos = [to_proto(m, i) for m, i in zip(messages, ids, strict=True)]
        check_batch(protos)
        request = api.SendBatchRequest(messages=protos)
        try:
            response = await self._call_with_retries(self._send_batch, request, deadline, metadata)
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
    ) -> AsyncBatchingSender:
        """A sender that groups concurrent ``send`` calls into SendBatch requests; start it
        with ``async with`` (or ``await sender.start()``); this client's ``close`` closes it."""
        if self._closed:
            raise RuntimeError("the client is closed")
        limits = BatchingLimits(
            linger_ms, batch_messages_max, batch_bytes_max, batches_in_flight_max,
            buffer_messages_max,
        )  # fmt: skip
        sender = AsyncBatchingSender(self, limits)
        self._senders.append(sender)
        return sender

    async def send_batch_request(
        self, request: api.SendBatchRequest, deadline: _rpc.Deadline
    ) -> api.SendBatchResponse:
        """One SendBatch with the client's retries; raises the last grpc.RpcError (the batching
        sender translates it for each message)."""
        return await self._call_with_retries(self._send_batch, request, deadline)

    async def _call_with_retries(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        deadline: _rpc.Deadline,
        metadata: Metadata = (),
    ) -> Resp:
        # The call's own metadata (a trace context) after the client's (its token).
        sent = (*(self._metadata or ()), *metadata) if metadata else self._metadata
        retry = 0
        while True:
            try:
                return await method(request, timeout=deadline.attempt_timeout_s(), metadata=sent)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                delay_s = self._retry.delay_s(retry, deadline)
                if delay_s is None:
                    raise
                _rpc.log_retry(self.target, e, retry, delay_s, request)
            await asyncio.sleep(delay_s)
            retry += 1

    async def close(self) -> None:
        """Closes the batching senders (each answers every message it holds), then the
        channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for sender in self._senders:
            await sender.close()
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
