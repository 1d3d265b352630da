"""(a) the official client, one message per request, and (b) multi-message requests through the
generated stub, each against a fresh broker.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.broker.figures import (
    BODY,
    CLIENT_ID_HEADER,
    RPC_TIMEOUT_S,
    STALL_DEADLINE_S,
    TOPIC,
    Figure,
)
from bench.broker.processes import start_broker, wait_quiet
from bench.process_control import (
    BenchError,
    Child,
    run_async,
)


# -- (a) the official client, one message per request ---------------------------------------------
def bench_official_client(
    server: Child,
    name: str,
    count: int,
    window: int,
    warmup: int,
    credentials: tuple[str, str] = ("", ""),
) -> Figure:
    """The official Producer against ``server`` (a broker, or the null service), which is
    stopped afterwards; ``credentials``: its access key and secret key (none by default)."""
    from rocketmq import ClientConfiguration, Credentials, Producer  # noqa: PLC0415 - logs to ~

    try:
        config = ClientConfiguration(server.endpoint, Credentials(*credentials))
        producer = Producer(config, (TOPIC,))
        producer.startup()
        try:
            _client_sends(producer, warmup, window)
            wait_quiet(server)
            cpu0, server_cpu0 = time.process_time(), server.cpu_seconds()
            start = time.perf_counter()
            failures = _client_sends(producer, count, window)
            elapsed = time.perf_counter() - start
            server_cpu = server.cpu_seconds() - server_cpu0
            client_cpu = time.process_time() - cpu0
        finally:
            producer.shutdown()
    except BaseException:
        server.stop()
        raise
    server.stop_checked()
    return Figure(
        name,
        count,
        elapsed,
        server_cpu_s=server_cpu,
        client_cpu_s=client_cpu,
        failures=failures,
    )


def _client_sends(producer: Any, count: int, window: int) -> list[str]:
    """``count`` sends through ``Producer.send_async``, at most ``window`` unanswered."""
    from rocketmq import Message  # noqa: PLC0415 - the client writes its log under ~ on import

    slots = threading.Semaphore(window)
    failures: list[str] = []

    def done(future: Future[Any]) -> None:
        error = future.exception()
        if error is not None:
            failures.append(repr(error))
        slots.release()

    for _ in range(count):
        msg = Message()
        msg.topic = TOPIC
        msg.body = BODY
        if not slots.acquire(timeout=STALL_DEADLINE_S):
            raise BenchError(f"no send answered for {STALL_DEADLINE_S:.0f} s")
        producer.send_async(msg).add_done_callback(done)
    for _ in range(window):
        if not slots.acquire(timeout=STALL_DEADLINE_S):
            raise BenchError(f"the last sends were not answered within {STALL_DEADLINE_S:.0f} s")
    return failures


# -- (b) multi-message requests through the generated stub ----------------------------------------
def bench_stub_batches(
    data_dir: Path,
    flush: str,
    segment_mib: int,
    count: int,
    batch: int,
    window: int,
    warmup: int,
) -> Figure:
    broker = start_broker(data_dir, flush, segment_mib)
    try:
        figure = run_async(_stub_sends(broker, flush, count, batch, window, warmup))
    except BaseException:
        broker.stop()
        raise
    broker.stop_checked()
    return figure


def send_request(resource: Any, bodies: Sequence[bytes], queue_id: int | None = None) -> Any:
    """One SendMessage of ``bodies``; ``queue_id``: the queue it addresses (a route's, in a
    cluster); None: the broker's choice."""
    born = Timestamp()
    born.GetCurrentTime()
    return spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=resource,
                body=body,
                system_properties=pb.SystemProperties(
                    message_id=uuid.uuid4().hex.upper(),
                    message_type=pb.NORMAL,
                    body_encoding=pb.IDENTITY,
                    born_timestamp=born,
                    queue_id=queue_id,
                ),
            )
            for body in bodies
        ]
    )


async def _stub_sends(
    broker: Child, flush: str, count: int, batch: int, window: int, warmup: int
) -> Figure:
    resource = pb.Resource(name=TOPIC)
    metadata = ((CLIENT_ID_HEADER, f"broker-bench-{uuid.uuid4().hex}"),)
    failures: list[str] = []
    bodies = [BODY] * batch
    async with grpc.aio.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)

        async def sender(todo: Iterator[int]) -> None:
            for _ in todo:
                reply = await stub.SendMessage(
                    send_request(resource, bodies), metadata=metadata, timeout=RPC_TIMEOUT_S
                )
                if len(reply.entries) != batch:
                    failures.append(f"{len(reply.entries)} entries for {batch} messages")
                for entry in reply.entries:
                    if entry.status.code != pb.OK:
                        failures.append(
                            f"{pb.Code.Name(entry.status.code)}: {entry.status.message}"
                        )

        async def run(requests: int) -> None:
            todo = iter(range(requests))  # shared: each sender takes the next request
            await asyncio.gather(*(sender(todo) for _ in range(window)))

        await run(max(1, warmup // batch))
        await asyncio.to_thread(wait_quiet, broker)
        cpu0, broker_cpu0 = time.process_time(), broker.cpu_seconds()
        start = time.perf_counter()
        await run(count // batch)
        elapsed = time.perf_counter() - start
        return Figure(
            f"(b) generated stub, {flush}, {batch}/request, {window} in flight",
            count // batch * batch,
            elapsed,
            server_cpu_s=broker.cpu_seconds() - broker_cpu0,
            client_cpu_s=time.process_time() - cpu0,
            failures=failures,
        )
