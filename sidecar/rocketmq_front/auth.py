"""Who may call the RocketMQ front: each call's RocketMQ signature, verified against the apps'
access keys (``--front-credentials-file``).

The official SDKs sign every call with their access key and secret key (``authorization:
MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=...``, rocketbox_api/
signing.py): the front verifies that signature with the app's secret key, and the signed date
against the sidecar's clock (within CLOCK_SKEW_S_DEFAULT, either way, no time-zone offset
forgiven), before the call does anything. A call that fails is answered with the protocol's
UNAUTHORIZED (40100) in its Status, naming what is wrong (never a secret), as a RocketMQ proxy
answers it: the SDKs raise their UnauthorizedException. Nothing of a refused send is spooled or
stored. A Telemetry stream is verified once, when it opens (it may live for days); a refused one
answers one frame with that Status and ends.

The check is in each of the front's handlers, wrapped once when the server is built (``guarded``),
not in an interceptor: a front without credentials wraps nothing and pays nothing.

Verified calls keep their metadata: what the front forwards (consumers, transactions, offsets)
still carries the app's own signature, which the broker verifies again against its users, so an
app's access key must be the broker's too when the broker runs with --auth. The front's own sends
are the sidecar's (docs/rocketmq-front.md): the front proves who the app is, the broker's ACL on
the sidecar's user says what the front may send.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeAlias

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketbox_api.credentials import Credentials
from rocketbox_api.rate_limited_log import LOG_INTERVAL_S_DEFAULT, RateLimitedLog
from rocketbox_api.signing import (
    AUTHORIZATION_HEADER,
    CLOCK_SKEW_S_DEFAULT,
    DATE_TIME_HEADER,
    SignatureRefusedError,
    SignatureVerifier,
)
from sidecar.rocketmq_front.forward import response_type, status_reply

LOG = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class FrontAuth:
    def __init__(
        self,
        credentials: Iterable[Credentials],
        clock_skew_s: int = CLOCK_SKEW_S_DEFAULT,
        now_s: Callable[[], float] = time.time,
        log_interval_s: float = LOG_INTERVAL_S_DEFAULT,
    ) -> None:
        secrets = {c.access_key: c.secret_key.encode() for c in credentials}
        assert secrets, "the front's authentication needs at least one access key"
        self._verifier = SignatureVerifier(secrets.get, clock_skew_s, now_s, "the sidecar")
        self.refusal_log = RateLimitedLog(LOG, logging.WARNING, log_interval_s)

    def refusal(self, context: Context) -> str | None:
        """None when the call is signed by an app's access key; otherwise what it is told."""
        authorization = date_time = ""
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION_HEADER and isinstance(value, str):
                authorization = value
            elif key == DATE_TIME_HEADER and isinstance(value, str):
                date_time = value
        try:
            self._verifier.access_key_of(authorization, date_time)
        except SignatureRefusedError as e:
            return f"the sidecar's RocketMQ front refused the call: {e}"
        return None

    def guarded(self, handlers: dict[str, Handler]) -> dict[str, Handler]:
        """``handlers`` (by method name), each verifying the caller before it runs."""
        return {method: self._guarded(method, h) for method, h in handlers.items()}

    def _refused(self, method: str, context: Context) -> str | None:
        """What a refused call is told, logged (rate-limited); None when it may go on."""
        refusal = self.refusal(context)
        if refusal is None:
            return None
        self.refusal_log.log("refused %s from %s: %s", method, context.peer(), refusal)
        return refusal

    def _guarded(self, method: str, handler: Handler) -> Handler:
        raw = handler.response_serializer is None

        def answer(refusal: str) -> Any:
            if raw:  # the front's forwarded and bytes-in handlers answer bytes
                return status_reply(method, pb.UNAUTHORIZED, refusal)
            return response_type(method)(status=pb.Status(code=pb.UNAUTHORIZED, message=refusal))

        kwargs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary, answer), **kwargs
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream, answer), **kwargs
            )
        assert handler.stream_stream is not None, f"{method}: no client-streaming method here"
        return grpc.stream_stream_rpc_method_handler(
            self._stream(method, handler.stream_stream, answer), **kwargs
        )

    def _unary(self, method: str, inner: Any, answer: Callable[[str], Any]) -> Any:
        async def behaviour(request: Any, context: Context) -> Any:
            refusal = self._refused(method, context)
            if refusal is not None:
                return answer(refusal)
            return await inner(request, context)

        return behaviour

    def _stream(self, method: str, inner: Any, answer: Callable[[str], Any]) -> Any:
        assert inspect.isasyncgenfunction(inner), f"{method}: the front's streams are generators"

        async def behaviour(request: Any, context: Context) -> AsyncIterator[Any]:
            refusal = self._refused(method, context)
            if refusal is not None:
                yield answer(refusal)
                return
            async with contextlib.aclosing(inner(request, context)) as responses:
                async for response in responses:
                    yield response

        return behaviour


__all__ = ["FrontAuth"]
