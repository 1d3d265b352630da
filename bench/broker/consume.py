"""(c) consumption alone, from a backlog: receives, acks, and the official SimpleConsumer beside
the null service.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.broker.e2e import e2e_produce
from bench.broker.e2e_consumers import E2E_BATCH, E2E_FLUSH, E2E_GROUP, Tally, ack, receive_request
from bench.broker.figures import (
    CLIENT_ID_HEADER,
    RPC_TIMEOUT_S,
    STALL_DEADLINE_S,
    TOPIC,
    Figure,
    Metadata,
    Versus,
)
from bench.broker.processes import start_broker, start_helper, wait_quiet
from bench.process_control import (
    BenchError,
    Child,
    run_async,
)

# -- (c) consumption alone, from a backlog: receives, acks, the official SimpleConsumer ----------
CONSUME_INVISIBLE_S = 300  # the receive phase must not see a message come back
CONSUME_POLL_S = 1
SINGLE_ACK_WINDOW = 64  # single-entry AckMessages in flight, as many clients acking each message

T = TypeVar("T")


async def raw_receive(
    stub: Any, metadata: Metadata, count: int, streams: int
) -> list[spb.AckMessageEntry]:
    """``streams`` loops of ReceiveMessage (E2E_BATCH) until ``count`` messages came; what an
    ack of each needs. More than ``count``, or a message twice, is a BenchError."""
    request = receive_request(E2E_BATCH, CONSUME_INVISIBLE_S, CONSUME_POLL_S)
    entries: list[spb.AckMessageEntry] = []
    seen: set[str] = set()
    stalled_at = time.monotonic() + STALL_DEADLINE_S
    all_in = asyncio.Event()

    async def stream() -> None:
        nonlocal stalled_at
        while not all_in.is_set():
            if time.monotonic() > stalled_at:
                raise BenchError(f"receive: {len(entries):,} of {count:,}, then nothing")
            async for frame in stub.ReceiveMessage(
                request, metadata=metadata, timeout=RPC_TIMEOUT_S
            ):
                kind = frame.WhichOneof("content")
                if kind == "status" and frame.status.code not in (pb.OK, pb.MESSAGE_NOT_FOUND):
                    code = pb.Code.Name(frame.status.code)
                    raise BenchError(f"ReceiveMessage: {code}: {frame.status.message}")
                if kind == "message":
                    sp = frame.message.system_properties
                    if sp.message_id in seen:
                        raise BenchError(f"message {sp.message_id} received twice")
                    seen.add(sp.message_id)
                    entries.append(
                        spb.AckMessageEntry(
                            message_id=sp.message_id, receipt_handle=sp.receipt_handle
                        )
                    )
                    stalled_at = time.monotonic() + STALL_DEADLINE_S
                    if len(entries) >= count:
                        all_in.set()

    # Done when the last message came, not when the other streams' long polls end.
    tasks = [asyncio.create_task(stream()) for _ in range(streams)]
    waiter = asyncio.create_task(all_in.wait())
    # A stream ends by itself only once all came, or by failing: the first of either ends this.
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    errors = [e for t in tasks if t.done() and (e := t.exception()) is not None]
    for t in (waiter, *tasks):
        t.cancel()
    await asyncio.gather(waiter, *tasks, return_exceptions=True)
    if errors:
        raise errors[0]
    if len(entries) != count:
        raise BenchError(f"receive: {len(entries):,} messages for a backlog of {count:,}")
    return entries


async def raw_ack(
    stub: Any, metadata: Metadata, entries: Sequence[Any], per_request: int, window: int
) -> None:
    """Ack every entry, ``per_request`` to an AckMessage, ``window`` in flight; each must be OK."""
    chunks = iter(range(0, len(entries), per_request))  # shared: each task takes the next

    async def acker() -> None:
        for first in chunks:
            await ack(stub, metadata, entries[first : first + per_request])

    await asyncio.gather(*(acker() for _ in range(window)))


async def measured(
    server: Child, name: str, count: int, work: Coroutine[Any, Any, T]
) -> tuple[Figure, T]:
    """``work`` timed, with the server's and this process's CPU, after the server went quiet."""
    await asyncio.to_thread(wait_quiet, server)
    cpu0, server_cpu0 = time.process_time(), server.cpu_seconds()
    start = time.perf_counter()
    result = await work
    elapsed = time.perf_counter() - start
    server_cpu, client_cpu = server.cpu_seconds() - server_cpu0, time.process_time() - cpu0
    return Figure(name, count, elapsed, server_cpu_s=server_cpu, client_cpu_s=client_cpu), result


async def _raw_consume(
    broker: Child, count: int, streams: int, batch: int, window: int
) -> list[Figure]:
    metadata: Metadata = ((CLIENT_ID_HEADER, f"broker-bench-{uuid.uuid4().hex}"),)
    figures = []
    async with grpc.aio.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        await e2e_produce(stub, metadata, count, batch, window, 0.0)
        receive, entries = await measured(
            broker,
            f"(c) raw ReceiveMessage {E2E_BATCH}, {streams} streams, from a backlog",
            count,
            raw_receive(stub, metadata, count, streams),
        )
        figures.append(receive)
        ack, _ = await measured(
            broker,
            f"(c) AckMessage of {E2E_BATCH} entries, {streams} in flight",
            count,
            raw_ack(stub, metadata, entries, E2E_BATCH, streams),
        )
        figures.append(ack)
        await e2e_produce(stub, metadata, count, batch, window, 0.0)
        await asyncio.to_thread(wait_quiet, broker)
        entries = await raw_receive(stub, metadata, count, streams)
        single, _ = await measured(
            broker,
            f"(c) AckMessage of 1 entry, {SINGLE_ACK_WINDOW} in flight",
            count,
            raw_ack(stub, metadata, entries, 1, SINGLE_ACK_WINDOW),
        )
        figures.append(single)
    return figures


def client_consume(endpoint: str, clients: int, count: int) -> float:
    """``clients`` official SimpleConsumers (a thread each: receive E2E_BATCH, ack each) until
    ``count`` messages were acked; the seconds it took."""
    from rocketmq import (  # noqa: PLC0415 - logs to ~
        ClientConfiguration,
        Credentials,
        FilterExpression,
        SimpleConsumer,
    )

    consumers = []
    try:
        for _ in range(clients):
            consumer = SimpleConsumer(
                ClientConfiguration(endpoint, Credentials()),
                E2E_GROUP,
                {TOPIC: FilterExpression("*")},
                await_duration=CONSUME_POLL_S,
            )
            consumer.startup()
            consumers.append(consumer)
        tally = Tally(count)

        def consume(consumer: Any) -> None:
            try:
                while not tally.done.is_set():
                    for m in consumer.receive(E2E_BATCH, CONSUME_INVISIBLE_S):
                        consumer.ack(m)
                        tally.add(1)
            except Exception as e:
                tally.fail(f"SimpleConsumer: {e!r}")

        threads = [threading.Thread(target=consume, args=(c,), daemon=True) for c in consumers]
        start = time.perf_counter()
        for t in threads:
            t.start()
        tally.wait("SimpleConsumers")
        elapsed = time.perf_counter() - start
        for t in threads:
            t.join(CONSUME_POLL_S + RPC_TIMEOUT_S)
        return elapsed
    finally:
        for c in consumers:
            c.shutdown()


def bench_client_consume(server: Child, name: str, count: int, clients: int) -> Figure:
    """The official SimpleConsumers against ``server`` (a broker holding at least ``count``
    messages, or the null service), which is stopped afterwards."""
    try:
        wait_quiet(server)
        cpu0, server_cpu0 = time.process_time(), server.cpu_seconds()
        elapsed = client_consume(server.endpoint, clients, count)
        server_cpu, client_cpu = server.cpu_seconds() - server_cpu0, time.process_time() - cpu0
    except BaseException:
        server.stop()
        raise
    server.stop_checked()
    return Figure(name, count, elapsed, server_cpu_s=server_cpu, client_cpu_s=client_cpu)


async def _preload(broker: Child, count: int, batch: int, window: int) -> None:
    metadata: Metadata = ((CLIENT_ID_HEADER, f"broker-bench-{uuid.uuid4().hex}"),)
    async with grpc.aio.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        await e2e_produce(stub, metadata, count, batch, window, 0.0)


def run_consume(
    args: argparse.Namespace, base: Path, report: Callable[[Figure, Versus | None], None]
) -> None:
    """The consumption figures (c): raw receives and acks, each with the broker's CPU per
    message; the official SimpleConsumer beside its own ceiling (the null service)."""
    count = args.consume_messages
    data_dir = base / "consume-raw"
    broker = start_broker(data_dir, E2E_FLUSH, args.segment_mib, "--group", E2E_GROUP)
    try:
        receive, ack, single = run_async(
            _raw_consume(broker, count, args.e2e_streams, args.batch_size, args.batch_window)
        )
    except BaseException:
        broker.stop()
        raise
    broker.stop_checked()
    shutil.rmtree(data_dir, ignore_errors=True)
    for fig in (receive, ack, single):
        report(fig, None)
    both = receive.server_us_per_item + ack.server_us_per_item
    verdict = "met" if both <= 300 else "NOT MET"
    print(
        f"{'(c) broker CPU per message received and acked':<58} {both:>9,.0f} µs/msg"
        f"  (receive {E2E_BATCH} + ack {E2E_BATCH}; target <= 300 µs: {verdict})",
        flush=True,
    )
    clients = args.e2e_clients
    null = bench_client_consume(
        start_helper("--serve-null", "null service", base),
        f"official SimpleConsumer -> null service, {clients} clients",
        count,
        clients,
    )
    report(null, None)
    data_dir = base / "consume-client"
    broker = start_broker(data_dir, E2E_FLUSH, args.segment_mib, "--group", E2E_GROUP)
    try:
        run_async(_preload(broker, count, args.batch_size, args.batch_window))
    except BaseException:
        broker.stop()
        raise
    fig = bench_client_consume(
        broker,
        f"(c) official SimpleConsumer, receive {E2E_BATCH} + ack each, {clients} clients",
        count,
        clients,
    )
    shutil.rmtree(data_dir, ignore_errors=True)
    report(fig, Versus("null", null, lambda r: r >= 0.9, ">= 0.90x"))
