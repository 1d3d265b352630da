"""(e) end to end: one broker while messages are produced and consumed at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.broker.e2e_consumers import (
    E2E_FLUSH,
    E2E_GROUP,
    ClientConsumers,
    Consumers,
    EndToEnd,
    RawConsumers,
    Receipts,
    Run,
    cpu_now,
    stamped_body,
)
from bench.broker.figures import (
    CLIENT_ID_HEADER,
    RPC_TIMEOUT_S,
    SLOWEST_RATE,
    STALL_DEADLINE_S,
    TOPIC,
    Metadata,
)
from bench.broker.processes import start_broker, wait_quiet
from bench.broker.sends import send_request
from bench.process_control import (
    BenchError,
    Child,
    run_async,
)


def stamped_request(resource: Any, first: int, n: int) -> Any:
    """A SendMessageRequest of messages ``first`` .. ``first + n - 1``, stamped now."""
    return send_request(resource, [stamped_body(seq) for seq in range(first, first + n)])


async def pace(start: float, sent: int, rate: float) -> None:
    """Until message ``sent`` is due (``rate`` messages a second from ``start``; 0: now)."""
    if rate > 0:
        delay = start + sent / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)


def publish_deadline_s(count: int, rate: float) -> float:
    return STALL_DEADLINE_S + count / (min(rate, SLOWEST_RATE) if rate > 0 else SLOWEST_RATE)


async def e2e_produce(
    stub: Any, metadata: Metadata, count: int, batch: int, window: int, rate: float
) -> None:
    """``count`` stamped messages, ``batch`` a request, ``window`` requests in flight, at most
    ``rate`` messages a second (0: as fast as they go); every entry must be answered OK
    (BenchError otherwise: its message would never arrive)."""
    resource = pb.Resource(name=TOPIC)
    firsts = iter(range(0, count, batch))  # shared: each sender takes the next request
    start = time.perf_counter()

    async def sender() -> None:
        for first in firsts:
            n = min(batch, count - first)
            await pace(start, first, rate)
            reply = await stub.SendMessage(
                stamped_request(resource, first, n), metadata=metadata, timeout=RPC_TIMEOUT_S
            )
            bad = [e.status for e in reply.entries if e.status.code != pb.OK]
            if bad or len(reply.entries) != n:
                first_bad = f": {pb.Code.Name(bad[0].code)}: {bad[0].message}" if bad else ""
                raise BenchError(
                    f"SendMessage: {len(reply.entries)} entries for {n} messages, "
                    f"{len(bad)} refused{first_bad}"
                )

    await asyncio.gather(*(sender() for _ in range(window)))


async def e2e_run(
    stub: Any,
    metadata: Metadata,
    consumers: Consumers,
    count: int,
    batch: int,
    window: int,
    rate: float = 0.0,
    server_pid: int | None = None,
) -> Run:
    """One run: the consumers wait (long polls) as the clock starts and the producer sends;
    until every message was consumed."""
    receipts = Receipts(count)
    consumers.start(receipts)
    try:
        cpu0 = cpu_now(server_pid)
        start = time.perf_counter()
        await e2e_produce(stub, metadata, count, batch, window, rate)
        produced = time.perf_counter() - start
        await asyncio.to_thread(receipts.wait, "consumers")
        cpu1 = cpu_now(server_pid)
    except BaseException:
        receipts.done.set()
        with contextlib.suppress(Exception):
            await consumers.stop()
        raise
    await consumers.stop()
    return Run(produced, receipts.done_at - start, receipts, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])


def bench_e2e(
    data_dir: Path,
    segment_mib: int,
    count: int,
    batch: int,
    window: int,
    warmup: int,
    consumer_kind: str,
    consumer_count: int,
    rate: float,
) -> EndToEnd:
    """Produce through the stub, (b)'s way, and consume with ``consumer_kind`` ("raw" or
    "client") consumers, concurrently, against one fresh broker."""
    broker = start_broker(data_dir, E2E_FLUSH, segment_mib, "--group", E2E_GROUP)
    try:
        figure = run_async(
            _e2e(broker, count, batch, window, warmup, consumer_kind, consumer_count, rate)
        )
    except BaseException:
        broker.stop()
        raise
    broker.stop_checked()
    return figure


async def _e2e(
    broker: Child,
    count: int,
    batch: int,
    window: int,
    warmup: int,
    consumer_kind: str,
    consumer_count: int,
    rate: float,
) -> EndToEnd:
    metadata: Metadata = ((CLIENT_ID_HEADER, f"broker-bench-{uuid.uuid4().hex}"),)
    async with grpc.aio.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        consumers: Consumers
        if consumer_kind == "raw":
            consumers = RawConsumers(stub, metadata, consumer_count)
        else:
            consumers = await asyncio.to_thread(ClientConsumers, broker.endpoint, consumer_count)
        try:
            await e2e_run(stub, metadata, consumers, warmup, batch, window)
            await asyncio.to_thread(wait_quiet, broker)
            run = await e2e_run(
                stub, metadata, consumers, count, batch, window, rate, broker.proc.pid
            )
        finally:
            await asyncio.to_thread(consumers.shutdown)
    return EndToEnd(
        f"(e) {consumers.description}",
        f"stub, {batch}/request, {window} in flight, {E2E_FLUSH}{paced(rate)}",
        count,
        run,
    )


def paced(rate: float) -> str:
    return f", paced at {rate:,.0f}/s" if rate > 0 else ""
