"""The sidecar beside a direct client of the broker, its outbox backends and targets, in one run.

    .venv/bin/python bench/sidecar_bench.py [--quick] [--only a|b|c|d] [--json PATH]
        [--messages N] [--window W] [--stream-window S] [--streams K] [--rate R]
        [--latency-seconds T] [--spool-messages N] [--drain-messages N]
        [--drain-concurrency C] [--drain-claim-batch B] [--sidecar-log-level LEVEL]

Real ``rocketbox broker`` and ``rocketbox sidecar`` processes (stopped with SIGTERM), 1 KiB
bodies, one topic of 8 queues; the clients are grpc.aio in this process:

(a) Throughput: W unary sends in flight, N messages after a warm-up of 2 x W, through the
    sidecar (``Send``) and directly to the broker with ``sidecar.producer.Producer`` in this
    process: the very client the sidecar uses inside, so the ratio is the cost of the extra hop.
    Beside them ``SendStream`` (K streams, S requests in flight each), a high-throughput app's
    path. Latency: open-loop at R msgs/s (a send is started at its scheduled time whatever the
    earlier ones do; latency counts from the scheduled time, so a stall is not hidden), the
    direct client and the sidecar alternating in 5 rounds, T seconds each in all; added latency
    = the sidecar's percentile minus the direct one. Target: added p99 <= 2 ms (Dapr's sidecar
    adds 1.91 ms p99 over plain gRPC).
(b) Spool rate with the broker DOWN (the sidecar points at a closed port), per outbox backend
    (RocksDB in a temporary directory, Redis with a unique key prefix, MySQL/MariaDB with a unique
    table): messages/s answered SPOOLED, 64 unary senders, and through SendStream. The resend
    pool is kept out of the way (first resend in an hour) so that the figure is intake alone.
    Beside them the physical reference: ``outbox.put`` in this process, 64 threads putting one
    entry at a time, and one thread putting batches of 100. Targets: RocksDB >= 20k msgs/s,
    Redis >= 10k, MySQL >= 5k.
(c) Drain rate per backend: N entries put straight into the outbox with the library (due now,
    as after an outage), a fresh broker started, then a sidecar; msgs/s from the sidecar's ready
    line until the broker holds all N (its admin DescribeTopic) and, for Redis and MySQL, the
    outbox's stats show none pending; RocksDB's stats (one process at a time) are checked after
    the sidecar stops. Every entry must be DELIVERED once. Target: >= 5k msgs/s.
(d) The sidecar's resident memory under (a)'s, (b)'s and (c)'s loads: the highest VmRSS sampled
    every 50 ms from /proc/PID/status, and VmHWM (the kernel's peak) before it stops.
    Target: <= 200 MB. ``--only d`` runs just the loads it watches (the sidecar's parts of (a)
    and the RocksDB sidecar of (b)).

The bench's own clients run on the same cores as the sidecar and the broker (2 on the machine
this was written for): the "cpu" column gives each process's CPU seconds per wall second during
the measurement (bench = this process, sc = the sidecar, br = the broker). Ratios within one run
matter more than absolute figures: this machine is noisy, and other work on it shows in the load
average printed at the start and the end.

Redis and MariaDB must answer on 127.0.0.1 (exit 2 otherwise, for the parts that need them).
Everything started is stopped, and every temporary directory, Redis key and MySQL table is
removed, also on SIGINT/SIGTERM (exit 130). A failed measurement exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import grpc
import redis
import sqlalchemy as sa
from bench_process import process_cpu_seconds, stop_process
from google.protobuf import timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from outbox.entry import OutboxEntry, OutboxMessage, SpoolCause
from outbox.factory import open_outbox
from outbox.outbox import Outbox
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from sidecar.channels import Endpoint
from sidecar.errors import SidecarError
from sidecar.message_id import MessageIdGenerator
from sidecar.producer import Producer, ProducerConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
BODY = os.urandom(1024)
TOPIC = "SidecarBenchTopic"
# (c)'s references send here, so that the drained topic holds exactly the drained messages.
REF_TOPIC = "SidecarBenchRefTopic"
REF_BATCH = 32  # messages per SendMessage: the protocol's batch path, (c)'s ceiling
REF_BATCH_WINDOW = 8
QUEUES = 8
HOST = "127.0.0.1"
REDIS_PORT = 6379
MYSQL_PORT = 3306
REDIS_URL = f"redis://{HOST}:{REDIS_PORT}/0"
MYSQL_URL = f"mysql+pymysql://root@{HOST}:{MYSQL_PORT}/test"
BACKENDS = ("rocksdb", "redis", "mysql")
SPOOL_TARGETS = {"rocksdb": 20_000, "redis": 10_000, "mysql": 5_000}
DRAIN_TARGET = 5_000
ADDED_P99_TARGET_MS = 2.0
DAPR_ADDED_P99_MS = 1.91
RSS_TARGET_MB = 200.0
SPOOL_SENDERS = 64
RAW_THREADS = 64
RAW_BATCH = 100
LATENCY_ROUNDS = 5
# The resend pool must not compete with intake in (b): its first resend is an hour away.
NO_RESEND_ARGS = ("--backoff-initial-ms=3600000", "--backoff-max-ms=3600000")
DRAIN_POLL_MS = 50
# One generator for every message id made in this process: two would repeat each other's ids.
IDS = MessageIdGenerator()
READY_DEADLINE_S = 60.0
STOP_DEADLINE_S = 60.0
RPC_TIMEOUT_S = 30.0
SLOWEST_RATE = 200  # msgs/s: slower than this, a run is stuck rather than slow
QUIET_SAMPLE_S = 0.25
QUIET_CORES = 0.05
MEMORY_SAMPLE_S = 0.05
BROKER_READY = re.compile(r"broker listening on \S+:(\d+);")
SIDECAR_READY = re.compile(r"sidecar listening on \S+:(\d+)")
REDIS_START = (
    "redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save '' --appendonly no "
    "--dir /var/lib/redis --logfile /var/log/redis/ci.log"
)
MYSQL_START = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
T = TypeVar("T")


class BenchError(Exception):
    """A measurement could not be made (a process failed, a message was lost or refused)."""


# -- processes ------------------------------------------------------------------------------------
def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def status_kib(pid: int, name: str) -> int:
    """A ``kB`` field of /proc/PID/status (VmRSS, VmHWM); 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class MemorySampler:
    """Samples a process's VmRSS every MEMORY_SAMPLE_S; ``take`` gives the highest since the
    last ``take`` (a phase's peak)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._peak_kib = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rss {pid}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(MEMORY_SAMPLE_S):
            rss = status_kib(self.pid, "VmRSS")
            with self._lock:
                self._peak_kib = max(self._peak_kib, rss)

    def take(self) -> int:
        rss = status_kib(self.pid, "VmRSS")
        with self._lock:
            peak, self._peak_kib = max(self._peak_kib, rss), 0
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Child:
    """``python -m rocketbox ...`` with its output in a log file (never a pipe this process
    must keep reading: the sidecar logs every spool). Ready once the log shows ``ready``."""

    def __init__(self, name: str, args: Sequence[str], ready: re.Pattern[str], log: Path) -> None:
        self.name = name
        self.log = log
        self.port = 0
        self.ready_at = 0.0
        self._log_file: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketbox", *args],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        self.memory: MemorySampler | None = None
        try:
            self._wait_ready(ready)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, ready: re.Pattern[str]) -> None:
        deadline = time.monotonic() + READY_DEADLINE_S
        offset = 0
        pending = b""
        while time.monotonic() < deadline:
            with self.log.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                found = ready.search(line.decode(errors="replace"))
                if found:
                    self.ready_at = time.perf_counter()
                    self.port = int(found.group(1))
                    return
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name} exited {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.005)
        raise BenchError(f"{self.name} not ready in {READY_DEADLINE_S:.0f} s:\n{self.output()}")

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    def output(self, last: int = 30) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-last:])

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def watch_memory(self) -> MemorySampler:
        self.memory = MemorySampler(self.proc.pid)
        return self.memory

    def hwm_mb(self) -> float:
        return status_kib(self.proc.pid, "VmHWM") / 1024

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited within the deadline; the exit code."""
        code, _ = stop_process(self.proc, STOP_DEADLINE_S)
        if self.memory is not None:
            self.memory.stop()
        self._log_file.close()
        return code

    def stop_checked(self) -> None:
        code = self.stop()
        if code != 0:
            raise BenchError(f"{self.name} exited {code} on SIGTERM:\n{self.output()}")


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (the broker that is down)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class Resources:
    """Everything the bench creates, so that all of it goes at the end, whatever happens."""

    def __init__(self, base: Path, log_level: str) -> None:
        self.base = base
        self.log_level = log_level
        self.children: list[Child] = []
        self.redis_prefixes: list[str] = []
        self.mysql_tables: list[str] = []
        self.outboxes: list[Outbox] = []

    def path(self, name: str) -> Path:
        return self.base / f"{name}-{uuid.uuid4().hex[:8]}"

    def start(self, name: str, args: Sequence[str], ready: re.Pattern[str]) -> Child:
        child = Child(name, ["--log-level", self.log_level, *args], ready, self.path(name + ".log"))
        self.children.append(child)
        return child

    def broker(self) -> Child:
        return self.start(
            "broker",
            ["broker", "--data-dir", str(self.path("broker")), "--listen-host", HOST,
             "--listen-port", "0", "--auto-create-topic", "--topic", f"{TOPIC}:{QUEUES}:NORMAL",
             "--topic", f"{REF_TOPIC}:{QUEUES}:NORMAL",
             "--segment-size-mib", "256", "--max-hash-slot-num", "1000000",
             "--max-index-num", "4000000"],
            BROKER_READY,
        )  # fmt: skip

    def sidecar(self, broker: str, outbox_url: str, *args: str) -> Child:
        child = self.start(
            "sidecar",
            ["sidecar", "--broker", broker, "--outbox", outbox_url, "--listen", f"{HOST}:0",
             *args],
            SIDECAR_READY,
        )  # fmt: skip
        child.watch_memory()
        return child

    def stop(self, child: Child) -> None:
        if child in self.children:
            self.children.remove(child)
        child.stop_checked()

    def outbox_url(self, backend: str) -> str:
        if backend == "rocksdb":
            return f"rocksdb://{self.path('outbox')}"
        name = f"sidecar_bench_{uuid.uuid4().hex[:12]}"
        if backend == "redis":
            self.redis_prefixes.append(name)
            return f"{REDIS_URL}?prefix={name}"
        self.mysql_tables.append(name)
        return f"{MYSQL_URL}?table={name}"

    def open_outbox(self, url: str) -> Outbox:
        outbox = open_outbox(url)
        self.outboxes.append(outbox)
        return outbox

    def close_outbox(self, outbox: Outbox) -> None:
        if outbox in self.outboxes:
            self.outboxes.remove(outbox)
        outbox.close()

    def drop_data(self) -> list[str]:
        """Delete the Redis keys and MySQL tables made so far; problems, as text."""
        problems: list[str] = []
        for outbox in self.outboxes:
            try:
                outbox.close()
            except Exception as e:
                problems.append(f"closing an outbox: {e!r}")
        self.outboxes.clear()
        if self.redis_prefixes:
            try:
                client = redis.Redis.from_url(REDIS_URL, socket_timeout=10)
                try:
                    for prefix in self.redis_prefixes:
                        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
                        for i in range(0, len(keys), 1000):
                            client.delete(*keys[i : i + 1000])
                finally:
                    client.close()
                self.redis_prefixes.clear()
            except Exception as e:
                problems.append(f"deleting Redis keys {self.redis_prefixes}: {e!r}")
        if self.mysql_tables:
            try:
                engine = sa.create_engine(MYSQL_URL)
                try:
                    with engine.begin() as conn:
                        for table in self.mysql_tables:
                            conn.execute(
                                sa.text(f"DROP TABLE IF EXISTS `{table}`, `{table}_counters`")
                            )
                finally:
                    engine.dispose()
                self.mysql_tables.clear()
            except Exception as e:
                problems.append(f"dropping MySQL tables {self.mysql_tables}: {e!r}")
        return problems

    def cleanup(self) -> list[str]:
        problems: list[str] = []
        for child in reversed(self.children):
            try:
                child.stop()
            except Exception as e:
                problems.append(f"stopping {child.name}: {e!r}")
        self.children.clear()
        problems += self.drop_data()
        shutil.rmtree(self.base, ignore_errors=True)
        return problems


def check_services(need_redis: bool, need_mysql: bool) -> list[str]:
    """What is not answering, with how to start it."""
    missing = []
    if need_redis:
        try:
            client = redis.Redis(host=HOST, port=REDIS_PORT, socket_connect_timeout=3)
            try:
                client.ping()
            finally:
                client.close()
        except Exception as e:
            missing.append(f"Redis on {HOST}:{REDIS_PORT} ({e}); start it with: {REDIS_START}")
    if need_mysql:
        try:
            engine = sa.create_engine(MYSQL_URL, connect_args={"connect_timeout": 3})
            try:
                with engine.connect() as conn:
                    conn.execute(sa.text("SELECT 1"))
            finally:
                engine.dispose()
        except Exception as e:
            missing.append(
                f"MariaDB on {HOST}:{MYSQL_PORT} (root, database test) ({type(e).__name__}: "
                f"{str(e).splitlines()[0]}); start it with: {MYSQL_START}"
            )
    return missing


def wait_quiet(child: Child) -> None:
    """Until the broker's background work after a warm-up (the store preparing its next
    segment) is done, so the measurement sees its steady state."""
    deadline = time.monotonic() + READY_DEADLINE_S
    while time.monotonic() < deadline:
        before = child.cpu_seconds()
        time.sleep(QUIET_SAMPLE_S)
        if child.cpu_seconds() - before < QUIET_CORES * QUIET_SAMPLE_S:
            return
    raise BenchError(f"{child.name} still busy {READY_DEADLINE_S:.0f} s after the warm-up")


# -- measurements ---------------------------------------------------------------------------------
@dataclass
class Cpu:
    """CPU seconds per wall second of this process and the children named."""

    cores: dict[str, float] = field(default_factory=dict)

    def text(self) -> str:
        return " ".join(f"{k} {v:.2f}" for k, v in self.cores.items())


class CpuMeter:
    def __init__(self, children: dict[str, Child]) -> None:
        self._children = children
        self._start = time.perf_counter()
        self._bench = own_cpu_seconds()
        self._cpu = {k: c.cpu_seconds() for k, c in children.items()}

    def read(self) -> Cpu:
        wall = max(time.perf_counter() - self._start, 1e-9)
        cores = {"bench": (own_cpu_seconds() - self._bench) / wall}
        for k, c in self._children.items():
            cores[k] = (c.cpu_seconds() - self._cpu[k]) / wall
        return Cpu(cores)


@dataclass
class Run:
    count: int
    seconds: float
    cpu: Cpu
    failures: int = 0
    failure_example: str = ""

    @property
    def rate(self) -> float:
        return self.count / self.seconds


Send = Callable[[], Awaitable[str]]  # one message; its outcome ("stored", "spooled", an error)


def deadline_s(count: int) -> float:
    return max(60.0, count / SLOWEST_RATE)


async def closed_loop(send: Send, count: int, window: int, expect: str, cpu: CpuMeter) -> Run:
    """``count`` sends, ``window`` in flight (each sender starts its next on its answer)."""
    remaining = count
    failures: list[str] = []

    async def sender() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            try:
                outcome = await send()
            except Exception as e:
                outcome = f"{type(e).__name__}: {e}"
            if outcome != expect:
                failures.append(outcome)

    start = time.perf_counter()
    try:
        await asyncio.wait_for(
            asyncio.gather(*(sender() for _ in range(window))), deadline_s(count)
        )
    except TimeoutError as e:
        raise BenchError(f"{count:,} sends not answered in {deadline_s(count):.0f} s") from e
    seconds = time.perf_counter() - start
    return Run(count, seconds, cpu.read(), len(failures), failures[0][:300] if failures else "")


async def open_loop(send: Send, count: int, rate: float, expect: str) -> tuple[list[float], int]:
    """``count`` sends started at ``rate`` per second whatever the earlier ones do; each
    latency (ms) counts from the send's scheduled start. Also the failures."""
    latencies: list[float] = []
    failures = 0
    tasks: set[asyncio.Task[None]] = set()

    async def one(scheduled: float) -> None:
        nonlocal failures
        try:
            outcome = await send()
        except Exception as e:
            outcome = repr(e)
        latencies.append((time.perf_counter() - scheduled) * 1000.0)
        if outcome != expect:
            failures += 1

    start = time.perf_counter()
    for i in range(count):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait_for(asyncio.gather(*tasks), RPC_TIMEOUT_S * 2)
    return latencies, failures


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100.0 * len(ordered)) - 1)]


class DirectClient:
    """The sidecar's own producer in this process: send to the broker as the sidecar does,
    without the hop through it."""

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


class BatchClient:
    """Raw apache.rocketmq.v2 stubs: REF_BATCH messages per SendMessage, as a resend pool that
    batched its entries could send them."""

    def __init__(self, endpoint: str, topic: str) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint)
        self.stub: Any = service_pb2_grpc.MessagingServiceStub(self.channel)
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
                for _ in range(REF_BATCH)
            ]
        )
        reply = await self.stub.SendMessage(request, metadata=self._metadata, timeout=RPC_TIMEOUT_S)
        codes = {e.status.code for e in reply.entries}
        if len(reply.entries) != REF_BATCH or codes != {definition_pb2.OK}:
            return f"{len(reply.entries)} entries, codes {sorted(codes)}: {reply.status.message}"
        return "stored"

    async def run(self, count: int, cpu: CpuMeter) -> Run:
        requests = max(1, count // REF_BATCH)
        run = await closed_loop(self.send, requests, REF_BATCH_WINDOW, "stored", cpu)
        run.count = requests * REF_BATCH
        return run

    async def close(self) -> None:
        await self.channel.close()


class SidecarClient:
    """An app of the sidecar: unary ``Send`` and ``SendStream`` over one grpc.aio channel."""

    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint)
        self.stub: Any = sidecar_pb2_grpc.SidecarServiceStub(self.channel)
        self._request = api.SendRequest(message=api.Message(topic=TOPIC, body=BODY))

    async def send(self) -> str:
        response: api.SendResponse = await self.stub.Send(self._request, timeout=RPC_TIMEOUT_S)
        return response.result.WhichOneof("outcome") or "no outcome"

    async def stream(
        self, count: int, streams: int, window: int, expect: str, cpu: CpuMeter
    ) -> Run:
        """``count`` messages over ``streams`` SendStream calls, ``window`` in flight each."""
        message = api.Message(topic=TOPIC, body=BODY)
        failures: list[str] = []

        async def one_stream(n: int) -> None:
            call = self.stub.SendStream(timeout=deadline_s(count))
            slots = asyncio.Semaphore(window)

            async def write() -> None:
                for i in range(n):
                    await slots.acquire()
                    await call.write(api.SendStreamRequest(request_id=i, message=message))
                await call.done_writing()

            writer = asyncio.create_task(write())
            answered = 0
            try:
                async for response in call:
                    slots.release()
                    answered += 1
                    outcome = response.result.WhichOneof("outcome") or "no outcome"
                    if outcome != expect:
                        failures.append(f"{outcome}: {response.result}")
            finally:
                if not writer.done():
                    writer.cancel()
            await writer
            if answered != n:
                failures.extend([f"{n - answered} requests of a stream not answered"])

        share = [count // streams + (1 if i < count % streams else 0) for i in range(streams)]
        start = time.perf_counter()
        await asyncio.gather(*(one_stream(n) for n in share if n))
        seconds = time.perf_counter() - start
        return Run(count, seconds, cpu.read(), len(failures), failures[0][:300] if failures else "")

    async def close(self) -> None:
        await self.channel.close()


# -- the table ------------------------------------------------------------------------------------
@dataclass
class Row:
    part: str
    figure: str
    value: float
    unit: str
    reference: str = ""  # what the figure is compared with, and its value
    ratio: float | None = None  # value / reference
    target: str = ""
    to_target: float | None = None  # how far along the target is (>= 1: met)
    met: bool | None = None
    cpu: str = ""
    detail: str = ""

    def cells(self) -> list[str]:
        value = f"{self.value:,.2f}" if self.unit == "ms" else f"{self.value:,.0f}"
        verdict = "" if self.met is None else ("met" if self.met else "NOT MET")
        return [
            self.part,
            self.figure,
            f"{value} {self.unit}",
            self.reference,
            "" if self.ratio is None else f"{self.ratio:.2f}x",
            self.target,
            "" if self.to_target is None else f"{self.to_target:.2f}x",
            verdict,
            self.cpu,
        ]


HEADER = ["", "figure", "value", "reference", "ratio", "target", "of target", "verdict", "cpu"]


def table(rows: Sequence[Row]) -> str:
    cells = [HEADER, *(r.cells() for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    right = {2, 4, 6}
    lines = []
    for n, c in enumerate(cells):
        text = "  ".join(
            (v.rjust(w) if i in right else v.ljust(w))
            for i, (v, w) in enumerate(zip(c, widths, strict=True))
        )
        lines.append(text.rstrip())
        if n == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def rate_row(part: str, figure: str, run: Run, **kw: Any) -> Row:
    detail = f"{run.count:,} msgs in {run.seconds:.2f} s"
    if run.failures:
        detail += f"; {run.failures:,} FAILED, e.g. {run.failure_example}"
    return Row(part, figure, run.rate, "msgs/s", cpu=run.cpu.text(), detail=detail, **kw)


def against_min(value: float, minimum: float) -> dict[str, Any]:
    return {"target": f">= {minimum:,.0f}", "to_target": value / minimum, "met": value >= minimum}


def against_max(value: float, maximum: float, unit: str) -> dict[str, Any]:
    return {
        "target": f"<= {maximum:g} {unit}",
        "to_target": maximum / value if value > 0 else math.inf,
        "met": value <= maximum,
    }


# -- the parts ------------------------------------------------------------------------------------
@dataclass
class Settings:
    messages: int
    window: int
    stream_window: int
    streams: int
    rate: float
    latency_seconds: float
    spool_messages: int
    raw_messages: int
    drain_messages: int
    drain_concurrency: int
    drain_claim_batch: int


class Bench:
    def __init__(self, settings: Settings, res: Resources) -> None:
        self.s = settings
        self.res = res
        self.rows: list[Row] = []
        self.failed: list[str] = []
        self.direct_rate: float | None = None
        self.drain_refs: tuple[Run, Run] | None = None

    def add(self, row: Row) -> None:
        self.rows.append(row)
        if "FAILED" in row.detail:
            self.failed.append(f"{row.figure}: {row.detail}")
        print(f"  {row.part} {row.figure}: {row.cells()[2]}", file=sys.stderr, flush=True)

    def memory_row(self, sidecar: Child, phase: str) -> None:
        assert sidecar.memory is not None
        peak_mb = sidecar.memory.take() / 1024
        self.add(
            Row(
                "d",
                f"sidecar VmRSS peak, {phase}",
                peak_mb,
                "MB",
                reference=f"VmHWM {sidecar.hwm_mb():.0f} MB so far",
                **against_max(peak_mb, RSS_TARGET_MB, "MB"),
            )
        )

    # (a) -----------------------------------------------------------------------------------
    async def part_a(self, memory_only: bool = False) -> None:
        s = self.s
        broker = await asyncio.to_thread(self.res.broker)
        outbox_url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, outbox_url)
        direct = DirectClient(broker.port)
        client = SidecarClient(sidecar.endpoint)
        warmup = 2 * s.window
        procs = {"sc": sidecar, "br": broker}
        try:
            await closed_loop(direct.send, warmup, s.window, "stored", CpuMeter(procs))
            await closed_loop(client.send, warmup, s.window, "stored", CpuMeter(procs))
            await client.stream(warmup, s.streams, s.stream_window, "stored", CpuMeter(procs))
            await asyncio.to_thread(wait_quiet, broker)
            assert sidecar.memory is not None
            sidecar.memory.take()
            if not memory_only:
                run = await closed_loop(
                    direct.send, s.messages, s.window, "stored", CpuMeter({"br": broker})
                )
                self.direct_rate = run.rate
                self.add(rate_row("a", f"direct Producer -> broker, {s.window} in flight", run))
            unary = await closed_loop(client.send, s.messages, s.window, "stored", CpuMeter(procs))
            ref: dict[str, Any] = {}
            if self.direct_rate is not None:
                ref = {
                    "reference": f"direct {self.direct_rate:,.0f}",
                    "ratio": unary.rate / self.direct_rate,
                }
            self.add(rate_row("a", f"sidecar Send (unary), {s.window} in flight", unary, **ref))
            stream = await client.stream(
                s.messages * 2, s.streams, s.stream_window, "stored", CpuMeter(procs)
            )
            if self.direct_rate is not None:
                ref["ratio"] = stream.rate / self.direct_rate
            self.add(
                rate_row(
                    "a",
                    f"sidecar SendStream, {s.streams} stream(s) x {s.stream_window} in flight",
                    stream,
                    **ref,
                )
            )
            self.memory_row(sidecar, "(a) unary + stream throughput")
            if not memory_only:
                await self.latency(direct, client, broker, sidecar)
                self.memory_row(sidecar, f"(a) paced {s.rate:,.0f}/s")
        finally:
            await client.close()
            await direct.producer.close()
        await asyncio.to_thread(self.res.stop, sidecar)
        await asyncio.to_thread(self.res.stop, broker)

    async def latency(
        self, direct: DirectClient, client: SidecarClient, broker: Child, sidecar: Child
    ) -> None:
        s = self.s
        per_round = max(1, int(s.rate * s.latency_seconds / LATENCY_ROUNDS / 2))
        lat: dict[str, list[float]] = {"direct": [], "sidecar": []}
        failures = dict.fromkeys(lat, 0)
        sends: dict[str, Send] = {"direct": direct.send, "sidecar": client.send}
        warm = max(1, int(s.rate * 0.5))
        for send in sends.values():
            await open_loop(send, warm, s.rate, "stored")
        cpu = CpuMeter({"sc": sidecar, "br": broker})
        seconds = dict.fromkeys(lat, 0.0)
        for _ in range(LATENCY_ROUNDS):
            for name, send in sends.items():
                start = time.perf_counter()
                got, failed = await open_loop(send, per_round, s.rate, "stored")
                seconds[name] += time.perf_counter() - start
                lat[name] += got
                failures[name] += failed
        used = cpu.read().text()
        for name in ("direct", "sidecar"):
            if failures[name]:
                self.failed.append(f"(a) paced {name}: {failures[name]} sends failed")
        p = {(n, q): percentile(lat[n], q) for n in lat for q in (50, 99)}
        base = f"paced {s.rate:,.0f}/s open loop, {len(lat['direct']):,} sends"
        for name in ("direct", "sidecar"):
            achieved = len(lat[name]) / seconds[name]
            detail = f"achieved {achieved:,.0f} sends/s (last answer included)"
            if achieved < 0.95 * s.rate:
                detail += ": the load was NOT sustained, the latency is mostly queueing"
            for q in (50, 99):
                self.add(
                    Row("a", f"{name} p{q} latency, {base}", p[(name, q)], "ms", cpu=used,
                        detail=detail)
                )  # fmt: skip
        added50 = p[("sidecar", 50)] - p[("direct", 50)]
        added99 = p[("sidecar", 99)] - p[("direct", 99)]
        self.add(Row("a", "added p50 latency (sidecar - direct)", added50, "ms", cpu=used))
        self.add(
            Row(
                "a",
                "added p99 latency (sidecar - direct)",
                added99,
                "ms",
                reference=f"Dapr adds {DAPR_ADDED_P99_MS} ms",
                ratio=added99 / DAPR_ADDED_P99_MS,
                cpu=used,
                **against_max(added99, ADDED_P99_TARGET_MS, "ms"),
            )
        )

    # (b) -----------------------------------------------------------------------------------
    async def part_b(self, backends: Sequence[str], memory_only: bool = False) -> None:
        for backend in backends:
            await self.spool(backend, memory_only)
            await asyncio.to_thread(self.res.drop_data)

    async def spool(self, backend: str, memory_only: bool) -> None:
        s = self.s
        target = SPOOL_TARGETS[backend]
        raw: Run | None = None
        if not memory_only:
            raw_singles, raw_batches = await asyncio.to_thread(self.raw_puts, backend)
            raw = raw_singles
            self.add(
                rate_row("b", f"{backend}: raw outbox.put, {RAW_THREADS} threads x 1", raw_singles,
                         **against_min(raw_singles.rate, target))
            )  # fmt: skip
            self.add(
                rate_row("b", f"{backend}: raw outbox.put, 1 thread x {RAW_BATCH}/put",
                         raw_batches, **against_min(raw_batches.rate, target))
            )  # fmt: skip
        url = self.res.outbox_url(backend)
        down = f"{HOST}:{closed_port()}"
        sidecar = await asyncio.to_thread(self.res.sidecar, down, url, *NO_RESEND_ARGS)
        client = SidecarClient(sidecar.endpoint)
        procs = {"sc": sidecar}
        ref: dict[str, Any] = {}
        if raw is not None:
            ref = {"reference": f"raw 64x1 {raw.rate:,.0f}"}
        try:
            warmup = 2 * SPOOL_SENDERS
            await closed_loop(client.send, warmup, SPOOL_SENDERS, "spooled", CpuMeter(procs))
            await client.stream(warmup, s.streams, s.stream_window, "spooled", CpuMeter(procs))
            assert sidecar.memory is not None
            sidecar.memory.take()
            unary = await closed_loop(
                client.send, s.spool_messages, SPOOL_SENDERS, "spooled", CpuMeter(procs)
            )
            if raw is not None:
                ref["ratio"] = unary.rate / raw.rate
            self.add(
                rate_row("b", f"{backend}: spool via Send, broker down, {SPOOL_SENDERS} in flight",
                         unary, **ref, **against_min(unary.rate, target))
            )  # fmt: skip
            stream = await client.stream(
                s.spool_messages, s.streams, s.stream_window, "spooled", CpuMeter(procs)
            )
            if raw is not None:
                ref["ratio"] = stream.rate / raw.rate
            self.add(
                rate_row("b", f"{backend}: spool via SendStream, {s.streams} x {s.stream_window} "
                         "in flight", stream, **ref, **against_min(stream.rate, target))
            )  # fmt: skip
            self.memory_row(sidecar, f"(b) {backend} spool")
        finally:
            await client.close()
        await asyncio.to_thread(self.res.stop, sidecar)

    def raw_puts(self, backend: str) -> tuple[Run, Run]:
        """outbox.put in this process: RAW_THREADS threads one entry a put, then one thread
        RAW_BATCH entries a put; a fresh outbox."""
        outbox = self.res.open_outbox(self.res.outbox_url(backend))
        try:
            n = self.s.raw_messages
            singles = make_entries(n, due_in_ms=3_600_000)
            per_thread = [singles[i::RAW_THREADS] for i in range(RAW_THREADS)]

            def put_each(entries: list[OutboxEntry]) -> None:
                for entry in entries:
                    outbox.put([entry])

            with ThreadPoolExecutor(RAW_THREADS) as pool:
                list(pool.map(put_each, [e[:2] for e in per_thread]))  # warm: connections
                cpu = CpuMeter({})
                start = time.perf_counter()
                list(pool.map(put_each, [e[2:] for e in per_thread]))
                seconds = time.perf_counter() - start
            count = sum(len(e[2:]) for e in per_thread)
            threads = Run(count, seconds, cpu.read())
            batches = make_entries(n, due_in_ms=3_600_000)
            cpu = CpuMeter({})
            start = time.perf_counter()
            for i in range(0, n, RAW_BATCH):
                outbox.put(batches[i : i + RAW_BATCH])
            batched = Run(n, time.perf_counter() - start, cpu.read())
            stats = outbox.stats(int(time.time() * 1000))
            if stats.pending != 2 * n:
                self.failed.append(f"{backend} raw puts: {stats.pending:,} pending afterwards")
        finally:
            self.res.close_outbox(outbox)
        return threads, batched

    # (c) -----------------------------------------------------------------------------------
    async def part_c(self, backends: Sequence[str]) -> None:
        for backend in backends:
            await self.drain(backend)
            await asyncio.to_thread(self.res.drop_data)

    async def drain(self, backend: str) -> None:
        s = self.s
        n = s.drain_messages
        url = self.res.outbox_url(backend)
        outbox = await asyncio.to_thread(self.res.open_outbox, url)
        entries = make_entries(n, due_in_ms=0)
        for i in range(0, n, 500):
            await asyncio.to_thread(outbox.put, entries[i : i + 500])
        if backend == "rocksdb":  # one process at a time
            await asyncio.to_thread(self.res.close_outbox, outbox)
        broker = await asyncio.to_thread(self.res.broker)
        args = (
            f"--resend-concurrency-max={s.drain_concurrency}",
            f"--claim-batch-max={s.drain_claim_batch}",
            f"--poll-interval-ms={DRAIN_POLL_MS}",
        )
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, *args)
        cpu = CpuMeter({"sc": sidecar, "br": broker})
        stats_outbox = None if backend == "rocksdb" else outbox
        stored, done_at = await self.wait_drained(broker, stats_outbox, n, sidecar)
        used = cpu.read()
        seconds = done_at - sidecar.ready_at
        self.memory_row(sidecar, f"(c) {backend} drain")
        await asyncio.to_thread(self.res.stop, sidecar)
        if self.drain_refs is None:
            self.drain_refs = await self.drain_references(broker)
        if backend == "rocksdb":
            outbox = await asyncio.to_thread(self.res.open_outbox, url)
        stats = await asyncio.to_thread(outbox.stats, int(time.time() * 1000))
        await asyncio.to_thread(self.res.close_outbox, outbox)
        await asyncio.to_thread(self.res.stop, broker)
        failures = 0
        example = ""
        if stats.pending or stats.dead or stats.delivered != n or stored != n:
            failures = max(1, abs(n - stats.delivered), stored - n)
            example = (
                f"broker holds {stored:,} of {n:,}; outbox pending {stats.pending:,}, "
                f"delivered {stats.delivered:,}, dead {stats.dead:,}"
            )
        run = Run(n, seconds, used, failures, example)
        direct = self.drain_refs[0].rate
        ref = {"reference": f"direct {direct:,.0f}", "ratio": run.rate / direct}
        self.add(
            rate_row(
                "c",
                f"{backend}: drain, resend-concurrency {s.drain_concurrency}, claim-batch "
                f"{s.drain_claim_batch}, poll {DRAIN_POLL_MS} ms",
                run,
                **ref,
                **against_min(run.rate, DRAIN_TARGET),
            )
        )

    async def drain_references(self, broker: Child) -> tuple[Run, Run]:
        """Against the drain's broker, to REF_TOPIC: the direct Producer with the pool's
        concurrency (one message a send, as the pool sends), and REF_BATCH messages a request."""
        s = self.s
        n = s.drain_messages
        direct = DirectClient(broker.port, REF_TOPIC)
        batch = BatchClient(broker.endpoint, REF_TOPIC)
        try:
            window = min(s.drain_concurrency, 64)
            await closed_loop(direct.send, 2 * window, window, "stored", CpuMeter({}))
            await batch.run(4 * REF_BATCH * REF_BATCH_WINDOW, CpuMeter({}))
            await asyncio.to_thread(wait_quiet, broker)
            one = await closed_loop(direct.send, n, window, "stored", CpuMeter({"br": broker}))
            self.add(
                rate_row("c", f"reference: direct Producer -> broker, {window} in flight", one)
            )
            batched = await batch.run(n, CpuMeter({"br": broker}))
            self.add(
                rate_row("c", f"reference: raw SendMessage, {REF_BATCH} msgs/request, "
                         f"{REF_BATCH_WINDOW} in flight", batched,
                         **against_min(batched.rate, DRAIN_TARGET))
            )  # fmt: skip
        finally:
            await direct.producer.close()
            await batch.close()
        return one, batched

    async def wait_drained(
        self, broker: Child, outbox: Outbox | None, n: int, sidecar: Child
    ) -> tuple[int, float]:
        """Poll until the broker holds ``n`` messages of the topic and the outbox (when it can be
        read from here) has none pending; the broker's count and the time."""
        deadline = time.monotonic() + deadline_s(n)
        async with grpc.aio.insecure_channel(broker.endpoint) as channel:
            admin: Any = broker_admin_pb2_grpc.BrokerAdminStub(channel)
            request = broker_admin_pb2.DescribeTopicRequest(topic=TOPIC)
            stored = 0
            while time.monotonic() < deadline:
                if sidecar.proc.poll() is not None:
                    raise BenchError(f"the sidecar exited while draining:\n{sidecar.output()}")
                response = await admin.DescribeTopic(request, timeout=RPC_TIMEOUT_S)
                stored = sum(q.max_queue_offset - q.min_queue_offset for q in response.queues)
                if stored >= n:
                    if outbox is None:
                        return stored, time.perf_counter()
                    stats = await asyncio.to_thread(outbox.stats, int(time.time() * 1000))
                    if stats.pending == 0:
                        return stored, time.perf_counter()
                await asyncio.sleep(DRAIN_POLL_MS / 1000.0)
        raise BenchError(f"drain: the broker holds {stored:,} of {n:,} after {deadline_s(n):.0f} s")


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


# -- the run --------------------------------------------------------------------------------------
async def cancelled_by_signals(coro: Coroutine[Any, Any, T]) -> T:
    """SIGTERM and SIGINT cancel ``coro`` (its cleanup runs), then raise KeyboardInterrupt."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    signalled: list[str] = []

    def cancel(signum: signal.Signals) -> None:
        signalled.append(signum.name)
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, cancel, signum)
    try:
        return await coro
    except asyncio.CancelledError:
        if signalled:
            raise KeyboardInterrupt(signalled[0]) from None
        raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)  # leaves the default: ours again, for cleanup
            signal.signal(signum, interrupted)


async def run_parts(bench: Bench, only: str | None) -> None:
    if only in (None, "a"):
        print("(a) throughput and latency, broker up", file=sys.stderr, flush=True)
        await bench.part_a()
    if only in (None, "b"):
        print("(b) spool rate, broker down", file=sys.stderr, flush=True)
        await bench.part_b(BACKENDS)
    if only in (None, "c"):
        print("(c) drain rate after the broker returns", file=sys.stderr, flush=True)
        await bench.part_c(BACKENDS)
    if only == "d":
        print("(d) the sidecar's memory under (a)'s and (b)'s loads", file=sys.stderr, flush=True)
        await bench.part_a(memory_only=True)
        await bench.part_b(("rocksdb",), memory_only=True)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def parse_args() -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke check")
    parser.add_argument("--only", choices=("a", "b", "c", "d"), default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--messages", type=int, default=None, help="(a) per throughput figure")
    parser.add_argument("--window", type=int, default=64, help="(a) unary sends in flight")
    parser.add_argument("--stream-window", type=int, default=256, help="SendStream in flight")
    parser.add_argument("--streams", type=int, default=1, help="SendStream calls")
    parser.add_argument("--rate", type=float, default=1_000.0, help="(a) paced msgs/s")
    parser.add_argument("--latency-seconds", type=float, default=None, help="(a) paced, in all")
    parser.add_argument("--spool-messages", type=int, default=None, help="(b) per figure")
    parser.add_argument("--drain-messages", type=int, default=None, help="(c) per backend")
    parser.add_argument("--drain-concurrency", type=int, default=256)
    parser.add_argument("--drain-claim-batch", type=int, default=1_024)
    parser.add_argument(
        "--sidecar-log-level", choices=("DEBUG", "INFO", "WARNING"), default="INFO",
        help="the processes' --log-level (INFO, the default, logs every spool)",
    )  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None, help="temporary data (default: tmp)")
    args = parser.parse_args()
    quick = args.quick
    settings = Settings(
        messages=args.messages or (2_000 if quick else 20_000),
        window=args.window,
        stream_window=args.stream_window,
        streams=args.streams,
        rate=args.rate,
        latency_seconds=args.latency_seconds or (2.0 if quick else 20.0),
        spool_messages=args.spool_messages or (2_000 if quick else 20_000),
        raw_messages=args.spool_messages or (2_000 if quick else 20_000),
        drain_messages=args.drain_messages or (2_000 if quick else 20_000),
        drain_concurrency=args.drain_concurrency,
        drain_claim_batch=args.drain_claim_batch,
    )
    for name, value in asdict(settings).items():
        if value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if settings.raw_messages < RAW_THREADS * 3:
        parser.error(f"--spool-messages must be at least {RAW_THREADS * 3}")
    return args, settings


def main() -> None:
    args, settings = parse_args()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, interrupted)
    missing = check_services(
        need_redis=args.only in (None, "b", "c"), need_mysql=args.only in (None, "b", "c")
    )
    if missing:
        print("sidecar_bench: needed services are not answering:", file=sys.stderr)
        for m in missing:
            print(f"  - {m}", file=sys.stderr)
        sys.exit(2)
    began = time.perf_counter()
    start_load = load()
    print(
        f"sidecar_bench: 1 KiB bodies, {os.cpu_count()} cores, load average {start_load} at "
        f"start{', quick' if args.quick else ''}{f', only ({args.only})' if args.only else ''}; "
        f"{settings}",
        flush=True,
    )
    res = Resources(
        Path(tempfile.mkdtemp(prefix="rocketbox-sidecar-bench-", dir=args.dir)),
        args.sidecar_log_level,
    )
    bench = Bench(settings, res)
    code = 0
    try:
        asyncio.run(cancelled_by_signals(run_parts(bench, args.only)))
    except BenchError as e:
        print(f"\nbench failed: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); stopping everything started", file=sys.stderr)
        code = 130
    finally:
        problems = res.cleanup()
        for p in problems:
            print(f"cleanup: {p}", file=sys.stderr)
    if code:
        sys.exit(code)
    end_load = load()
    print()
    print(table(bench.rows))
    print()
    print(
        "cpu: CPU seconds per wall second during the figure: bench = this process (the clients), "
        "sc = sidecar, br = broker; all share the machine's cores, so the bench's clients take "
        "CPU the sidecar and broker would otherwise have."
    )
    print(
        "(a) latency: open loop, from each send's scheduled start; direct and sidecar alternate "
        f"in {LATENCY_ROUNDS} rounds. (b) the resend pool is held off (first resend in 1 h). "
        "(c) from the sidecar's ready line to all N at the broker (and none pending)."
    )
    for row in bench.rows:
        if row.detail:
            print(f"  {row.part} {row.figure}: {row.detail}")
    not_met = [r for r in bench.rows if r.met is False and "raw" not in r.figure]
    for r in not_met:
        print(
            f"TARGET NOT MET: ({r.part}) {r.figure}: {r.cells()[2]}, target {r.target} "
            f"({r.to_target:.2f}x of it)"
        )
    if not not_met:
        print("every target measured was met")
    print(
        f"load average {start_load} at the start, {end_load} at the end; "
        f"the bench took {time.perf_counter() - began:.0f} s"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "settings": asdict(settings),
                    "cores": os.cpu_count(),
                    "load_average": {"start": start_load, "end": end_load},
                    "sidecar_log_level": args.sidecar_log_level,
                    "rows": [asdict(r) for r in bench.rows],
                    "targets_not_met": [r.figure for r in not_met],
                    "failures": bench.failed,
                },
                indent=2,
            )
            + "\n"
        )
    if bench.failed:
        print("some measurements had failures (above): the figures are not valid", file=sys.stderr)
        for f in bench.failed:
            print(f"  {f}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
