"""NATS JetStream, the peer: async publishes (beside (b)) and a pull consumer end to end (beside
(e)), on 127.0.0.1:4222.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import nats
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.js.api import AckPolicy, ConsumerConfig, StorageType
from nats.js.client import JetStreamContext

from bench.broker.e2e import pace, paced, publish_deadline_s
from bench.broker.e2e_consumers import (
    E2E_BATCH,
    E2E_INVISIBLE_S,
    E2E_POLL_S,
    EndToEnd,
    Receipts,
    Run,
    cpu_now,
    stamped_body,
    stop_tasks,
)
from bench.broker.figures import (
    BODY,
    NATS_URL,
    SLOWEST_RATE,
    STALL_DEADLINE_S,
    Figure,
    NatsUnreachable,
)
from bench.process_control import (
    BenchError,
    find_process,
    process_cpu_seconds,
)
from rocketbox_api.deadlines import within


# -- NATS JetStream: the peer (b) is compared with ------------------------------------------------
async def nats_connect(window: int) -> tuple[NatsClient, JetStreamContext]:
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:  # instead of nats-py's traceback on stderr
        errors.append(e)

    try:
        nc = await within(
            nats.connect(
                NATS_URL,
                connect_timeout=2,
                allow_reconnect=False,
                max_reconnect_attempts=1,  # 0 would mean: retry forever
                reconnect_time_wait=0.2,
                error_cb=on_error,
            ),
            10.0,
        )
    except Exception as e:
        raise NatsUnreachable(f"cannot connect: {(errors or [e])[-1]!r}") from e
    js = nc.jetstream(publish_async_max_pending=window)
    try:
        await js.account_info()
    except Exception as e:
        await nc.close()
        raise NatsUnreachable(f"connected, but JetStream does not answer: {e!r}") from e
    return nc, js


async def nats_reachable() -> None:
    nc, _ = await nats_connect(1)
    await nc.close()


async def bench_nats(count: int, window: int, warmup: int) -> Figure:
    nc, js = await nats_connect(window)
    try:
        stream = f"ROCKETBOX_BENCH_{uuid.uuid4().hex[:12].upper()}"
        subject = f"rocketbox.bench.{stream.lower()}"
        await js.add_stream(name=stream, subjects=[subject], storage=StorageType.FILE)
        try:
            failures: list[str] = []

            async def publish(n: int) -> None:
                # No per-publish wait_stall: asyncio.wait_for on every publish triples the
                # client's cost. A stalled server is caught by the deadline on the whole batch.
                acks = [await js.publish_async(subject, BODY) for _ in range(n)]
                results = await asyncio.gather(*acks, return_exceptions=True)
                failures.extend(repr(r) for r in results if isinstance(r, BaseException))

            async def publish_bounded(n: int) -> None:
                deadline = STALL_DEADLINE_S + n / SLOWEST_RATE
                try:
                    await within(publish(n), deadline)
                except TimeoutError as e:
                    raise BenchError(f"NATS: {n:,} publishes not acked in {deadline:.0f} s") from e

            await publish_bounded(warmup)
            server = find_process("nats-server")
            server_cpu0 = process_cpu_seconds(server) if server else 0.0
            cpu0 = time.process_time()
            start = time.perf_counter()
            await publish_bounded(count)
            elapsed = time.perf_counter() - start
            client_cpu = time.process_time() - cpu0
            server_cpu = process_cpu_seconds(server) - server_cpu0 if server else 0.0
            stored = (await js.stream_info(stream)).state.messages
            if stored != warmup + count:
                failures.append(f"stream holds {stored} messages, {warmup + count} were acked")
        finally:
            await js.delete_stream(stream)
    finally:
        await nc.close()
    return Figure(
        f"NATS JetStream async publish, file storage, {window} in flight",
        count,
        elapsed,
        server_cpu_s=server_cpu,
        client_cpu_s=client_cpu,
        failures=failures,
    )


async def bench_nats_e2e(
    count: int, window: int, fetchers: int, warmup: int, rate: float
) -> EndToEnd:
    """NATS JetStream, the same way: async publishes (``window`` awaiting their acks) while
    ``fetchers`` pull subscriptions of one durable consumer fetch E2E_BATCH at a time and ack
    each message (explicit acks)."""
    nc, js = await nats_connect(window)
    try:
        stream = f"ROCKETBOX_BENCH_{uuid.uuid4().hex[:12].upper()}"
        subject = f"rocketbox.bench.{stream.lower()}"
        await js.add_stream(name=stream, subjects=[subject], storage=StorageType.FILE)
        try:
            durable = "bench"
            await js.add_consumer(
                stream,
                ConsumerConfig(
                    durable_name=durable,
                    ack_policy=AckPolicy.EXPLICIT,
                    ack_wait=E2E_INVISIBLE_S,
                ),
            )
            subs = [
                await js.pull_subscribe_bind(durable=durable, stream=stream)
                for _ in range(fetchers)
            ]
            server = find_process("nats-server")
            await _nats_run(js, subject, subs, server, warmup, 0.0)
            measured = await _nats_run(js, subject, subs, server, count, rate)
        finally:
            await js.delete_stream(stream)
    finally:
        await nc.close()
    return EndToEnd(
        f"NATS JetStream pull consumer, fetch {E2E_BATCH} + ack each, {fetchers} subs",
        f"async publish, {window} in flight, file storage{paced(rate)}",
        count,
        measured,
    )


async def _nats_fetch(sub: JetStreamContext.PullSubscription, receipts: Receipts) -> None:
    try:
        while not receipts.done.is_set():
            try:
                msgs = await sub.fetch(E2E_BATCH, timeout=E2E_POLL_S)
            except nats.errors.TimeoutError:
                continue
            seqs = receipts.received(m.data for m in msgs)
            for m in msgs:
                await m.ack()
            receipts.acked(seqs)
    except Exception as e:
        receipts.fail(f"NATS consumer: {e!r}")


async def _nats_publish(js: JetStreamContext, subject: str, n: int, rate: float) -> None:
    start = time.perf_counter()
    acks = []
    for seq in range(n):
        if seq % E2E_BATCH == 0:  # paced a batch at a time, as the stub sends
            await pace(start, seq, rate)
        acks.append(await js.publish_async(subject, stamped_body(seq)))
    results = await asyncio.gather(*acks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise BenchError(f"NATS: {len(errors)} publishes failed, e.g. {errors[0]!r}")


async def _nats_run(
    js: JetStreamContext,
    subject: str,
    subs: list[JetStreamContext.PullSubscription],
    server: int | None,
    n: int,
    rate: float,
) -> Run:
    """``n`` messages published and consumed at once."""
    receipts = Receipts(n)
    tasks = [asyncio.create_task(_nats_fetch(sub, receipts)) for sub in subs]
    try:
        cpu0 = cpu_now(server)
        start = time.perf_counter()
        deadline = publish_deadline_s(n, rate)
        try:
            await within(_nats_publish(js, subject, n, rate), deadline)
        except TimeoutError as e:
            raise BenchError(f"NATS: {n:,} publishes not acked in {deadline:.0f} s") from e
        produced = time.perf_counter() - start
        await asyncio.to_thread(receipts.wait, "NATS consumers")
        cpu1 = cpu_now(server)
    except BaseException:
        receipts.done.set()
        with contextlib.suppress(Exception):
            await stop_tasks(tasks)
        raise
    await stop_tasks(tasks)
    return Run(produced, receipts.done_at - start, receipts, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])
