"""Broker send, consume and end-to-end throughput over gRPC beside its ceiling and a peer, in
one run, with the broker's CPU per message.

    .venv/bin/python bench/broker_bench.py [--only sends|consume|e2e] [--client-messages N]
        [--batch-messages N] [--window W] [--batch-size B] [--batch-window R]
        [--flush ASYNC_FLUSH SYNC_FLUSH] [--consume-messages N] [--e2e-messages N]
        [--e2e-streams S] [--e2e-clients C] [--e2e-rate MSGS_PER_S]
        [--store interpreted|compiled]

Sends 1 KiB messages to real ``rocketbox broker`` processes (a fresh one, with its own data
directory, per measurement and flush mode; stopped with SIGTERM, which must exit 0):

(a) the official Python client (``rocketmq-python-client``): one message per SendMessage,
    ``Producer.send_async`` with W sends in flight. Beside it, its ceiling: a plain grpc.aio
    unary echo of a 1 KiB payload (server in a child process, driven by a grpc.aio client with
    the same W requests in flight) -- what one-request-per-message Python gRPC gets through on
    this machine. Beside it, the client's own ceiling: the same client against a "null
    service" (a child process answering SendMessage OK at once, storing nothing): the most (a)
    could reach with a broker that cost nothing. Target: (a) >= 80% of that ceiling.
(b) multi-message SendMessage requests (B messages each, R requests in flight) through the
    generated stub over grpc.aio. Beside it, the peer: NATS JetStream's async publish of 1 KiB
    messages to a file-storage stream on 127.0.0.1:4222, B x R publishes awaiting their acks,
    every ack awaited. Target: (b) ahead of NATS. NATS's default durability is a periodic sync,
    the counterpart of ASYNC_FLUSH; SYNC_FLUSH answers each send after its fsync.
(c) consumption alone, from a backlog of N messages (produced (b)'s way into a fresh broker,
    ASYNC_FLUSH; N at most 8 queues x the in-flight window, 2,048): S raw-stub streams of
    ReceiveMessage (32) until every message came once (invisible 300 s), then every one acked
    32 entries to an AckMessage, S in flight; the backlog again, received, and acked one entry
    to an AckMessage, 64 in flight (the official clients' way). Each row with the broker's CPU
    per message, and the sum for a message received and acked (target <= 300 us). Then C
    official SimpleConsumers (a thread each, receive 32 + ack each) from a backlog, beside the
    same clients against the null service, which also answers ReceiveMessage with canned 1 KiB
    messages and AckMessage OK: their own ceiling. Target: >= 90% of it.
(e) end to end: one broker (ASYNC_FLUSH) while N messages are produced and consumed at once.
    The producer is (b)'s (B messages a request, R requests in flight; flat out, or paced with
    --e2e-rate); each body starts with its send time (time.time_ns()) and sequence number, so
    the consumer's latency is its receive time minus the send time, on the same clock. Two
    consumer kinds, a fresh broker each, one consumer group: S raw-stub streams, each a loop of
    ReceiveMessage (32, the most) and one AckMessage for the batch (the protocol's ceiling);
    and C official SimpleConsumers, a thread each, receive(32) and ack each message. Printed:
    consume msgs/s (first send to last ack answered), produce msgs/s (first send to last send
    answered), latency p50/p99/max. Target: consume >= 0.80x produce in the same run. Beside
    it, the peer: NATS JetStream, async publishes (B x R in flight) while S pull subscriptions
    of one durable consumer fetch 32 at a time and ack each, the same messages and stamps.
    Every message must be consumed (a consumer failure, or no progress for 60 s, fails the
    bench); a message received twice is counted as a duplicate and invalidates the run.

Each measurement follows a warm-up (2 x W messages; for (e) produced and consumed) and waits
until the server is idle (the store prepares its next segment in the background), so it sees
the steady state. Every send and publish must be acknowledged OK; any failure is printed and
the bench exits 1. NATS not reachable: the bench says so and exits 2. SIGTERM or SIGINT stops
every process started, deletes the NATS streams and removes the data directories (exit 130).
--store compiled builds the wheel the image ships (setup.py, ROCKETBOX_MYPYC=1: the store
compiled by mypyc) and runs every broker on it; the default is the checkout's plain Python.
"cores" is CPU seconds per wall second of the server process (broker, echo, null service or
nats-server) and of this process (the client: for (e) producer and consumers together) during
the measurement. Ratios matter more than the absolute figures: this machine is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import nats
import nats.errors
from bench_process import process_cpu_seconds, stop_process, wait_idle
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from nats.aio.client import Client as NatsClient
from nats.js.api import AckPolicy, ConsumerConfig, StorageType
from nats.js.client import JetStreamContext
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[1]
BODY = os.urandom(1024)
TOPIC = "BrokerBenchTopic"
QUEUES = 8
CLIENT_ID_HEADER = "x-mq-client-id"
NATS_URL = "nats://127.0.0.1:4222"
ECHO_SERVICE = "rocketbox.bench.Echo"
ECHO_METHOD = f"/{ECHO_SERVICE}/Echo"
READY_DEADLINE_S = 60.0
STOP_DEADLINE_S = 60.0
# No acknowledgement at all for this long: the broker (or peer) is stuck; the bench gives up.
STALL_DEADLINE_S = 60.0
RPC_TIMEOUT_S = 30.0
SLOWEST_RATE = 500  # msgs/s: slower than this, a run is stuck rather than slow
FLUSH_MODES = ("ASYNC_FLUSH", "SYNC_FLUSH")
Metadata = tuple[tuple[str, str], ...]
T = TypeVar("T")


class BenchError(Exception):
    """A measurement could not be made (a process failed, a send was lost or refused)."""


class NatsUnreachable(Exception):  # noqa: N818 - a condition, reported as such
    """No NATS server with JetStream answers on NATS_URL."""


@dataclass
class Versus:
    label: str
    baseline: Figure
    met: Callable[[float], bool] | None  # None: no target, ``target`` is a note
    target: str


@dataclass
class Figure:
    name: str
    count: int
    seconds: float
    unit: str = "msgs/s"
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    @property
    def server_us_per_item(self) -> float:
        """The server's CPU per message (or request): its cost, whatever the client's."""
        return self.server_cpu_s / self.count * 1e6

    def line(self, versus: Versus | None = None) -> str:
        text = f"{self.name:<58} {self.rate:>9,.0f} {self.unit:<6}"
        if versus is not None:
            ratio = self.rate / versus.baseline.rate
            text += f"  {ratio:>5.2f}x {versus.label:<5}"
            if versus.met is not None:
                verdict = "met" if versus.met(ratio) else "NOT MET"
                text += f" (target {versus.target}: {verdict})"
            else:
                text += f" ({versus.target})"
        cpu = f"server {self.server_cpu_s / self.seconds:.2f}" if self.server_cpu_s else ""
        cpu += f"{', ' if cpu else ''}client {self.client_cpu_s / self.seconds:.2f} cores"
        if self.server_cpu_s:
            per = {"msgs/s": "msg"}.get(self.unit, self.unit.removesuffix("/s"))
            cpu += f"; server {self.server_us_per_item:,.0f} µs/{per}"
        text += f"  [{cpu}]"
        if self.failures:
            text += f"\n    {len(self.failures):,} FAILED, e.g. {self.failures[0]}"
        return text


# -- child processes ------------------------------------------------------------------------------
class ChildProcess:
    """A child that prints ``<ready_prefix>127.0.0.1:PORT`` once it serves (anything may follow);
    its output is kept for failure reports."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        ready_prefix: str,
        env: dict[str, str] | None = None,
        cwd: Path = REPO_ROOT,
    ) -> None:
        self.name = name
        self.lines: list[str] = []
        self.port = 0
        self._ready_line = re.compile(re.escape(ready_prefix) + r"127\.0\.0\.1:(\d+)\b")
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(READY_DEADLINE_S) or not self.port:
            self.stop()
            raise BenchError(f"{name} did not become ready:\n{self.output()}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            found = self._ready_line.match(line)
            if found:
                self.port = int(found.group(1))
                self._ready.set()
        self._ready.set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self, last: int = 40) -> str:
        return "".join(self.lines[-last:])

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited within the deadline; the exit code."""
        code, killed = stop_process(self.proc, STOP_DEADLINE_S)
        if killed:
            self.lines.append(f"[bench: killed after {STOP_DEADLINE_S:.0f} s without exiting]\n")
        self._reader.join(STOP_DEADLINE_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def find_process(name: str) -> int | None:
    """The pid of a running process called ``name`` (only read, to report its CPU use)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == name:
                return int(entry.name)
        except OSError:
            continue
    return None


# The store the brokers run: the checkout's, or (--store compiled) the one the image ships: the
# wheel built with ROCKETBOX_MYPYC=1 (setup.py), unpacked here and first on the brokers' path.
compiled_site: Path | None = None


def build_compiled_site(base: Path) -> Path:
    """The wheel with the store compiled by mypyc, built from the checkout and unpacked."""
    wheels = base / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
         "--disable-pip-version-check", "-w", str(wheels), str(REPO_ROOT)],
        env={**os.environ, "ROCKETBOX_MYPYC": "1"}, cwd=base, check=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("rocketbox-*.whl")
    site = base / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def start_broker(data_dir: Path, flush: str, segment_mib: int, *extra: str) -> ChildProcess:
    argv = [
        sys.executable, "-m", "rocketbox", "broker",
        "--data-dir", str(data_dir), "--listen-host", "127.0.0.1", "--listen-port", "0",
        "--flush", flush, "--segment-size-mib", str(segment_mib),
        "--topic", f"{TOPIC}:{QUEUES}:NORMAL", *extra,
    ]  # fmt: skip
    if compiled_site is None:
        return ChildProcess(f"broker ({flush})", argv, "broker listening on ")
    # Outside the checkout, so that `-m rocketbox` does not find the checkout's modules first.
    env = {**os.environ, "PYTHONPATH": str(compiled_site)}
    child = ChildProcess(
        f"broker ({flush}, compiled store)", argv, "broker listening on ", env, compiled_site.parent
    )
    if not any("(store compiled)" in line for line in child.lines):
        child.stop()
        raise BenchError(f"{child.name} did not run the compiled store:\n{child.output()}")
    return child


def wait_quiet(child: ChildProcess) -> None:
    """Until ``child`` is idle after a load (bench_process.wait_idle)."""
    if not wait_idle(child.cpu_seconds, READY_DEADLINE_S):
        raise BenchError(f"{child.name} still busy {READY_DEADLINE_S:.0f} s after the warm-up")


def stop_checked(child: ChildProcess) -> None:
    code = child.stop()
    if code != 0:
        raise BenchError(f"{child.name} exited {code} on SIGTERM:\n{child.output()}")


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


def start_helper(flag: str, name: str) -> ChildProcess:
    """This script in a child process, serving ``flag``'s server."""
    argv = [sys.executable, str(Path(__file__).resolve()), flag]
    return ChildProcess(name, argv, f"{name} listening on ")


def bench_echo(requests: int, window: int, warmup: int) -> Figure:
    server = start_helper("--serve-echo", "echo")
    try:
        figure = run_async(_echo_requests(server, requests, window, warmup))
    finally:
        stop_checked(server)
    return figure


async def _echo_requests(server: ChildProcess, requests: int, window: int, warmup: int) -> Figure:
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


# -- (a) the official client, one message per request ---------------------------------------------
def bench_official_client(
    server: ChildProcess, name: str, count: int, window: int, warmup: int
) -> Figure:
    """The official Producer against ``server`` (a broker, or the null service), which is
    stopped afterwards."""
    from rocketmq import ClientConfiguration, Credentials, Producer  # noqa: PLC0415 - logs to ~

    try:
        producer = Producer(ClientConfiguration(server.endpoint, Credentials()), (TOPIC,))
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
    stop_checked(server)
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
    stop_checked(broker)
    return figure


def send_request(resource: Any, bodies: Sequence[bytes]) -> Any:
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
                ),
            )
            for body in bodies
        ]
    )


async def _stub_sends(
    broker: ChildProcess, flush: str, count: int, batch: int, window: int, warmup: int
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


# -- NATS JetStream: the peer (b) is compared with ------------------------------------------------
async def nats_connect(window: int) -> tuple[NatsClient, JetStreamContext]:
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:  # instead of nats-py's traceback on stderr
        errors.append(e)

    try:
        nc = await asyncio.wait_for(
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
                    await asyncio.wait_for(publish(n), deadline)
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
    stop_checked(broker)
    return figure


async def _e2e(
    broker: ChildProcess,
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

            async def fetch(sub: JetStreamContext.PullSubscription, receipts: Receipts) -> None:
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

            async def publish(n: int, rate: float) -> None:
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

            server = find_process("nats-server")

            async def run(n: int, rate: float) -> Run:
                receipts = Receipts(n)
                tasks = [asyncio.create_task(fetch(sub, receipts)) for sub in subs]
                try:
                    cpu0 = cpu_now(server)
                    start = time.perf_counter()
                    deadline = publish_deadline_s(n, rate)
                    try:
                        await asyncio.wait_for(publish(n, rate), deadline)
                    except TimeoutError as e:
                        raise BenchError(
                            f"NATS: {n:,} publishes not acked in {deadline:.0f} s"
                        ) from e
                    produced = time.perf_counter() - start
                    await asyncio.to_thread(receipts.wait, "NATS consumers")
                    cpu1 = cpu_now(server)
                except BaseException:
                    receipts.done.set()
                    with contextlib.suppress(Exception):
                        await stop_tasks(tasks)
                    raise
                await stop_tasks(tasks)
                return Run(
                    produced,
                    receipts.done_at - start,
                    receipts,
                    cpu1[0] - cpu0[0],
                    cpu1[1] - cpu0[1],
                )

            await run(warmup, 0.0)
            measured = await run(count, rate)
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


# -- (c) consumption alone, from a backlog: receives, acks, the official SimpleConsumer ----------
CONSUME_INVISIBLE_S = 300  # the receive phase must not see a message come back
CONSUME_POLL_S = 1
SINGLE_ACK_WINDOW = 64  # single-entry AckMessages in flight, as many clients acking each message


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
    server: ChildProcess, name: str, count: int, work: Coroutine[Any, Any, T]
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
    broker: ChildProcess, count: int, streams: int, batch: int, window: int
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


def bench_client_consume(server: ChildProcess, name: str, count: int, clients: int) -> Figure:
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
    stop_checked(server)
    return Figure(name, count, elapsed, server_cpu_s=server_cpu, client_cpu_s=client_cpu)


async def _preload(broker: ChildProcess, count: int, batch: int, window: int) -> None:
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
    stop_checked(broker)
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
        start_helper("--serve-null", "null service"),
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


# -- the run --------------------------------------------------------------------------------------
def interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run``, where SIGTERM and SIGINT cancel the coroutine rather than raise in the
    middle of the event loop: its cleanup runs with every connection intact (NATS streams are
    deleted, consumers stopped), then KeyboardInterrupt is raised as elsewhere."""
    return asyncio.run(_cancelled_by_signals(coro))


async def _cancelled_by_signals(coro: Coroutine[Any, Any, T]) -> T:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    signalled: list[signal.Signals] = []

    def cancel(signum: signal.Signals) -> None:
        signalled.append(signum)
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, cancel, signum)
    try:
        return await coro
    except asyncio.CancelledError:
        if signalled:
            raise KeyboardInterrupt(signalled[0].name) from None
        raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)  # leaves SIG_DFL: ours again
            signal.signal(signum, interrupted)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_sends(
    args: argparse.Namespace,
    base: Path,
    warmup: int,
    nats_window: int,
    report: Callable[[Figure, Versus | None], None],
) -> None:
    """The send figures: the echo, the null service, (a), NATS's publish, (b)."""
    echo = bench_echo(args.client_messages, args.window, warmup)
    report(echo, None)
    null = bench_official_client(
        start_helper("--serve-null", "null service"),
        f"official client -> null service, {args.window} in flight",
        args.client_messages,
        args.window,
        warmup,
    )
    report(null, Versus("echo", echo, None, "the client's own ceiling"))
    for flush in args.flush:
        data_dir = base / f"client-{flush}"
        fig = bench_official_client(
            start_broker(data_dir, flush, args.segment_mib),
            f"(a) official client, {flush}, 1/request, {args.window} in flight",
            args.client_messages,
            args.window,
            warmup,
        )
        shutil.rmtree(data_dir, ignore_errors=True)
        report(fig, Versus("null", null, lambda r: r >= 0.8, ">= 0.80x"))
    nats_fig = run_async(bench_nats(args.batch_messages, nats_window, warmup))
    report(nats_fig, None)
    for flush in args.flush:
        data_dir = base / f"stub-{flush}"
        fig = bench_stub_batches(
            data_dir,
            flush,
            args.segment_mib,
            args.batch_messages,
            args.batch_size,
            args.batch_window,
            warmup,
        )
        shutil.rmtree(data_dir, ignore_errors=True)
        report(fig, Versus("NATS", nats_fig, lambda r: r > 1.0, "> 1.00x"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client-messages", type=int, default=20_000, help="(a) and the echo")
    parser.add_argument("--batch-messages", type=int, default=100_000, help="(b) and NATS")
    parser.add_argument("--window", type=int, default=256, help="(a) and echo: in flight")
    parser.add_argument("--batch-size", type=int, default=32, help="(b): messages per request")
    parser.add_argument("--batch-window", type=int, default=8, help="(b): requests in flight")
    parser.add_argument(
        "--nats-window", type=int, default=0, help="NATS publishes in flight (0: B x R)"
    )
    parser.add_argument("--flush", nargs="+", choices=FLUSH_MODES, default=list(FLUSH_MODES))
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None, help="broker data (default: tmp)")
    parser.add_argument(
        "--e2e-messages", type=int, default=20_000, help="(e) and its NATS peer: messages"
    )
    parser.add_argument(
        "--e2e-streams",
        type=int,
        default=8,
        help="(e) raw: ReceiveMessage streams; NATS: pull subscriptions fetching",
    )
    parser.add_argument(
        "--e2e-clients", type=int, default=4, help="(e) official: SimpleConsumers, a thread each"
    )
    parser.add_argument(
        "--e2e-rate",
        type=float,
        default=0.0,
        help="(e) and its NATS peer: produce at most this many msgs/s (default 0: flat out)",
    )
    parser.add_argument(
        "--consume-messages",
        type=int,
        default=16_000,
        help="(c): the backlog consumed; at most 8 queues x INFLIGHT_WINDOW_ENTRIES (16,384)",
    )
    parser.add_argument(
        "--only",
        choices=("sends", "consume", "e2e"),
        default=None,
        help="run one part (default: all)",
    )
    parser.add_argument(
        "--store",
        choices=("interpreted", "compiled"),
        default="interpreted",
        help="the brokers' store: the checkout's, or compiled by mypyc as the image ships it",
    )
    parser.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-null", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_echo or args.serve_null:
        asyncio.run(serve_echo() if args.serve_echo else serve_null())
        return
    numbers = ("client_messages", "batch_messages", "window", "batch_size", "batch_window")
    for name in (*numbers, "e2e_messages", "e2e_streams", "e2e_clients", "consume_messages"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.e2e_rate < 0:
        parser.error("--e2e-rate must be 0 (flat out) or more")
    if args.batch_messages < args.batch_size:
        parser.error("--batch-messages must be at least --batch-size")
    nats_window = args.nats_window or args.batch_size * args.batch_window
    # SIGTERM (and SIGINT, even where a shell started us with it ignored) unwinds like Ctrl-C,
    # so that every process started is stopped and the data directories are removed.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, interrupted)
    warmup = 2 * args.window
    began = time.perf_counter()
    print(
        f"broker_bench: 1 KiB messages, {os.cpu_count()} cores, load average {load()} at start; "
        f"(a) {args.client_messages:,}, (b) {args.batch_messages:,}, "
        f"(e) {args.e2e_messages:,} messages, flush {' '.join(args.flush)}, store {args.store}"
        f"{f', only {args.only}' if args.only else ''}",
        flush=True,
    )
    print()
    try:
        asyncio.run(nats_reachable())
    except NatsUnreachable as e:
        print(
            f"NATS JetStream is not reachable at {NATS_URL}: {e}\n"
            "The bench compares (b) with it: start nats-server with JetStream "
            "(see /work/shared/ENVIRONMENT.md) and run again.",
            file=sys.stderr,
        )
        sys.exit(2)
    base = Path(tempfile.mkdtemp(prefix="rocketbox-broker-bench-", dir=args.dir))
    failed = False

    def report(fig: Figure, versus: Versus | None) -> None:
        nonlocal failed
        failed |= bool(fig.failures)
        print(fig.line(versus), flush=True)

    def report_e2e(fig: EndToEnd, peer: EndToEnd | None) -> None:
        nonlocal failed
        failed |= fig.duplicates > 0
        print(fig.line(peer), flush=True)

    try:
        if args.store == "compiled":
            global compiled_site  # noqa: PLW0603 - set once, before any broker starts
            print("building the wheel with the compiled store (about 30 s) ...", flush=True)
            compiled_site = build_compiled_site(base)
        if args.only in (None, "sends"):
            run_sends(args, base, warmup, nats_window, report)
            print()
        if args.only in (None, "consume"):
            run_consume(args, base, report)
            print()
        if args.only in (None, "e2e"):
            nats_e2e = run_async(
                bench_nats_e2e(
                    args.e2e_messages, nats_window, args.e2e_streams, warmup, args.e2e_rate
                )
            )
            report_e2e(nats_e2e, None)
            for kind, consumers in (("raw", args.e2e_streams), ("client", args.e2e_clients)):
                data_dir = base / f"e2e-{kind}"
                fig_e2e = bench_e2e(
                    data_dir,
                    args.segment_mib,
                    args.e2e_messages,
                    args.batch_size,
                    args.batch_window,
                    warmup,
                    kind,
                    consumers,
                    args.e2e_rate,
                )
                shutil.rmtree(data_dir, ignore_errors=True)
                report_e2e(fig_e2e, nats_e2e)
    except (BenchError, NatsUnreachable) as e:
        print(f"\nbench failed: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); every process started is stopped", file=sys.stderr)
        sys.exit(130)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"load average {load()} at the end; the bench took {time.perf_counter() - began:.0f} s")
    if failed:
        print(
            "some sends or publishes failed, or messages came twice (above): "
            "the figures are not valid",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
