"""One guard in front of every RPC of a gRPC server: a ``grpc.aio`` server interceptor that both
servers (the broker, the sidecar) install, so that no request, however malformed, is answered
UNKNOWN or writes a traceback per request.

For every method of every service the server registers:

- A request, or a frame of a request stream, that cannot be decoded as its message type (corrupt
  wire format, invalid UTF-8 in a string field) is answered INVALID_ARGUMENT "the request could
  not be decoded as <type>: <why>". On a request stream the frames decoded before the bad one
  are handled and answered as usual; the stream then reads as ended, and the call ends with that
  status.
- An exception a handler did not expect is answered with ``fault_reply(method, reason)`` when the
  server gives one for the method (apache.rocketmq.v2 answers in the response's ``Status``,
  docs/rocketmq-protocol.md §1), otherwise gRPC INTERNAL. ``NotImplementedError`` (the generated
  servicers' default) is UNIMPLEMENTED. grpc's own exceptions (an abort, a call or server that
  ended) go back to grpc.
- Neither writes a line per request: each kind goes through a RateLimitedLog, a WARNING for
  undecodable requests, an ERROR with the traceback for faults (they are bugs to fix).

How: grpc calls the handler's request deserializer before any of our code runs, and logs a
traceback and answers UNKNOWN when it raises. The guard gives each handler a deserializer that
returns an ``Undecodable`` marker instead, and wraps the behaviour, once per method. Servicers
read request streams through their iterator (``context.read()`` would hand them the marker).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message

from rocketbox_api.rate_limited_log import LOG_INTERVAL_S_DEFAULT, RateLimitedLog

LOG = logging.getLogger(__name__)

# What a fault's answer says of the exception: enough to match it with the logged line.
FAULT_TEXT_CHARS_MAX = 200

FaultReply = Callable[[MethodDescriptor, str], Message | None]
if TYPE_CHECKING:  # generic only in the type stubs
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
# A grpc.aio.ServicerContext, or for a sync handler the context grpc gives it.
Context = Any


class Undecodable:
    """What the guard's deserializer returns for bytes its message type cannot parse."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _lenient(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as e:  # whatever a deserializer raises on bytes it cannot parse
            # protobuf says "Error parsing message with type 'T': why"; the answer names T.
            reason = str(e)
            return Undecodable(reason.partition("': ")[2] or reason)

    return decode


@dataclass(frozen=True, slots=True)
class _Method:
    path: str  # "/package.Service/Method", as gRPC names it
    request_type: str
    descriptor: MethodDescriptor | None

    @classmethod
    def of(cls, path: str) -> _Method:
        service, _, name = path.lstrip("/").partition("/")
        try:
            found = descriptor_pool.Default().FindMethodByName(f"{service}.{name}")
        except KeyError:
            return cls(path, f"the request of {path}", None)
        return cls(path, found.input_type.full_name, found)


class _DecodedRequests:
    """A request stream up to its first undecodable frame, which ends it and is remembered."""

    def __init__(self, frames: Any) -> None:
        self._frames = frames
        self.undecodable: Undecodable | None = None

    def __aiter__(self) -> _DecodedRequests:
        return self

    async def __anext__(self) -> Any:
        if self.undecodable is not None:
            raise StopAsyncIteration
        return self._checked(await self._frames.__anext__(), StopAsyncIteration)

    def __iter__(self) -> _DecodedRequests:
        return self

    def __next__(self) -> Any:
        if self.undecodable is not None:
            raise StopIteration
        return self._checked(next(self._frames), StopIteration)

    def _checked(self, frame: Any, end: type[Exception]) -> Any:
        if isinstance(frame, Undecodable):
            self.undecodable = frame
            raise end
        return frame


class ServerGuard(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        fault_reply: FaultReply | None = None,
        log_interval_s: float = LOG_INTERVAL_S_DEFAULT,
    ) -> None:
        self._fault_reply = fault_reply
        self.undecodable_log = RateLimitedLog(LOG, logging.WARNING, log_interval_s)
        self.fault_log = RateLimitedLog(LOG, logging.ERROR, log_interval_s)
        # One entry per method that resolved to a handler: bounded by the registered methods.
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        path = handler_call_details.method
        cached = self._wrapped.get(path)
        if cached is None or cached[0] is not handler:
            cached = self._wrapped[path] = (handler, self._wrap(_Method.of(path), handler))
        return cached[1]

    def _wrap(self, method: _Method, handler: Handler) -> Handler:
        decode = handler.request_deserializer
        lenient = _lenient(decode) if decode is not None else None
        encode = handler.response_serializer
        if handler.unary_unary is not None:
            behaviour = self._behaviour(method, handler.unary_unary, False, False)
            return grpc.unary_unary_rpc_method_handler(behaviour, lenient, encode)
        if handler.unary_stream is not None:
            behaviour = self._behaviour(method, handler.unary_stream, False, True)
            return grpc.unary_stream_rpc_method_handler(behaviour, lenient, encode)
        if handler.stream_unary is not None:
            behaviour = self._behaviour(method, handler.stream_unary, True, False)
            return grpc.stream_unary_rpc_method_handler(behaviour, lenient, encode)
        if handler.stream_stream is not None:
            behaviour = self._behaviour(method, handler.stream_stream, True, True)
            return grpc.stream_stream_rpc_method_handler(behaviour, lenient, encode)
        return handler

    def _behaviour(
        self, method: _Method, inner: Any, request_streaming: bool, response_streaming: bool
    ) -> Any:
        # grpc runs a handler by its kind (async generator, coroutine, or sync on its thread
        # pool), so the wrapper must be of the same kind.
        if inspect.isasyncgenfunction(inner):
            return self._async_generator(method, inner, request_streaming)
        if inspect.iscoroutinefunction(inner):
            return self._coroutine(method, inner, request_streaming)
        return self._sync(method, inner, request_streaming, response_streaming)

    def _async_generator(self, method: _Method, inner: Any, request_streaming: bool) -> Any:
        async def behaviour(request: Any, context: Context) -> Any:
            request = self._request_of(method, request, context, request_streaming)
            if request is None:
                return
            answered = False
            try:
                async with contextlib.aclosing(inner(request, context)) as responses:
                    async for response in responses:
                        answered = True
                        yield response
            except grpc.aio.BaseError:
                raise
            except Exception as e:
                reply = self._fault(method, e, context, reply_allowed=not answered)
                if reply is not None:
                    yield reply
                return
            self._refuse_stream_end(method, request, context)

        return behaviour

    def _coroutine(self, method: _Method, inner: Any, request_streaming: bool) -> Any:
        async def behaviour(request: Any, context: Context) -> Any:
            request = self._request_of(method, request, context, request_streaming)
            if request is None:
                return None
            try:
                response = await inner(request, context)
            except grpc.aio.BaseError:
                raise
            except Exception as e:
                return self._fault(method, e, context, reply_allowed=True)
            if self._refuse_stream_end(method, request, context):
                return None
            return response

        return behaviour

    def _sync(
        self, method: _Method, inner: Any, request_streaming: bool, response_streaming: bool
    ) -> Any:
        # A sync streaming handler is guarded until it returns its iterator, not while grpc
        # iterates it; rocketbox's servicers are async, only generated defaults are sync.
        def answer(reply: Any) -> Any:
            if not response_streaming:
                return reply
            return iter(() if reply is None else (reply,))

        def behaviour(request: Any, context: Context) -> Any:
            request = self._request_of(method, request, context, request_streaming)
            if request is None:
                return answer(None)
            try:
                response = inner(request, context)
            except grpc.aio.BaseError:
                raise
            except Exception as e:
                return answer(self._fault(method, e, context, reply_allowed=True))
            if self._refuse_stream_end(method, request, context):
                return answer(None)
            return response

        return behaviour

    def _request_of(
        self, method: _Method, request: Any, context: Context, request_streaming: bool
    ) -> Any:
        """What the handler is given: a request stream that ends at its first undecodable
        frame, or the decoded request. None: an undecodable request, refused."""
        if request_streaming:
            return _DecodedRequests(request)
        if isinstance(request, Undecodable):
            self._refuse(method, request, context)
            return None
        return request

    def _refuse_stream_end(self, method: _Method, request: Any, context: Context) -> bool:
        """After the handler: True when its request stream ended at an undecodable frame, which
        is then the call's status."""
        if isinstance(request, _DecodedRequests) and request.undecodable is not None:
            self._refuse(method, request.undecodable, context)
            return True
        return False

    def _refuse(self, method: _Method, bad: Undecodable, context: Context) -> None:
        self.undecodable_log.log(
            "refused an undecodable request to %s: %s", method.path, bad.reason
        )
        context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
        context.set_details(
            f"the request could not be decoded as {method.request_type}: {bad.reason}"
        )

    def _fault(
        self, method: _Method, error: Exception, context: Context, reply_allowed: bool
    ) -> Message | None:
        if isinstance(error, NotImplementedError):
            context.set_code(grpc.StatusCode.UNIMPLEMENTED)
            context.set_details(f"{method.path} is not implemented")
            return None
        text = f"{type(error).__name__}: {error}"
        if len(text) > FAULT_TEXT_CHARS_MAX:
            text = text[: FAULT_TEXT_CHARS_MAX - 1] + "…"
        self.fault_log.log("%s failed on a request: %s", method.path, text, exc_info=error)
        reason = f"internal error while handling {method.path} ({text}); logged by the server"
        if reply_allowed and self._fault_reply is not None and method.descriptor is not None:
            reply = self._fault_reply(method.descriptor, reason)
            if reply is not None:
                return reply
        context.set_code(grpc.StatusCode.INTERNAL)
        context.set_details(reason)
        return None


__all__ = ["FaultReply", "ServerGuard", "Undecodable"]
