"""Calls the front forwards to the broker as they are: bytes in, bytes out, never parsed.

The consumer side (QueryAssignment, ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue), offsets, pulls, recalls and EndTransaction have nothing for the
outbox to do: the sidecar passes them to the broker with the app's metadata and deadline, and
hands back the broker's answer, or its gRPC status, unchanged. Neither side's bytes are decoded,
so a forwarded call costs one more hop and nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from sidecar.rocketmq_front.upstream import Upstream, forwarded_metadata, remaining_s

Context = grpc.aio.ServicerContext[Any, Any]
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"

FORWARDED_UNARY = (
    "QueryAssignment",
    "AckMessage",
    "ForwardMessageToDeadLetterQueue",
    "ChangeInvisibleDuration",
    "EndTransaction",
    "UpdateOffset",
    "GetOffset",
    "QueryOffset",
    "RecallMessage",
    "SyncLiteSubscription",
)
FORWARDED_STREAMS = ("ReceiveMessage", "PullMessage")
# Answered by the sidecar when it has its own handler for them (service.py), else forwarded too.
ANSWERABLE_UNARY = ("QueryRoute", "Heartbeat", "SendMessage", "NotifyClientTermination")
TELEMETRY = "Telemetry"


class Forwarder:
    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream

    def unary(self, method: str) -> Handler:
        async def forward(request: bytes, context: Context) -> bytes:
            try:
                return await self._upstream.unary(method)(
                    request, timeout=remaining_s(context), metadata=forwarded_metadata(context)
                )
            except grpc.aio.AioRpcError as e:
                await context.abort(e.code(), e.details() or "")
                raise  # abort raises; for the type checker

        return grpc.unary_unary_rpc_method_handler(forward)

    def unary_stream(self, method: str) -> Handler:
        async def forward(request: bytes, context: Context) -> AsyncIterator[bytes]:
            call = self._upstream.unary_stream(method)(
                request, timeout=remaining_s(context), metadata=forwarded_metadata(context)
            )
            try:
                async for response in call:
                    yield response
            except grpc.aio.AioRpcError as e:
                await context.abort(e.code(), e.details() or "")
            finally:
                call.cancel()

        return grpc.unary_stream_rpc_method_handler(forward)

    def stream_stream(self, method: str) -> Handler:
        async def forward(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
            call = self._upstream.stream_stream(method)(
                requests, timeout=remaining_s(context), metadata=forwarded_metadata(context)
            )
            try:
                async for response in call:
                    yield response
            except grpc.aio.AioRpcError as e:
                await context.abort(e.code(), e.details() or "")
            finally:
                call.cancel()

        return grpc.stream_stream_rpc_method_handler(forward)

    def handlers(self) -> dict[str, Handler]:
        """Every method's forwarding handler, by method name."""
        return {
            **{m: self.unary(m) for m in (*FORWARDED_UNARY, *ANSWERABLE_UNARY)},
            **{m: self.unary_stream(m) for m in FORWARDED_STREAMS},
            TELEMETRY: self.stream_stream(TELEMETRY),
        }
