"""A small broker of this process for the sidecar's in-process tests: a real grpc.aio server on
127.0.0.1:0 serving what the sidecar's producer calls, apache.rocketmq.v2 QueryRoute and
SendMessage, and the duplicate check of the resend pool, rocketbox.admin.v1 BrokerAdmin's
GetMessage (the index by message id).

Each SendMessage request takes the next answer of its script (``answer_next``; STORE once the
script is empty):

- STORE: every message of the request stored, each entry OK with its queue offset;
- THROTTLE: every entry TOO_MANY_REQUESTS ("system busy"), nothing stored;
- UNAVAILABLE: the call fails with gRPC UNAVAILABLE on a live connection, nothing stored (the
  sidecar cannot know that: it counts the message as maybe stored);
- BROKER_ERROR: every entry INTERNAL_SERVER_ERROR, nothing stored (the broker said so);
- UNAUTHORIZED / FORBIDDEN: every entry refused so, nothing stored (the broker's auth);
- HANG: the call never answers (the producer's deadline ends it), nothing stored;
- STORE_AND_HANG: every message stored, then the call never answers: the ambiguous send whose
  message the broker does hold.

It records every request (``requests``: the message ids of each SendMessage, in order, and
``metadata``: each one's gRPC metadata) and every index lookup (``lookups``), so a test can say
what went over the wire. Handlers run on the loop
of the test that started it: no locks.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from sidecar.channels import Endpoint

BROKER_NAME = "broker-a"
QUEUES = 4
ACCEPTED_TYPES = [definition_pb2.NORMAL, definition_pb2.FIFO, definition_pb2.DELAY]
# What a SendMessage refused by its entries' status answers.
REFUSALS = {
    "THROTTLE": (Code.TOO_MANY_REQUESTS, "system busy"),
    "BROKER_ERROR": (Code.INTERNAL_SERVER_ERROR, "scripted: failed"),
    "UNAUTHORIZED": (Code.UNAUTHORIZED, "scripted: who are you"),
    "FORBIDDEN": (Code.FORBIDDEN, "scripted: no PUB right"),
}


class Answer(enum.Enum):
    STORE = "STORE"
    THROTTLE = "THROTTLE"
    UNAVAILABLE = "UNAVAILABLE"
    BROKER_ERROR = "BROKER_ERROR"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    HANG = "HANG"
    STORE_AND_HANG = "STORE_AND_HANG"


@dataclass(frozen=True)
class Stored:
    topic: str
    queue_id: int
    queue_offset: int


class ScriptedBroker(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    def __init__(self) -> None:
        self.port = 0
        self._script: deque[Answer] = deque()
        # Once the script is out: every request's answer (an outage for as long as it is set).
        self.standing_answer = Answer.STORE
        # Message id → where it was stored (the broker's index); a message stored twice is
        # listed twice in ``store_log``.
        self.stored: dict[str, Stored] = {}
        self.store_log: list[str] = []
        self.requests: list[list[str]] = []
        self.metadata: list[dict[str, str]] = []
        self.lookups: list[str] = []
        self._next_offset = [0] * QUEUES
        # Set at stop: hanging calls end, so the server's stop does not wait on them.
        self._released = asyncio.Event()

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint("127.0.0.1", self.port)

    def answer_next(self, *answers: Answer) -> None:
        """The answers of the next SendMessage requests, in order."""
        self._script.extend(answers)

    async def QueryRoute(self, request: Any, context: Any) -> Any:  # noqa: N802 - the protocol's method name
        queues = [
            definition_pb2.MessageQueue(
                topic=request.topic,
                id=queue_id,
                permission=definition_pb2.READ_WRITE,
                broker=definition_pb2.Broker(
                    name=BROKER_NAME, id=0, endpoints=self.endpoint.to_proto()
                ),
                accept_message_types=ACCEPTED_TYPES,
            )
            for queue_id in range(QUEUES)
        ]
        return service_pb2.QueryRouteResponse(
            status=definition_pb2.Status(code=Code.OK), message_queues=queues
        )

    async def SendMessage(self, request: Any, context: Any) -> Any:  # noqa: N802 - the protocol's method name
        self.requests.append([m.system_properties.message_id for m in request.messages])
        self.metadata.append(dict(context.invocation_metadata() or ()))
        answer = self._script.popleft() if self._script else self.standing_answer
        if answer is Answer.UNAVAILABLE:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: broker unavailable")
        if answer is Answer.HANG:
            await self._released.wait()
            await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: the broker stopped")
        if answer.value in REFUSALS:
            code, text = REFUSALS[answer.value]
            status = definition_pb2.Status(code=code, message=text)
            return service_pb2.SendMessageResponse(
                status=status,
                entries=[service_pb2.SendResultEntry(status=status) for _ in request.messages],
            )
        entries = [self._store(m) for m in request.messages]
        if answer is Answer.STORE_AND_HANG:
            await self._released.wait()
            await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: the broker stopped")
        return service_pb2.SendMessageResponse(
            status=definition_pb2.Status(code=Code.OK), entries=entries
        )

    def _store(self, m: Any) -> Any:
        message_id = m.system_properties.message_id
        queue_id = m.system_properties.queue_id
        offset = self._next_offset[queue_id]
        self._next_offset[queue_id] += 1
        self.stored[message_id] = Stored(m.topic.name, queue_id, offset)
        self.store_log.append(message_id)
        return service_pb2.SendResultEntry(
            status=definition_pb2.Status(code=Code.OK), message_id=message_id, offset=offset
        )


class ScriptedIndex(broker_admin_pb2_grpc.BrokerAdminServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    """GetMessage over the scripted broker's stored messages; nothing else of BrokerAdmin."""

    def __init__(self, broker: ScriptedBroker) -> None:
        self._broker = broker

    async def GetMessage(self, request: Any, context: Any) -> Any:  # noqa: N802 - the protocol's method name
        self._broker.lookups.append(request.message_id)
        stored = self._broker.stored.get(request.message_id)
        if stored is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"{request.message_id} not stored")
            raise AssertionError("abort raises")  # for the type checker: abort never returns
        return broker_admin_pb2.GetMessageResponse(
            messages=[
                broker_admin_pb2.StoredMessage(
                    message_id=request.message_id,
                    topic=stored.topic,
                    queue_id=stored.queue_id,
                    queue_offset=stored.queue_offset,
                )
            ]
        )


@asynccontextmanager
async def scripted_broker() -> AsyncIterator[ScriptedBroker]:
    """A ScriptedBroker serving on 127.0.0.1 at a free port until the block ends."""
    broker = ScriptedBroker()
    server = grpc.aio.server()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(broker, server)
    broker_admin_pb2_grpc.add_BrokerAdminServicer_to_server(ScriptedIndex(broker), server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield broker
    finally:
        broker._released.set()
        await server.stop(None)
