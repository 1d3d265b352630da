"""End to end's consumers and what they count: stamped bodies, receipts (each message once, no
stall), a run's times, and the raw-stub and official-client consumers.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from bench.broker.figures import BODY, RPC_TIMEOUT_S, STALL_DEADLINE_S, TOPIC, Metadata
from bench.process_control import (
    BenchError,
    process_cpu_seconds,
)

# -- end to end: produce and consume concurrently, one broker ------------------------------------
# Each message's body starts with its send time (time.time_ns(), this machine's clock) and its
# sequence number in the run; the consumer's latency is its receive time minus the send time.
STAMP = struct.Struct("<qq")
E2E_GROUP = "BrokerBenchGroup"
E2E_INVISIBLE_S = 30  # far beyond any delivery here: a message delivered twice is a fault
E2E_POLL_S = 1  # the consumers' long poll: an idle consumer notices the end within it
E2E_BATCH = 32  # messages per receive (ReceiveMessage's maximum) and per NATS fetch
E2E_FLUSH = "ASYNC_FLUSH"  # NATS's default durability (a periodic sync) is its counterpart


def stamped_body(seq: int) -> bytes:
    return STAMP.pack(time.time_ns(), seq) + BODY[STAMP.size :]


class Tally:
    """Messages consumed by threads or tasks, until ``count``; a stall or a failure ends it.
    Shared by consumer threads and tasks."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.consumed = 0
        self.failures: list[str] = []
        self.done = threading.Event()
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.consumed += n
            if self.consumed >= self.count:
                self.done.set()

    def fail(self, text: str) -> None:
        with self._lock:
            self.failures.append(text)
        self.done.set()  # nothing more to wait for: the run failed

    def wait(self, what: str) -> None:
        """Until every message is consumed. BenchError on a consumer's failure, or when no
        message was consumed for STALL_DEADLINE_S."""
        seen, since = -1, time.monotonic()
        while not self.done.wait(0.2):
            if self.consumed != seen:
                seen, since = self.consumed, time.monotonic()
            elif time.monotonic() - since > STALL_DEADLINE_S:
                raise BenchError(
                    f"{what}: {self.consumed:,} of {self.count:,} messages consumed, "
                    f"none in the last {STALL_DEADLINE_S:.0f} s"
                )
        if self.failures:
            raise BenchError(f"{what}: {self.failures[0]}")


class Receipts(Tally):
    """What the consumers of one run got: every message's latency (first receive time minus send
    time), redeliveries, and progress: a message is consumed once its ack was answered OK."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.duplicates = 0
        self.latencies_ns: list[int] = []
        self.done_at = 0.0  # perf_counter() when the last message was consumed
        self._state = bytearray(count)  # 0: not seen, 1: received, 2: consumed

    def received(self, bodies: Iterable[bytes]) -> list[int]:
        """A batch that has just arrived; its sequence numbers (-1: not one of this run's)."""
        now = time.time_ns()
        seqs: list[int] = []
        with self._lock:
            for body in bodies:
                sent_ns, seq = STAMP.unpack_from(body)
                if not 0 <= seq < self.count:
                    self.failures.append(f"received sequence number {seq} of {self.count}")
                    self.done.set()  # the run failed
                    seq = -1
                elif self._state[seq]:
                    self.duplicates += 1
                else:
                    self._state[seq] = 1
                    self.latencies_ns.append(now - sent_ns)
                seqs.append(seq)
        return seqs

    def acked(self, seqs: Iterable[int]) -> None:
        with self._lock:
            for seq in seqs:
                if seq >= 0 and self._state[seq] != 2:
                    self._state[seq] = 2
                    self.consumed += 1
            if self.consumed == self.count and not self.done.is_set():
                self.done_at = time.perf_counter()
                self.done.set()


@dataclass
class EndToEnd:
    """One run: ``count`` messages produced and consumed concurrently, the clock started just
    before the first send."""

    name: str
    producer: str
    count: int
    run: Run

    @property
    def produce_rate(self) -> float:
        return self.count / self.run.produce_s

    @property
    def consume_rate(self) -> float:
        return self.count / self.run.consume_s

    @property
    def duplicates(self) -> int:
        return self.run.receipts.duplicates

    def percentile_ms(self, p: float) -> float:
        ordered = sorted(self.run.receipts.latencies_ns)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] / 1e6

    def line(self, peer: EndToEnd | None = None) -> str:
        ratio = self.consume_rate / self.produce_rate
        text = f"{self.name:<58} {self.consume_rate:>9,.0f} msgs/s consumed"
        if peer is None:
            text += f"  {ratio:>5.2f}x produce"
        else:
            verdict = "met" if ratio >= 0.8 else "NOT MET"
            text += f"  {ratio:>5.2f}x produce (target >= 0.80x: {verdict})"
            text += f"  {self.consume_rate / peer.consume_rate:.2f}x NATS"
        text += (
            f"\n    {'':<54} {self.produce_rate:>9,.0f} msgs/s produced ({self.producer});"
            f" latency p50 {self.percentile_ms(0.5):.1f} ms, p99 {self.percentile_ms(0.99):.1f}"
            f" ms, max {self.percentile_ms(1.0):.0f} ms"
            f"  [server {self.run.server_cpu_s / self.run.consume_s:.2f},"
            f" client {self.run.client_cpu_s / self.run.consume_s:.2f} cores]"
        )
        if self.duplicates:
            text += f"\n    {self.duplicates:,} DUPLICATES: messages delivered again after an ack"
        return text


def receive_request(batch: int, invisible_s: int, poll_s: int) -> Any:
    """A ReceiveMessage of E2E_GROUP over every queue of TOPIC."""
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=E2E_GROUP),
        message_queue=pb.MessageQueue(
            topic=pb.Resource(name=TOPIC), id=0, permission=pb.READ_WRITE
        ),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch,
        invisible_duration=Duration(seconds=invisible_s),
        long_polling_timeout=Duration(seconds=poll_s),
    )


async def ack(stub: Any, metadata: Metadata, entries: Sequence[Any]) -> None:
    """One AckMessage of ``entries`` for E2E_GROUP; BenchError unless every entry is OK."""
    reply = await stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name=E2E_GROUP), topic=pb.Resource(name=TOPIC), entries=entries
        ),
        metadata=metadata,
        timeout=RPC_TIMEOUT_S,
    )
    bad = [e.status for e in reply.entries if e.status.code != pb.OK]
    if bad or len(reply.entries) != len(entries):
        first = f"{pb.Code.Name(bad[0].code)}: {bad[0].message}" if bad else ""
        raise BenchError(
            f"AckMessage: {len(bad)} of {len(entries)} entries refused, "
            f"{len(reply.entries)} answered {first}"
        )


class Consumers:
    """The consumers of one end-to-end bench: started for a run's Receipts, and stopped (they
    notice the end within one long poll)."""

    description = ""

    def start(self, receipts: Receipts) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Once the bench is done with them."""


class RawConsumers(Consumers):
    """``streams`` tasks on this event loop, each a loop of ReceiveMessage (E2E_BATCH) through
    the generated stub and one AckMessage for the whole batch: the protocol's ceiling."""

    def __init__(self, stub: Any, metadata: Metadata, streams: int) -> None:
        self.description = (
            f"raw ReceiveMessage {E2E_BATCH} + one AckMessage a batch, {streams} streams"
        )
        self._stub = stub
        self._metadata = metadata
        self._streams = streams
        self._tasks: list[asyncio.Task[None]] = []
        self._request = receive_request(E2E_BATCH, E2E_INVISIBLE_S, E2E_POLL_S)

    def start(self, receipts: Receipts) -> None:
        self._tasks = [asyncio.create_task(self._consume(receipts)) for _ in range(self._streams)]

    async def stop(self) -> None:
        await stop_tasks(self._tasks)

    async def _consume(self, receipts: Receipts) -> None:
        try:
            while not receipts.done.is_set():
                messages = []
                async for frame in self._stub.ReceiveMessage(
                    self._request, metadata=self._metadata, timeout=RPC_TIMEOUT_S
                ):
                    if frame.WhichOneof("content") == "message":
                        messages.append(frame.message)
                    elif frame.WhichOneof("content") == "status" and frame.status.code not in (
                        pb.OK,
                        pb.MESSAGE_NOT_FOUND,
                    ):
                        code = pb.Code.Name(frame.status.code)
                        receipts.fail(f"ReceiveMessage: {code}: {frame.status.message}")
                        return
                if not messages:
                    continue
                seqs = receipts.received(m.body for m in messages)
                entries = [
                    spb.AckMessageEntry(
                        message_id=m.system_properties.message_id,
                        receipt_handle=m.system_properties.receipt_handle,
                    )
                    for m in messages
                ]
                await ack(self._stub, self._metadata, entries)
                receipts.acked(seqs)
        except BenchError as e:  # an entry refused: the run fails with it
            receipts.fail(str(e))
        except Exception as e:  # a failed RPC: the run fails with it
            receipts.fail(f"raw consumer: {e!r}")


class ClientConsumers(Consumers):
    """``clients`` official SimpleConsumers of one group, each driven by a thread of its own:
    ``receive(E2E_BATCH, invisible)``, then ``ack`` each message (the client's ack waits for
    the answer; 5.1.2's ``ack_async`` returns no future to wait on)."""

    def __init__(self, endpoint: str, clients: int) -> None:
        from rocketmq import (  # noqa: PLC0415 - logs to ~
            ClientConfiguration,
            Credentials,
            FilterExpression,
            SimpleConsumer,
        )

        self.description = (
            f"official SimpleConsumer, receive {E2E_BATCH} + ack each, {clients} clients"
            if clients > 1
            else f"official SimpleConsumer, receive {E2E_BATCH} + ack each, 1 client"
        )
        self._clients: list[Any] = []
        self._threads: list[threading.Thread] = []
        try:
            for _ in range(clients):
                consumer = SimpleConsumer(
                    ClientConfiguration(endpoint, Credentials()),
                    E2E_GROUP,
                    {TOPIC: FilterExpression("*")},
                    await_duration=E2E_POLL_S,
                )
                consumer.startup()
                self._clients.append(consumer)
        except BaseException:
            self.shutdown()
            raise

    def start(self, receipts: Receipts) -> None:
        self._threads = [
            threading.Thread(target=self._consume, args=(c, receipts), daemon=True)
            for c in self._clients
        ]
        for t in self._threads:
            t.start()

    async def stop(self) -> None:
        await asyncio.to_thread(self._join)

    def _join(self) -> None:
        deadline = time.monotonic() + E2E_POLL_S + RPC_TIMEOUT_S
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            raise BenchError(
                f"a SimpleConsumer thread still runs {E2E_POLL_S + RPC_TIMEOUT_S:.0f} s "
                "after the end"
            )

    @staticmethod
    def _consume(consumer: Any, receipts: Receipts) -> None:
        try:
            while not receipts.done.is_set():
                messages = consumer.receive(E2E_BATCH, E2E_INVISIBLE_S)
                seqs = receipts.received(m.body for m in messages)
                for m, seq in zip(messages, seqs, strict=True):
                    consumer.ack(m)
                    receipts.acked((seq,))
        except Exception as e:
            receipts.fail(f"SimpleConsumer: {e!r}")

    def shutdown(self) -> None:
        for c in self._clients:
            c.shutdown()
        self._clients = []


async def stop_tasks(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Wait for consumer tasks to notice the end (one long poll), then cancel what remains."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=E2E_POLL_S + RPC_TIMEOUT_S)
    for t in pending:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if pending:
        raise BenchError(
            f"{len(pending)} consumers still ran {E2E_POLL_S + RPC_TIMEOUT_S:.0f} s after the end"
        )


@dataclass
class Run:
    produce_s: float  # from the first send until the last send was answered
    consume_s: float  # from the first send until the last message was consumed
    receipts: Receipts
    client_cpu_s: float  # this process, over the same time as consume_s
    server_cpu_s: float


def cpu_now(server_pid: int | None) -> tuple[float, float]:
    """CPU seconds so far of this process and of the server (0 when unknown)."""
    return time.process_time(), process_cpu_seconds(server_pid) if server_pid else 0.0
