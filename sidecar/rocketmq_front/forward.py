"""Calls the front forwards to the broker: bytes in, bytes out, parsed only where routing needs it.

The consumer side (QueryAssignment, ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue), offsets, pulls, recalls and EndTransaction have nothing for the
outbox to do: the sidecar passes them to the broker with the app's metadata and deadline, and
hands back the broker's answer. While one broker is known a call's bytes are never decoded, so a
forwarded call costs one more hop and nothing else. With several broker groups behind the front
(brokers.py) a call naming a queue goes to that queue's group, a receipt handle to the group that
gave it; only then are the requests (and the handles in the answers) parsed.

QueryAssignment's answer is always parsed: its queues name the brokers' real endpoints, which
the app must not see (every later call must come here), and which the directory learns.

Errors, as a RocketMQ proxy answers them (docs/rocketmq-protocol.md §1, §4):
- the broker's own gRPC status (UNAVAILABLE when it cannot be reached) is the app's, unchanged:
  it is what an official client sees from a dead proxy, and what makes it retry (a PushConsumer
  retries a failed receive after 1 s, an ack every second; a SimpleConsumer raises to its
  caller, who retries);
- a bug in the front answers INTERNAL_SERVER_ERROR in the response's Status (a stream: in its
  first frame, or gRPC INTERNAL once frames went out), logged at most once per interval: never a
  traceback per call. The server's guard cannot build it: these raw handlers have no response
  serializer, so the fault reply is made here, as bytes.
- Heartbeat and NotifyClientTermination of a producer are answered OK even when the broker cannot
  be reached: the clients only log the reply, and a producer must keep working through an outage.

Every call is counted in ``rocketbox_sidecar_front_forwarded_total{method, code}`` (code: the gRPC
status name the broker answered, or INTERNAL for a fault of the front).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message
from prometheus_client import Counter
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketbox_api.rate_limited_log import RateLimitedLog
from sidecar.channels import Endpoint
from sidecar.rocketmq_front.brokers import BrokerDirectory
from sidecar.rocketmq_front.upstream import Upstream, forwarded_metadata, remaining_s

LOG = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
if TYPE_CHECKING:  # generic only in the type stubs
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]

# Forwarded to the home broker as they are.
FORWARDED_UNARY = ("EndTransaction", "RecallMessage", "SyncLiteSubscription")
# Name a message queue: to its broker group.
QUEUE_UNARY = ("UpdateOffset", "GetOffset", "QueryOffset")
QUEUE_STREAMS = ("ReceiveMessage", "PullMessage")
# Carry receipt handles: to the group that gave them.
HANDLE_UNARY = ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue")
# Answered by the sidecar when it has its own handler for them (server.py), else forwarded too.
ANSWERABLE_UNARY = ("QueryRoute", "SendMessage")
LIFECYCLE = ("Heartbeat", "NotifyClientTermination")
TELEMETRY = "Telemetry"
# The code counted for a fault of the front itself.
FAULT = "INTERNAL"

_METHODS = spb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name


def request_type(method: str) -> Any:
    return message_factory.GetMessageClass(_METHODS[method].input_type)


def response_type(method: str) -> Any:
    return message_factory.GetMessageClass(_METHODS[method].output_type)


def status_reply(method: str, code: int, message: str) -> bytes:
    """``method``'s response (a stream's first frame) carrying only a Status."""
    reply: Message = response_type(method)(status=pb.Status(code=code, message=message))
    return reply.SerializeToString()


def undecodable(method: str, error: DecodeError) -> str:
    return f"the request could not be decoded as {_METHODS[method].input_type.full_name}: {error}"


@dataclass(frozen=True, slots=True)
class Hop:
    """Where one call goes, what it sends there, and how each answer frame comes back."""

    endpoint: Endpoint
    request: bytes
    answer: Callable[[bytes], bytes] | None = None


Router = Callable[[bytes], Awaitable[Hop]]


class ForwardCounts:
    """``rocketbox_sidecar_front_forwarded_total``'s children, each looked up once."""

    def __init__(self, counter: Counter | None) -> None:
        self._counter = counter
        # Bounded by the service's methods times gRPC's status codes.
        self._children: dict[tuple[str, str], Any] = {}

    def add(self, method: str, code: str) -> None:
        if self._counter is None:
            return
        child = self._children.get((method, code))
        if child is None:
            child = self._children[(method, code)] = self._counter.labels(method, code)
        child.inc()


class Forwarder:
    def __init__(
        self,
        upstream: Upstream,
        advertised: Endpoint | None = None,
        counter: Counter | None = None,
    ) -> None:
        self._upstream = upstream
        self._directory: BrokerDirectory = upstream.directory
        self._advertised = advertised
        self._counts = ForwardCounts(counter)
        self._faults = RateLimitedLog(LOG, logging.ERROR)
        self._unreached = RateLimitedLog(LOG, logging.WARNING)

    # -- handlers -----------------------------------------------------------------------------
    def unary(self, method: str, router: Router | None = None) -> Handler:
        route = router or self.home

        async def forward(request: bytes, context: Context) -> bytes:
            code = FAULT
            try:
                hop = await route(request)
                response = await self._upstream.unary(method, hop.endpoint)(
                    hop.request, timeout=remaining_s(context), metadata=forwarded_metadata(context)
                )
                code = "OK"
                return hop.answer(response) if hop.answer is not None else response
            except grpc.aio.AioRpcError as e:
                code = e.code().name
                await context.abort(e.code(), e.details() or "")
                raise  # abort raises; for the type checker
            except DecodeError as e:  # parsed to be routed: the app's bytes, not our bug
                code = "INVALID_ARGUMENT"
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, undecodable(method, e))
                raise
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception as e:  # a bug of the front: the app gets a Status, not a traceback
                return self._fault(method, e)
            finally:
                self._counts.add(method, code)

        return grpc.unary_unary_rpc_method_handler(forward)

    def unary_stream(self, method: str, router: Router | None = None) -> Handler:
        route = router or self.home

        async def forward(request: bytes, context: Context) -> AsyncIterator[bytes]:
            code, answered = FAULT, False
            try:
                hop = await route(request)
                call = self._upstream.unary_stream(method, hop.endpoint)(
                    hop.request, timeout=remaining_s(context), metadata=forwarded_metadata(context)
                )
                try:
                    async for frame in call:
                        answered = True
                        yield hop.answer(frame) if hop.answer is not None else frame
                finally:
                    call.cancel()
                code = "OK"
            except grpc.aio.AioRpcError as e:
                code = e.code().name
                await context.abort(e.code(), e.details() or "")
            except DecodeError as e:  # parsed to be routed: the app's bytes, not our bug
                code = "INVALID_ARGUMENT"
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, undecodable(method, e))
            except (asyncio.CancelledError, GeneratorExit):  # the app went away
                code = "CANCELLED"
                raise
            except Exception as e:  # a bug of the front
                reply = self._fault(method, e)
                if answered:
                    await context.abort(grpc.StatusCode.INTERNAL, f"{method} failed in the front")
                yield reply
            finally:
                self._counts.add(method, code)

        return grpc.unary_stream_rpc_method_handler(forward)

    def lifecycle(self, method: str) -> Handler:
        """Heartbeat / NotifyClientTermination: to every known broker group (a consumer's
        liveness and a broadcast group's members matter to each), the home one's answer given;
        a producer's is OK even when no broker can be reached."""

        async def forward(request: bytes, context: Context) -> bytes:
            metadata, timeout = forwarded_metadata(context), remaining_s(context)
            calls = [
                self._upstream.unary(method, e)(request, timeout=timeout, metadata=metadata)
                for e in self._directory.endpoints()
            ]
            answers = await asyncio.gather(*calls, return_exceptions=True)
            home = answers[0]
            for answer in answers[1:]:
                if isinstance(answer, BaseException):
                    self._unreached.log("%s to a broker group failed: %s", method, answer)
            if isinstance(home, bytes):
                self._counts.add(method, "OK")
                return home
            code = home.code().name if isinstance(home, grpc.aio.AioRpcError) else FAULT
            self._counts.add(method, code)
            if isinstance(home, grpc.aio.AioRpcError) and _from_producer(method, request):
                return status_reply(method, pb.OK, "OK")
            if isinstance(home, grpc.aio.AioRpcError):
                await context.abort(home.code(), home.details() or "")
            return self._fault(method, home)

        return grpc.unary_unary_rpc_method_handler(forward)

    def handlers(self) -> dict[str, Handler]:
        """Every forwarded method's handler, by method name (Telemetry is telemetry.py's)."""
        return {
            **{m: self.unary(m) for m in (*FORWARDED_UNARY, *ANSWERABLE_UNARY)},
            **{m: self.unary(m, self.by_queue(m)) for m in QUEUE_UNARY},
            **{m: self.unary(m, self.by_handle(m)) for m in HANDLE_UNARY},
            **{m: self.unary_stream(m, self.by_queue(m)) for m in QUEUE_STREAMS},
            **{m: self.lifecycle(m) for m in LIFECYCLE},
            "QueryAssignment": self.unary("QueryAssignment", self.assignment),
        }

    def _fault(self, method: str, error: BaseException) -> bytes:
        text = f"{type(error).__name__}: {error}"[:200]
        self._faults.log("forwarding %s failed: %s", method, text, exc_info=error)
        return status_reply(
            method, pb.INTERNAL_SERVER_ERROR, f"internal error of the sidecar's front ({text})"
        )

    # -- routers ------------------------------------------------------------------------------
    async def home(self, request: bytes) -> Hop:
        return Hop(self._directory.home, request)

    def by_queue(self, method: str) -> Router:
        parse = request_type(method).FromString
        prefix_handles = method == "ReceiveMessage"

        async def route(request: bytes) -> Hop:
            if not self._directory.several:
                return Hop(self._directory.home, request)
            queue = parse(request).message_queue
            endpoint = await self._directory.resolve(queue.broker.name, queue.topic)
            if not prefix_handles or self._directory.is_home(endpoint):
                return Hop(endpoint, request)
            return Hop(endpoint, request, lambda frame: self._handles_out(endpoint, frame))

        return route

    def _handles_out(self, endpoint: Endpoint, frame: bytes) -> bytes:
        response = spb.ReceiveMessageResponse.FromString(frame)
        if not response.HasField("message"):
            return frame
        properties = response.message.system_properties
        properties.receipt_handle = self._directory.handle_out(endpoint, properties.receipt_handle)
        raw: bytes = response.SerializeToString()
        return raw

    def by_handle(self, method: str) -> Router:
        parse = request_type(method).FromString

        async def route(request: bytes) -> Hop:
            if not self._directory.several:
                return Hop(self._directory.home, request)
            parsed = parse(request)
            if method == "AckMessage":
                endpoint = self._ack_handles_in(parsed)
            else:
                endpoint, parsed.receipt_handle = self._directory.handle_in(parsed.receipt_handle)
            if method != "ChangeInvisibleDuration" or self._directory.is_home(endpoint):
                return Hop(endpoint, parsed.SerializeToString())
            return Hop(
                endpoint, parsed.SerializeToString(), lambda r: self._new_handle(endpoint, r)
            )

        return route

    def _ack_handles_in(self, request: spb.AckMessageRequest) -> Endpoint:
        """Where an ack goes: the group of its first entry; the entries of that group lose their
        prefix (an entry of another group stays as it is and is answered INVALID_RECEIPT_HANDLE
        by this one: the official clients ack one message per request)."""
        target: Endpoint | None = None
        for entry in request.entries:
            endpoint, handle = self._directory.handle_in(entry.receipt_handle)
            target = target or endpoint
            if endpoint == target:
                entry.receipt_handle = handle
        return target or self._directory.home

    def _new_handle(self, endpoint: Endpoint, frame: bytes) -> bytes:
        response = spb.ChangeInvisibleDurationResponse.FromString(frame)
        response.receipt_handle = self._directory.handle_out(endpoint, response.receipt_handle)
        raw: bytes = response.SerializeToString()
        return raw

    async def assignment(self, request: bytes) -> Hop:
        front = spb.QueryAssignmentRequest.FromString(request).endpoints
        if self._advertised is not None:
            front = self._advertised.to_proto()

        def answer(frame: bytes) -> bytes:
            response = spb.QueryAssignmentResponse.FromString(frame)
            self._directory.learn_queues(a.message_queue for a in response.assignments)
            for assignment in response.assignments:
                assignment.message_queue.broker.endpoints.CopyFrom(front)
            raw: bytes = response.SerializeToString()
            return raw

        return Hop(self._directory.home, request, answer)


def _from_producer(method: str, request: bytes) -> bool:
    try:
        return _parsed_from_producer(method, request)
    except DecodeError:
        return False  # not a request an official producer sends


def _parsed_from_producer(method: str, request: bytes) -> bool:
    if method == "Heartbeat":
        client_type: int = spb.HeartbeatRequest.FromString(request).client_type
        return bool(client_type == pb.PRODUCER)
    # Consumers name their group when they leave; producers have none.
    return not spb.NotifyClientTerminationRequest.FromString(request).HasField("group")
