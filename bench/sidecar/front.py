"""(e) The sidecar's RocketMQ front: the official Python client pointed at the front beside the
same client pointed at the broker, in one run, against one broker.

An app adopts the front by changing one endpoint, so the peer is that app as it was: the same
official ``Producer`` and ``SimpleConsumer``, same settings, aimed at the broker directly. Both
run in this process, on the client's own event loop thread; each figure alternates direct and
front in rounds, so that the machine's drift falls on both alike.

- Throughput: ``Producer.send_async`` with W sends in flight (the bench's window), N messages
  per side in two rounds each; the ratio front/direct (target >= 0.9x), with the CPU each
  process spent per message (sc: the sidecar, br: the broker, bench: the clients).
- Latency at a fixed rate: open loop at FRONT_RATE msgs/s (a send starts on schedule whatever
  the earlier ones do, its latency counted from then), LATENCY_ROUNDS rounds per side; the
  added p50 and p99 (target: p99 <= 2 ms).
- Consumer calls, forwarded: a topic preloaded with M messages, read by one SimpleConsumer per
  side (a group each, so both see every message): ``receive`` of up to CONSUME_BATCH, then an
  ``ack`` per message, one call at a time; each call's latency, and the added p50 and p99 per
  kind of call.

The figures measure whatever the front does when the bench runs: every call forwarded to the
broker, or sends through the sidecar's intake once that is the front's send path.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.process_control import BenchError
from bench.sidecar.core import BenchCore
from bench.sidecar.loops import Cpu, CpuMeter, Run, Send, closed_loop, percentile
from bench.sidecar.processes import HOST, TOPIC, Child
from bench.sidecar.table import Row, at_least, at_most, ms, rate_row, versus
from bench.sidecar.targets import (
    CONSUME_BATCH,
    FRONT_ADDED_P99_MAX_MS,
    FRONT_RATE,
    FRONT_ROUNDS,
    FRONT_VS_DIRECT_MIN,
)

FRONT_LINE = re.compile(r"sidecar RocketMQ front on \S+:(\d+)")
# Its own topic, auto-created by the broker: the consumers read exactly the preloaded messages.
CONSUME_TOPIC = "SidecarBenchFrontConsumeTopic"
BODY = b"x" * 1024
OK = "OK"
CONSUME_INVISIBLE_S = 60
# How long one receive long-polls an empty queue; the preloaded topic rarely has one.
CONSUME_AWAIT_S = 2
CONSUME_DEADLINE_S = 120.0
SIDES = ("direct", "front")


def front_endpoint(sidecar: Child) -> str:
    """The front's address from the sidecar's start lines (printed before its ready line)."""
    found = FRONT_LINE.search(sidecar.log.read_text(errors="replace"))
    if found is None:
        raise BenchError(f"the sidecar printed no RocketMQ front line:\n{sidecar.output()}")
    return f"{HOST}:{found.group(1)}"


def message(topic: str) -> Any:
    from rocketmq import Message  # noqa: PLC0415 - the client writes its log under ~ on import

    msg = Message()
    msg.topic = topic
    msg.body = BODY
    return msg


@contextmanager
def official_producer(endpoint: str, topics: tuple[str, ...]) -> Iterator[Any]:
    from rocketmq import ClientConfiguration, Credentials, Producer  # noqa: PLC0415 - logs to ~

    producer = Producer(ClientConfiguration(endpoint, Credentials()), topics)
    producer.startup()
    try:
        yield producer
    finally:
        producer.shutdown()


@contextmanager
def official_consumer(endpoint: str, group: str) -> Iterator[Any]:
    from rocketmq import (  # noqa: PLC0415 - the client logs under ~ on import
        ClientConfiguration,
        Credentials,
        FilterExpression,
        SimpleConsumer,
    )

    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()),
        group,
        {CONSUME_TOPIC: FilterExpression("*")},
        await_duration=CONSUME_AWAIT_S,
    )
    consumer.startup()
    try:
        yield consumer
    finally:
        consumer.shutdown()


def sender(producer: Any, topic: str = TOPIC) -> Send:
    """One ``send_async`` of a 1 KiB message, awaited here; OK once the client has a receipt."""

    async def send() -> str:
        await asyncio.wrap_future(producer.send_async(message(topic)))
        return OK

    return send


class FrontParts(BenchCore):
    """(e) the official client through the sidecar's RocketMQ front vs straight to the broker."""

    async def part_e(self) -> None:
        if self.missing("e", "official Producer -> RocketMQ front", "--rocketmq-listen"):
            return
        broker = await asyncio.to_thread(self.res.broker)
        outbox_url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(
            self.res.sidecar, broker.endpoint, outbox_url, f"--rocketmq-listen={HOST}:0"
        )
        endpoints = {"direct": broker.endpoint, "front": front_endpoint(sidecar)}
        procs = {"direct": {"br": broker}, "front": {"sc": sidecar, "br": broker}}
        topics = (TOPIC, CONSUME_TOPIC)
        with (
            official_producer(endpoints["direct"], topics) as direct,
            official_producer(endpoints["front"], topics) as front,
        ):
            sends = {"direct": sender(direct), "front": sender(front)}
            await self.front_throughput(sends, procs, broker)
            await self.front_latency(sends, procs, broker)
            await self.front_consume(sender(direct, CONSUME_TOPIC), endpoints, procs, broker)
        await asyncio.to_thread(self.res.stop, sidecar)
        await asyncio.to_thread(self.res.stop, broker)

    async def front_throughput(
        self, sends: dict[str, Send], procs: dict[str, dict[str, Child]], broker: Child
    ) -> None:
        w = self.s.window
        per_round = max(1, self.s.messages // FRONT_ROUNDS)
        for send in sends.values():
            await closed_loop(send, 2 * w, w, OK, CpuMeter({}))
        runs: dict[str, Run] = {}
        for _ in range(FRONT_ROUNDS):
            for name, send in sends.items():
                await self.settle(broker)
                run = await closed_loop(send, per_round, w, OK, CpuMeter(procs[name]))
                runs[name] = run if name not in runs else joined(runs[name], run)
        direct, front = runs["direct"], runs["front"]
        self.add(rate_row("e", f"direct: official Producer -> broker, {w} in flight", direct))
        ratio = front.rate / direct.rate
        self.add(
            rate_row("e", f"front: official Producer -> sidecar's RocketMQ front, {w} in flight",
                     front, checks=[at_least(ratio, FRONT_VS_DIRECT_MIN,
                                             f">= {FRONT_VS_DIRECT_MIN:g}x direct")],
                     **versus(front, direct.rate, "direct"))
        )  # fmt: skip

    async def front_latency(
        self, sends: dict[str, Send], procs: dict[str, dict[str, Child]], broker: Child
    ) -> None:
        rate = FRONT_RATE
        paced = await self.paced(sends, procs, broker, rate, OK)
        self.paced_rows("e", paced, "")
        self.added_rows(f"send, {rate:,.0f}/s paced", paced.lat, FRONT_ADDED_P99_MAX_MS)

    def added_rows(self, what: str, lat: dict[str, list[float]], p99_max_ms: float | None) -> None:
        """The front's added p50 and p99 over direct, the direct figure as the reference."""
        for q in (50, 99):
            direct, front = percentile(lat["direct"], q), percentile(lat["front"], q)
            checks = []
            if q == 99 and p99_max_ms is not None:
                checks = [at_most(front - direct, p99_max_ms, f"<= {p99_max_ms:g} ms")]
            self.add(
                Row("e", f"added p{q}, {what}", front - direct, "ms",
                    reference=f"direct {ms(direct)}, front {ms(front)}", checks=checks)
            )  # fmt: skip

    async def front_consume(
        self,
        preload: Send,
        endpoints: dict[str, str],
        procs: dict[str, dict[str, Child]],
        broker: Child,
    ) -> None:
        count = max(CONSUME_BATCH, self.s.messages // 5)
        await closed_loop(preload, count, self.s.window, OK, CpuMeter({}))
        await self.settle(broker)
        calls: dict[str, dict[str, list[float]]] = {n: {"receive": [], "ack": []} for n in SIDES}
        cpu = {name: Cpu() for name in SIDES}
        acked = dict.fromkeys(SIDES, 0)
        with (
            official_consumer(endpoints["direct"], "SidecarBenchFrontDirect") as direct,
            official_consumer(endpoints["front"], "SidecarBenchFrontFront") as front,
        ):
            consumers = {"direct": direct, "front": front}
            deadline = time.monotonic() + CONSUME_DEADLINE_S
            while min(acked.values()) < count:
                if time.monotonic() > deadline:
                    raise BenchError(f"consumed {acked} of {count} in {CONSUME_DEADLINE_S:.0f} s")
                for name, consumer in consumers.items():
                    meter = CpuMeter(procs[name])
                    acked[name] += await asyncio.to_thread(receive_and_ack, consumer, calls[name])
                    cpu[name] += meter.read()
        for name in SIDES:
            receives = len(calls[name]["receive"])
            self.add(
                Row("e", f"{name}: SimpleConsumer receive {CONSUME_BATCH} + ack each",
                    acked[name] / max(cpu[name].wall_s, 1e-9), "msgs/s",
                    us_per_message=cpu[name].us_per_message(acked[name]),
                    cores=cpu[name].cores(),
                    detail=f"{acked[name]:,} acked in {receives:,} receives, one call at a time")
            )  # fmt: skip
        for kind in ("receive", "ack"):
            lat = {name: calls[name][kind] for name in SIDES}
            self.added_rows(f"{kind} call (forwarded)", lat, None)


def receive_and_ack(consumer: Any, calls: dict[str, list[float]]) -> int:
    """One receive and an ack per message received, each call's latency (ms) kept by kind; the
    messages acked. A receive that found nothing (a long poll that ran out) is not a latency.
    The client's blocking calls (its ack_async returns no future), so run in a thread."""
    start = time.perf_counter()
    messages = consumer.receive(CONSUME_BATCH, CONSUME_INVISIBLE_S)
    if messages:
        calls["receive"].append((time.perf_counter() - start) * 1000.0)
    for m in messages:
        start = time.perf_counter()
        consumer.ack(m)
        calls["ack"].append((time.perf_counter() - start) * 1000.0)
    return len(messages)


def joined(a: Run, b: Run) -> Run:
    """Two rounds of one figure as one run."""
    return Run(a.count + b.count, a.seconds + b.seconds, a.cpu + b.cpu, a.expect,
               a.outcomes + b.outcomes)  # fmt: skip
