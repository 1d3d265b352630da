"""What the sidecar bench starts and must remove: ``rocketbox broker`` and ``rocketbox
sidecar`` processes (with their memory sampled), temporary directories, Redis keys and MySQL
tables; the services it needs and the sidecar's options it uses, checked before it starts.

Invariant: everything made goes through ``Resources``, whose ``cleanup`` removes it whatever
happened (a failed measurement, SIGINT/SIGTERM).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import redis
import sqlalchemy as sa

from bench import process_control
from bench.process_control import READY_DEADLINE_S, BenchError, wait_idle
from outbox.factory import open_outbox
from outbox.outbox import Outbox
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
TOPIC = "SidecarBenchTopic"
# (c)'s references send here, so that the drained topic holds exactly the drained messages.
REF_TOPIC = "SidecarBenchRefTopic"
QUEUES = 8
REDIS_PORT = 6379
MYSQL_PORT = 3306
REDIS_URL = f"redis://{HOST}:{REDIS_PORT}/0"
MYSQL_URL = f"mysql+pymysql://root@{HOST}:{MYSQL_PORT}/test"
RPC_TIMEOUT_S = 30.0
MEMORY_SAMPLE_S = 0.05
BROKER_READY = re.compile(r"broker listening on \S+:(\d+);")
SIDECAR_READY = re.compile(r"sidecar listening on \S+:(\d+)")
REDIS_START = (
    "redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save '' --appendonly no "
    "--dir /var/lib/redis --logfile /var/log/redis/ci.log"
)
MYSQL_START = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"


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


class Child(process_control.Child):
    """``python -m rocketbox ...`` (bench/process_control.py's Child), its memory sampled once
    ``watch_memory`` is called."""

    def __init__(self, name: str, args: Sequence[str], ready: re.Pattern[str], log: Path) -> None:
        self.memory: MemorySampler | None = None
        argv = [sys.executable, "-m", "rocketbox", *args]
        super().__init__(name, argv, ready, log, cwd=REPO_ROOT)

    def watch_memory(self) -> MemorySampler:
        self.memory = MemorySampler(self.proc.pid)
        return self.memory

    def hwm_mb(self) -> float:
        return status_kib(self.proc.pid, "VmHWM") / 1024

    def stop(self) -> int:
        code = super().stop()
        if self.memory is not None:
            self.memory.stop()
        return code


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (the broker that is down)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class Resources:
    """Everything the bench creates, so that all of it goes at the end, whatever happens.
    Every process runs on ``event_loop`` (``rocketbox --event-loop``); every sidecar gets
    ``sidecar_args`` too."""

    def __init__(
        self, base: Path, log_level: str, event_loop: str, sidecar_args: Sequence[str] = ()
    ) -> None:
        self.base = base
        self.log_level = log_level
        self.event_loop = event_loop
        self.sidecar_args = tuple(sidecar_args)
        self.children: list[Child] = []
        self.redis_prefixes: list[str] = []
        self.mysql_tables: list[str] = []
        self.outboxes: list[Outbox] = []

    def path(self, name: str) -> Path:
        return self.base / f"{name}-{uuid.uuid4().hex[:8]}"

    def start(self, name: str, args: Sequence[str], ready: re.Pattern[str]) -> Child:
        child = Child(
            name,
            ["--log-level", self.log_level, "--event-loop", self.event_loop, *args],
            ready,
            self.path(name + ".log"),
        )
        self.children.append(child)
        return child

    def broker(self) -> Child:
        return self.start(
            "broker",
            ["broker", "--data-dir", str(self.path("broker")), "--listen", f"{HOST}:0",
             "--auto-create-topic", "--topic", f"{TOPIC}:{QUEUES}:NORMAL",
             "--topic", f"{REF_TOPIC}:{QUEUES}:NORMAL",
             "--segment-size-mib", "256", "--hash-slot-num", "1000000",
             "--index-num-max", "4000000"],
            BROKER_READY,
        )  # fmt: skip

    def sidecar(self, broker: str, outbox_url: str, *args: str) -> Child:
        child = self.start(
            "sidecar",
            ["sidecar", "--broker", broker, "--outbox", outbox_url, "--listen", f"{HOST}:0",
             *self.sidecar_args, *args],
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
                            tables = f"`{table}`, `{table}_counters`, `{table}_stats`"
                            conn.execute(sa.text(f"DROP TABLE IF EXISTS {tables}"))
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


@dataclass(frozen=True)
class Feature:
    """Something a group of rows needs from the code under test; ``present`` once it landed."""

    name: str
    rows: str  # the rows that need it
    present: bool


def features() -> dict[str, Feature]:
    """What the rows need beyond the sidecar's first release: the sidecar's options (read from
    its --help) and the client library (importable here)."""
    helps = {}
    for command in ((), ("sidecar",)):
        done = subprocess.run(
            [sys.executable, "-m", "rocketbox", *command, "--help"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=READY_DEADLINE_S, check=False,
        )  # fmt: skip
        helps[command] = done.stdout
    library = importlib.util.find_spec("rocketbox_client") is not None
    found = [
        Feature("--event-loop", "every process (rocketbox --event-loop)",
                "--event-loop" in helps[()]),
        Feature("--no-coalesce", "(a) unary Send, coalescing off",
                "--no-coalesce" in helps[("sidecar",)]),
        Feature("--intake-in-flight-max", "(a) overload",
                "--intake-in-flight-max" in helps[("sidecar",)]),
        Feature("--pending-calls-max", "(a) overload",
                "--pending-calls-max" in helps[("sidecar",)]),
        Feature("rocketbox_client", "(a) and (b) the client library's batching sender "
                "(pip install -e client)", library),
        Feature("--rocketmq-listen", "(e) the sidecar's RocketMQ front",
                "--rocketmq-listen" in helps[("sidecar",)]),
    ]  # fmt: skip
    return {f.name: f for f in found}


def wait_quiet(child: Child) -> None:
    """Until ``child`` is idle after a load (process_control.wait_idle)."""
    if not wait_idle(child.cpu_seconds, READY_DEADLINE_S):
        raise BenchError(f"{child.name} still busy {READY_DEADLINE_S:.0f} s after the warm-up")


async def set_flow_control(broker: Child, on: bool) -> None:
    """Force flow control on or off for the whole broker (its admin service, as ``rocketbox
    flow-control`` does): while on, it answers every send TOO_MANY_REQUESTS."""
    async with grpc.aio.insecure_channel(broker.endpoint) as channel:
        admin: Any = broker_admin_pb2_grpc.BrokerAdminStub(channel)
        response = await admin.SetFlowControl(
            broker_admin_pb2.SetFlowControlRequest(on=on), timeout=RPC_TIMEOUT_S
        )
    if response.broker_wide != on:
        raise BenchError(f"forced flow control is {response.broker_wide}, not {on}, after set")
