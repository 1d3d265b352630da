"""The broker's gRPC ceilings: a grpc.aio echo (one-request-per-message Python gRPC) and a null
MessagingService (the official client's own ceiling), each run in a child process.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.broker.e2e_consumers import E2E_BATCH
from bench.broker.figures import BODY, ECHO_METHOD, ECHO_SERVICE, QUEUES, RPC_TIMEOUT_S, Figure
from bench.broker.processes import start_helper, wait_quiet
from bench.process_control import (
    Child,
    run_async,
)


# -- the echo server: the ceiling of one-request-per-message Python gRPC --------------------------
async def serve_echo() -> None:
    """Run in a child process (``--serve-echo``): a unary echo of raw bytes until SIGTERM."""

    async def echo(request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        ECHO_SERVICE, {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await serve_until_sigterm(server, f"echo listening on 127.0.0.1:{port}")


# -- the null service: the official client's own ceiling -----------------------------------------
class NullMessagingService(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    """Just enough of apache.rocketmq.v2 for the official Producer (route, settings, heartbeat),
    and a SendMessage that stores nothing and answers OK at once."""

    def __init__(self, port: int) -> None:
        self._broker = pb.Broker(
            name="null",
            endpoints=pb.Endpoints(
                scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=port)]
            ),
        )
        self._ok = pb.Status(code=pb.OK, message="OK")
        self._handles = itertools.count()
        self._canned_born = Timestamp()
        self._canned_born.GetCurrentTime()
        self._canned = pb.Message(
            body=BODY,
            system_properties=pb.SystemProperties(
                message_id=uuid.uuid4().hex.upper(),
                message_type=pb.NORMAL,
                body_encoding=pb.IDENTITY,
                body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(BODY):08X}"),
                born_timestamp=self._canned_born,
                store_timestamp=self._canned_born,
                delivery_attempt=1,
            ),
        )

    async def QueryRoute(self, request: Any, _context: Any) -> Any:  # noqa: N802 - protocol
        queues = [
            pb.MessageQueue(
                topic=request.topic,
                id=queue_id,
                permission=pb.READ_WRITE,
                broker=self._broker,
                accept_message_types=[pb.NORMAL],
            )
            for queue_id in range(QUEUES)
        ]
        return spb.QueryRouteResponse(status=self._ok, message_queues=queues)

    async def Heartbeat(self, _request: Any, _context: Any) -> Any:  # noqa: N802 - the protocol's method name
        return spb.HeartbeatResponse(status=self._ok)

    async def NotifyClientTermination(self, _request: Any, _context: Any) -> Any:  # noqa: N802 - the protocol's method name
        return spb.NotifyClientTerminationResponse(status=self._ok)

    async def Telemetry(  # noqa: N802 - the protocol's method name
        self, request_iterator: AsyncIterator[Any], _context: Any
    ) -> AsyncIterator[Any]:
        async for command in request_iterator:
            if command.HasField("settings"):
                settings = pb.Settings()
                settings.CopyFrom(command.settings)
                settings.backoff_policy.CopyFrom(
                    pb.RetryPolicy(
                        max_attempts=3, exponential_backoff=pb.ExponentialBackoff(multiplier=2.0)
                    )
                )
                settings.publishing.max_body_size = 4 * 1024 * 1024
                yield spb.TelemetryCommand(status=self._ok, settings=settings)

    async def SendMessage(self, request: Any, _context: Any) -> Any:  # noqa: N802 - the protocol's method name
        entries = [
            spb.SendResultEntry(status=self._ok, message_id=m.system_properties.message_id)
            for m in request.messages
        ]
        return spb.SendMessageResponse(status=self._ok, entries=entries)

    async def ReceiveMessage(  # noqa: N802 - the protocol's method name
        self, request: Any, _context: Any
    ) -> AsyncIterator[Any]:
        """As many canned 1 KiB messages as asked for (the body's digest right, as the client
        checks it), each with a handle of its own."""
        yield spb.ReceiveMessageResponse(status=self._ok)
        for _ in range(min(request.batch_size, E2E_BATCH)):
            message = pb.Message()
            message.CopyFrom(self._canned)
            message.topic.CopyFrom(request.message_queue.topic)
            message.system_properties.receipt_handle = f"null-{next(self._handles)}"
            yield spb.ReceiveMessageResponse(message=message)
        yield spb.ReceiveMessageResponse(delivery_timestamp=self._canned_born)

    async def AckMessage(self, request: Any, _context: Any) -> Any:  # noqa: N802 - the protocol's method name
        entries = [
            spb.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=self._ok
            )
            for e in request.entries
        ]
        return spb.AckMessageResponse(status=self._ok, entries=entries)


async def serve_null() -> None:
    """Run in a child process (``--serve-null``) until SIGTERM."""
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    service_pb2_grpc.add_MessagingServiceServicer_to_server(NullMessagingService(port), server)
    await serve_until_sigterm(server, f"null service listening on 127.0.0.1:{port}")


async def serve_until_sigterm(server: grpc.aio.Server, ready_line: str) -> None:
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(ready_line, flush=True)
    await stop.wait()
    await server.stop(1.0)


def bench_echo(requests: int, window: int, warmup: int, log_dir: Path) -> Figure:
    server = start_helper("--serve-echo", "echo", log_dir)
    try:
        figure = run_async(_echo_requests(server, requests, window, warmup))
    finally:
        server.stop_checked()
    return figure


async def _echo_requests(server: Child, requests: int, window: int, warmup: int) -> Figure:
    async with grpc.aio.insecure_channel(server.endpoint) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(ECHO_METHOD)
        failures: list[str] = []

        async def caller(todo: Iterator[int]) -> None:
            for _ in todo:
                reply = await call(BODY, timeout=RPC_TIMEOUT_S)
                if reply != BODY:
                    failures.append(f"echo returned {len(reply)} bytes")

        async def run(n: int) -> None:
            todo = iter(range(n))  # shared: each caller takes the next request
            await asyncio.gather(*(caller(todo) for _ in range(window)))

        await run(warmup)
        await asyncio.to_thread(wait_quiet, server)
        cpu0, server_cpu0 = time.process_time(), server.cpu_seconds()
        start = time.perf_counter()
        await run(requests)
        elapsed = time.perf_counter() - start
        return Figure(
            f"grpc.aio unary echo of 1 KiB, {window} in flight",
            requests,
            elapsed,
            "req/s",
            server.cpu_seconds() - server_cpu0,
            time.process_time() - cpu0,
            failures,
        )
