"""The cluster's figures in one run: send throughput of one broker group against two, put latency
of SYNC_MASTER against ASYNC_MASTER, and replication lag under load.

    .venv/bin/python bench/cluster_bench.py [--messages N] [--batch B] [--window W]
        [--latency-messages N] [--latency-window W]

Every broker is a real ``rocketbox broker`` process (ASYNC_FLUSH, 1 KiB messages) registered
with a real ``rocketbox namesrv``; each measurement gets a fresh cluster. Sends go through the
generated apache.rocketmq.v2 stub, as the official clients send them: the route comes from
QueryRoute on the first master (the cluster front: every group's queues, each at its own
broker), and each request goes straight to the broker of the queue it addresses.

(a) throughput: N messages in requests of B, W requests in flight, over 1 group and over 2
    groups (masters only). Printed: msgs/s, the brokers' CPU per message (all broker processes
    together) and the ratio of 2 groups to 1. The physical limit beside it: this machine's cores,
    which the two brokers and the client share.
(b) put latency: one message a request, W in flight, to a group of a master and one slave:
    ASYNC_MASTER (answered after its own store) and SYNC_MASTER (answered once the slave holds
    it), and beside them a stand-alone master with no slave. p50/p99/max per request.
(c) replication lag: (a)'s load on ASYNC_MASTER with a slave, the master's GetHAState sampled
    every LAG_SAMPLE_INTERVAL_S: the slave's lag in bytes p50/p99/max during the load, and the
    time from the last answered send until the slave holds the master's end; beside it the load's
    own byte rate.

Each measurement follows a warm-up and waits until the brokers are idle. Every send must be
answered OK (SYNC_MASTER: OK, not a replication timeout); anything else is printed and the bench
exits 1. SIGTERM or SIGINT stops every process and removes the data directories.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.broker.sends import send_request
from bench.process_control import (
    BenchError,
    Child,
    interrupted,
    load,
    run_async,
    wait_idle,
)
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[1]
BODY = os.urandom(1024)
TOPIC = "ClusterBenchTopic"
QUEUES = 8
NAMESRV_READY = re.compile(r"namesrv listening on 127\.0\.0\.1:(\d+)\b")
BROKER_READY = re.compile(r"broker listening on 127\.0\.0\.1:(\d+)\b")
RPC_TIMEOUT_S = 30.0
IDLE_DEADLINE_S = 60.0
LAG_SAMPLE_INTERVAL_S = 0.02
CATCH_UP_DEADLINE_S = 60.0
# A SYNC_MASTER waits this long for its slave before answering SLAVE_PERSISTENCE_TIMEOUT.
SYNC_FLUSH_TIMEOUT_MS = 5_000
CLIENT_ID = ("x-mq-client-id", f"cluster-bench-{uuid.uuid4().hex}")


@dataclass
class Broker:
    name: str
    child: Child


class ClusterRun:
    """A NameServer and broker groups (``groups`` x (master + ``slaves``)) under ``root``."""

    def __init__(self, root: Path, groups: int, slaves: int, master_role: str) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.children: list[Child] = []
        self.masters: list[Broker] = []
        self.slaves: list[Broker] = []
        try:
            self.namesrv = self._start("namesrv", ["namesrv", "--listen", "127.0.0.1:0"],
                                       NAMESRV_READY)  # fmt: skip
            for g in range(groups):
                name = f"broker-{chr(ord('a') + g)}"
                self.masters.append(Broker(name, self._broker(name, 0, master_role)))
                for broker_id in range(1, slaves + 1):
                    self.slaves.append(Broker(name, self._broker(name, broker_id, "SLAVE")))
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, args: list[str], ready: re.Pattern[str]) -> Child:
        argv = [sys.executable, "-m", "rocketbox", "--log-level", "WARNING", *args]
        child = Child(name, argv, ready, self.root / f"{name}.log", cwd=REPO_ROOT)
        self.children.append(child)
        return child

    def _broker(self, name: str, broker_id: int, role: str) -> Child:
        args = [
            "broker", "--data-dir", str(self.root / f"{name}-{broker_id}"),
            "--listen", "127.0.0.1:0", "--segment-size-mib", "256",
            "--broker-name", name, f"--broker-id={broker_id}", "--broker-role", role,
            "--namesrv", self.namesrv.endpoint, "--register-broker-interval-ms=500",
            f"--sync-flush-timeout-ms={SYNC_FLUSH_TIMEOUT_MS}",
        ]  # fmt: skip
        if role != "SLAVE":
            args += ["--ha-listen", "127.0.0.1:0", "--topic", f"{TOPIC}:{QUEUES}:NORMAL"]
        return self._start(f"{name}-{broker_id}", args, BROKER_READY)

    def brokers_cpu_s(self) -> float:
        return sum(b.child.cpu_seconds() for b in (*self.masters, *self.slaves))

    def wait_quiet(self) -> None:
        if not wait_idle(self.brokers_cpu_s, IDLE_DEADLINE_S):
            raise BenchError(f"the brokers are still busy {IDLE_DEADLINE_S:.0f} s after a load")

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()


# -- sending -----------------------------------------------------------------------------------
async def writable_queues(endpoint: str, groups: int) -> list[pb.MessageQueue]:
    """The topic's queues from the cluster front, once every group's are in it."""
    deadline = time.monotonic() + IDLE_DEADLINE_S
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        while time.monotonic() < deadline:
            answer = await stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=RPC_TIMEOUT_S
            )
            queues = [q for q in answer.message_queues if q.permission == pb.READ_WRITE]
            if len({q.broker.name for q in queues}) == groups:
                return queues
            await asyncio.sleep(0.1)
    raise BenchError(f"the route of {TOPIC} never named {groups} groups")


def address_of(queue: pb.MessageQueue) -> str:
    a = queue.broker.endpoints.addresses[0]
    return f"{a.host}:{a.port}"


@dataclass
class Sent:
    messages: int
    seconds: float
    latencies_s: list[float]
    failures: list[str]


async def send_load(queues: list[pb.MessageQueue], count: int, batch: int, window: int) -> Sent:
    """``count`` messages in requests of ``batch``, ``window`` in flight, the queues in turn."""
    channels: dict[str, grpc.aio.Channel] = {}
    stubs: dict[str, service_pb2_grpc.MessagingServiceStub] = {}
    for q in queues:
        key = address_of(q)
        if key not in channels:
            channels[key] = grpc.aio.insecure_channel(key)
            stubs[key] = service_pb2_grpc.MessagingServiceStub(channels[key])
    targets = itertools.cycle([(stubs[address_of(q)], q) for q in queues])
    latencies: list[float] = []
    failures: list[str] = []
    bodies = [BODY] * batch

    async def sender(todo: Iterator[int]) -> None:
        for _ in todo:
            stub, queue = next(targets)
            started = time.perf_counter()
            reply = await stub.SendMessage(
                send_request(queue.topic, bodies, queue.id),
                metadata=(CLIENT_ID,),
                timeout=RPC_TIMEOUT_S,
            )
            latencies.append(time.perf_counter() - started)
            for entry in reply.entries:
                if entry.status.code != pb.OK:
                    failures.append(f"{pb.Code.Name(entry.status.code)}: {entry.status.message}")

    try:
        todo = iter(range(max(1, count // batch)))
        start = time.perf_counter()
        await asyncio.gather(*(sender(todo) for _ in range(window)))
        elapsed = time.perf_counter() - start
    finally:
        for channel in channels.values():
            await channel.close()
    return Sent(count // batch * batch, elapsed, latencies, failures)


def check(sent: Sent, what: str) -> None:
    if sent.failures:
        shown = "\n  ".join(sorted(set(sent.failures))[:10])
        raise BenchError(f"{what}: {len(sent.failures)} sends failed:\n  {shown}")


def percentile_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


# -- the three measurements --------------------------------------------------------------------
@dataclass
class Throughput:
    groups: int
    sent: Sent
    brokers_cpu_s: float

    @property
    def rate(self) -> float:
        return self.sent.messages / self.sent.seconds

    def line(self, baseline: Throughput | None) -> str:
        text = (
            f"(a) {self.groups} group{'s' if self.groups > 1 else ' '}, masters only"
            f"{'':<22}{self.rate:>9,.0f} msgs/s  brokers "
            f"{self.brokers_cpu_s / self.sent.messages * 1e6:6.1f} us/msg"
        )
        if baseline is not None:
            text += f"  {self.rate / baseline.rate:.2f}x 1 group"
        return text


def throughput(root: Path, groups: int, args: argparse.Namespace) -> Throughput:
    cluster = ClusterRun(root / f"throughput-{groups}", groups, 0, "ASYNC_MASTER")
    try:
        queues = run_async(writable_queues(cluster.masters[0].child.endpoint, groups))
        check(run_async(send_load(queues, args.batch * args.window * 4, args.batch,
                                  args.window)), "warm-up")  # fmt: skip
        cluster.wait_quiet()
        cpu0 = cluster.brokers_cpu_s()
        sent = run_async(send_load(queues, args.messages, args.batch, args.window))
        check(sent, f"(a) {groups} groups")
        return Throughput(groups, sent, cluster.brokers_cpu_s() - cpu0)
    finally:
        cluster.stop()


def latency(root: Path, role: str, slaves: int, args: argparse.Namespace) -> str:
    name = f"{role}, {'a slave' if slaves else 'no slave'}"
    cluster = ClusterRun(root / f"latency-{role}-{slaves}", 1, slaves, role)
    try:
        endpoint = cluster.masters[0].child.endpoint
        if slaves:
            wait_slave_connected(endpoint)
        queues = run_async(writable_queues(endpoint, 1))
        check(run_async(send_load(queues, 500, 1, args.latency_window)), "warm-up")
        cluster.wait_quiet()
        sent = run_async(send_load(queues, args.latency_messages, 1, args.latency_window))
        check(sent, f"(b) {name}")
        lat = sent.latencies_s
        return (
            f"(b) put latency, {name:<26} {args.latency_window:>2} in flight   p50 "
            f"{percentile_ms(lat, 0.5):6.2f} ms  p99 {percentile_ms(lat, 0.99):6.2f} ms  max "
            f"{max(lat) * 1e3:7.2f} ms  ({sent.messages / sent.seconds:,.0f} msgs/s)"
        )
    finally:
        cluster.stop()


def ha_state(endpoint: str) -> broker_admin_pb2.GetHAStateResponse:
    with grpc.insecure_channel(endpoint) as channel:
        answer: broker_admin_pb2.GetHAStateResponse = broker_admin_pb2_grpc.BrokerAdminStub(
            channel
        ).GetHAState(broker_admin_pb2.GetHAStateRequest(), timeout=RPC_TIMEOUT_S)
    return answer


def wait_slave_connected(endpoint: str) -> None:
    deadline = time.monotonic() + IDLE_DEADLINE_S
    while not ha_state(endpoint).slaves:
        if time.monotonic() > deadline:
            raise BenchError(f"no slave connected to {endpoint} in {IDLE_DEADLINE_S:.0f} s")
        time.sleep(0.05)


async def sample_lag(endpoint: str, samples: list[int], stop: asyncio.Event) -> None:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = broker_admin_pb2_grpc.BrokerAdminStub(channel)
        while not stop.is_set():
            state = await stub.GetHAState(broker_admin_pb2.GetHAStateRequest(), timeout=5.0)
            samples.append(max((s.lag_bytes for s in state.slaves), default=-1))
            await asyncio.sleep(LAG_SAMPLE_INTERVAL_S)


def replication_lag(root: Path, args: argparse.Namespace) -> str:
    cluster = ClusterRun(root / "lag", 1, 1, "ASYNC_MASTER")
    try:
        endpoint = cluster.masters[0].child.endpoint
        wait_slave_connected(endpoint)
        queues = run_async(writable_queues(endpoint, 1))
        cluster.wait_quiet()
        samples: list[int] = []

        async def measured() -> Sent:
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_lag(endpoint, samples, stop))
            try:
                return await send_load(queues, args.messages, args.batch, args.window)
            finally:
                stop.set()
                await sampler

        sent = run_async(measured())
        check(sent, "(c) the load")
        ended = time.perf_counter()
        while True:
            state = ha_state(endpoint)
            if state.slaves and all(s.lag_bytes == 0 for s in state.slaves):
                break
            if time.perf_counter() - ended > CATCH_UP_DEADLINE_S:
                raise BenchError(f"the slave did not catch up in {CATCH_UP_DEADLINE_S:.0f} s")
            time.sleep(0.005)
        catch_up_ms = (time.perf_counter() - ended) * 1e3
        lags = [s for s in samples if s >= 0]
        if not lags:
            raise BenchError("no lag sample while a slave was connected")
        mib_s = sent.messages * len(BODY) / sent.seconds / 2**20
        return (
            f"(c) replication lag under {sent.messages / sent.seconds:,.0f} msgs/s "
            f"({mib_s:.1f} MiB/s of bodies): p50 {statistics.median(lags) / 1024:,.0f} KiB  "
            f"p99 {sorted(lags)[int(0.99 * (len(lags) - 1))] / 1024:,.0f} KiB  "
            f"max {max(lags) / 1024:,.0f} KiB ({len(lags)} samples); caught up "
            f"{catch_up_ms:.0f} ms after the last answer"
        )
    finally:
        cluster.stop()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=100_000, help="(a) and (c): messages")
    p.add_argument("--batch", type=int, default=32, help="(a) and (c): messages a request")
    p.add_argument("--window", type=int, default=8, help="(a) and (c): requests in flight")
    p.add_argument("--latency-messages", type=int, default=5_000, help="(b): messages")
    p.add_argument("--latency-window", type=int, default=1, help="(b): requests in flight")
    return p


def main() -> None:
    args = parser().parse_args()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupted)
    root = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    try:
        print(f"load before: {load()}; {os.cpu_count()} cores (the limit the brokers and "
              "the client share)", flush=True)  # fmt: skip
        one = throughput(root, 1, args)
        print(one.line(None), flush=True)
        two = throughput(root, 2, args)
        print(two.line(one), flush=True)
        for role, slaves in (("ASYNC_MASTER", 0), ("ASYNC_MASTER", 1), ("SYNC_MASTER", 1)):
            print(latency(root, role, slaves, args), flush=True)
        print(replication_lag(root, args), flush=True)
        print(f"load after: {load()}", flush=True)
    except BenchError as e:
        print(f"bench failed: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
