"""What the sidecar bench sends with: the clients (direct to the broker, raw batches to the broker,
the sidecar's three calls, the client library's batching sender); loops.py drives them and
counts.

Every send answers an outcome string: ``stored``, ``spooled CAUSE`` (``spooled UNAVAILABLE``,
``spooled THROTTLED``), ``RESOURCE_EXHAUSTED`` (admission control or a full outbox), or a
description of anything else. A run expects one of them; ``spooled`` accepts any cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from bench.sidecar.loops import OUTCOME_CHARS_MAX, CpuMeter, Run, closed_loop, deadline_s
from bench.sidecar.processes import HOST, RPC_TIMEOUT_S, TOPIC
from outbox.entry import OutboxEntry, OutboxMessage, SpoolCause
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from sidecar.channels import Endpoint
from sidecar.errors import SidecarError
from sidecar.message_id import MessageIdGenerator
from sidecar.producer import Producer, ProducerConfig

BODY = os.urandom(1024)
# One generator for every message id made in this process: two would repeat each other's ids.
IDS = MessageIdGenerator()


RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
# A call gRPC's server dropped before the sidecar's code saw it: grpc core's server drops calls at
# random once too many wait for the application to take them (grpc.server.max_pending_requests:
# past some thousands of waiting unary calls on a grpc.aio server, until that option was raised).
CANCELLED = "CANCELLED"
# The client library's batching sender as the bench's row names it.
LIBRARY_LINGER_MS = 1
LIBRARY_BATCH_MESSAGES_MAX = 256
LIBRARY_BATCHES_IN_FLIGHT_MAX = 4
LIBRARY_SETTINGS = (
    f"batching sender: linger {LIBRARY_LINGER_MS} ms, {LIBRARY_BATCH_MESSAGES_MAX} msgs/batch, "
    f"{LIBRARY_BATCHES_IN_FLIGHT_MAX} batches in flight"
)


def outcome_of(result: api.SendResult) -> str:
    which = result.WhichOneof("outcome")
    if which == "stored":
        return "stored"
    if which == "spooled":
        return f"spooled {api.SpoolCause.Name(result.spooled.cause).removeprefix('SPOOL_CAUSE_')}"
    if which == "rejected":
        if result.rejected.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]:
            return RESOURCE_EXHAUSTED
        r = result.rejected
        return f"rejected {r.code} {r.field}: {r.reason}"
    return "no outcome"


class DirectClient:
    """The sidecar's own producer in this process: send to the broker as the sidecar does,
    without the hop through it. ``Producer.send`` sends one message per SendMessage and does
    not coalesce: a plain client of the broker."""

    def __init__(self, broker_port: int, topic: str = TOPIC) -> None:
        self.producer = Producer(ProducerConfig(access_points=(Endpoint(HOST, broker_port),)))
        self.topic = topic

    async def send(self) -> str:
        message = OutboxMessage(
            topic=self.topic,
            body=BODY,
            message_id=IDS.next_id(),
            born_timestamp_ms=int(time.time() * 1000),
        )
        try:
            await self.producer.send(message)
        except SidecarError as e:
            return f"{type(e).__name__}: {e}"
        return "stored"

    async def close(self) -> None:
        await self.producer.close()


class BatchClient:
    """Raw apache.rocketmq.v2 stubs to the broker: ``batch`` messages per SendMessage, as a
    resend pool that batched its entries could send them."""

    def __init__(self, endpoint: str, topic: str, batch: int) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint)
        self.stub: Any = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.batch = batch
        self._resource = definition_pb2.Resource(name=topic)
        self._metadata = (("x-mq-client-id", f"sidecar-bench-{uuid.uuid4().hex[:12]}"),)

    async def send(self) -> str:
        born = timestamp_pb2.Timestamp()
        born.GetCurrentTime()
        request = service_pb2.SendMessageRequest(
            messages=[
                definition_pb2.Message(
                    topic=self._resource,
                    body=BODY,
                    system_properties=definition_pb2.SystemProperties(
                        message_id=IDS.next_id(),
                        message_type=definition_pb2.NORMAL,
                        body_encoding=definition_pb2.IDENTITY,
                        born_timestamp=born,
                    ),
                )
                for _ in range(self.batch)
            ]
        )
        reply = await self.stub.SendMessage(request, metadata=self._metadata, timeout=RPC_TIMEOUT_S)
        codes = {e.status.code for e in reply.entries}
        if len(reply.entries) != self.batch or codes != {definition_pb2.OK}:
            return f"{len(reply.entries)} entries, codes {sorted(codes)}: {reply.status.message}"
        return "stored"

    async def run(self, count: int, window: int, cpu: CpuMeter) -> Run:
        calls = max(1, count // self.batch)
        return await closed_loop(self.send, calls, window, "stored", cpu, self.batch)

    async def close(self) -> None:
        await self.channel.close()


def summary(outcomes: Sequence[str]) -> str:
    """One outcome for a call's many: the common one, or each with its count."""
    counted = Counter(outcomes)
    if len(counted) == 1:
        return outcomes[0]
    return "mixed: " + ", ".join(f"{o} x{n}" for o, n in counted.most_common())


class SidecarClient:
    """An app of the sidecar: ``Send``, ``SendBatch`` and ``SendStream`` over one channel."""

    def __init__(self, endpoint: str, batch: int = 32) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint)
        self.stub: Any = sidecar_pb2_grpc.SidecarServiceStub(self.channel)
        self._message = api.Message(topic=TOPIC, body=BODY)
        self._request = api.SendRequest(message=self._message)
        self.batch = batch
        self._batch_request = api.SendBatchRequest(messages=[self._message] * batch)

    async def send(self) -> str:
        try:
            response: api.SendResponse = await self.stub.Send(self._request, timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            if e.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED):
                return str(e.code().name)  # without the details: they vary
            return f"{e.code().name}: {e.details()}"
        return outcome_of(response.result)

    async def send_batch(self) -> str:
        """One SendBatch of ``batch`` messages."""
        response: api.SendBatchResponse = await self.stub.SendBatch(
            self._batch_request, timeout=RPC_TIMEOUT_S
        )
        if len(response.results) != self.batch:
            return f"{len(response.results)} results for {self.batch} messages"
        return summary([outcome_of(r) for r in response.results])

    async def run_batches(self, count: int, window: int, expect: str, cpu: CpuMeter) -> Run:
        """``count`` messages (rounded down to whole batches), ``window`` calls in flight."""
        calls = max(1, count // self.batch)
        return await closed_loop(self.send_batch, calls, window, expect, cpu, self.batch)

    async def stream(
        self, count: int, streams: int, window: int, expect: str, cpu: CpuMeter
    ) -> Run:
        """``count`` messages over ``streams`` SendStream calls, ``window`` in flight each."""
        outcomes: Counter[str] = Counter()

        async def one_stream(n: int) -> None:
            call = self.stub.SendStream(timeout=deadline_s(count))
            slots = asyncio.Semaphore(window)

            async def write() -> None:
                for i in range(n):
                    await slots.acquire()
                    await call.write(api.SendStreamRequest(request_id=i, message=self._message))
                await call.done_writing()

            writer = asyncio.create_task(write())
            answered = 0
            try:
                async for response in call:
                    slots.release()
                    answered += 1
                    outcomes[outcome_of(response.result)[:OUTCOME_CHARS_MAX]] += 1
            finally:
                if not writer.done():
                    writer.cancel()
            await writer
            if answered != n:
                outcomes["not answered on a stream"] += n - answered

        share = [count // streams + (1 if i < count % streams else 0) for i in range(streams)]
        start = time.perf_counter()
        await asyncio.gather(*(one_stream(n) for n in share if n))
        seconds = time.perf_counter() - start
        return Run(count, seconds, cpu.read(), expect, outcomes)

    async def close(self) -> None:
        await self.channel.close()


class LibraryClient:
    """The client library's batching sender (``rocketbox_client``, its own distribution; it
    groups concurrent ``send()`` calls into the sidecar's batch calls). Imported when used, so
    that the bench's other rows run where it is not installed."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._stack = contextlib.AsyncExitStack()
        self._lib: Any = None
        self._sender: Any = None
        self._message: Any = None

    async def __aenter__(self) -> LibraryClient:
        self._lib = importlib.import_module("rocketbox_client")
        client = await self._stack.enter_async_context(self._lib.AsyncClient(self.endpoint))
        self._sender = client.batching_sender(
            linger_ms=LIBRARY_LINGER_MS,
            batch_messages_max=LIBRARY_BATCH_MESSAGES_MAX,
            batches_in_flight_max=LIBRARY_BATCHES_IN_FLIGHT_MAX,
        )
        await self._stack.enter_async_context(self._sender)
        self._message = self._lib.Message(topic=TOPIC, body=BODY)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def send(self) -> str:
        try:
            result = await self._sender.send(self._message)
        except self._lib.ResourceExhaustedError:
            return RESOURCE_EXHAUSTED
        if isinstance(result, self._lib.Stored):
            return "stored"
        if isinstance(result, self._lib.Spooled):
            cause = getattr(result, "cause", None)
            name = str(getattr(cause, "name", cause)).upper().removeprefix("SPOOL_CAUSE_")
            return f"spooled {name}"
        return f"unexpected result {result!r}"


def make_entries(n: int, due_in_ms: int) -> list[OutboxEntry]:
    """Spooled entries as intake makes them (broker unavailable), due ``due_in_ms`` from now."""
    now = int(time.time() * 1000)
    return [
        OutboxEntry(
            message=OutboxMessage(
                topic=TOPIC, body=BODY, message_id=IDS.next_id(), born_timestamp_ms=now
            ),
            cause=SpoolCause.UNAVAILABLE,
            created_ms=now,
            next_send_time_ms=now + due_in_ms,
            last_error="UNAVAILABLE: bench",
            state_changed_ms=now,
        )
        for _ in range(n)
    ]
