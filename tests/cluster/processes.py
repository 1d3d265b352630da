"""A real cluster for integration tests: one ``rocketbox namesrv`` and broker groups of real
``rocketbox broker`` processes registered with it, with short intervals.

``running_cluster`` starts the NameServer, then each group's master (``broker-a``, ``broker-b``,
...: broker id 0, ASYNC_MASTER) and its slaves (ids 1.., SLAVE), each over its own store under
``root/brokers/<broker-name>-<broker-id>`` (``rocketbox up``'s layout), and stops them all when
the block ends, whatever raised inside. Every listener is on port 0; the ports come from the
processes' ready lines. ``restart`` brings a process back on the ports it bound first.

Intervals are short, so that a test waits on a condition for a second or two, not minutes:
brokers register every REGISTER_INTERVAL_MS, the NameServer scans every SCAN_INTERVAL_MS and
drops a broker silent for EXPIRY_MS.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from chaos.processes import BROKER_METRICS_LINE, BrokerProcess, RocketboxProcess
from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb
from rocketbox_api.namesrv.v1 import namesrv_pb2_grpc

NAMESRV_READY_LINE = re.compile(r"namesrv listening on [^\s]+:(\d+)")
REGISTER_INTERVAL_MS = 200
SCAN_INTERVAL_MS = 100
EXPIRY_MS = 1_500
CALL_DEADLINE_S = 5.0


class NamesrvProcess(RocketboxProcess):
    """``rocketbox namesrv`` with short scan and expiry; ``metrics``: on a free port
    (``metrics_port``); ``extra_args`` come last."""

    def __init__(
        self,
        expiry_ms: int = EXPIRY_MS,
        scan_interval_ms: int = SCAN_INTERVAL_MS,
        extra_args: Sequence[str] = (),
        *,
        metrics: bool = False,
    ) -> None:
        self.expiry_ms = expiry_ms
        self.scan_interval_ms = scan_interval_ms
        self.extra_args = tuple(extra_args)
        self.metrics = metrics
        metrics_line = BROKER_METRICS_LINE if metrics else None  # the same "metrics on" line
        super().__init__("namesrv", NAMESRV_READY_LINE, metrics_line=metrics_line)

    def command_args(self, port: int, metrics_port: int) -> list[str]:
        metrics = ["--metrics-listen", f"127.0.0.1:{metrics_port}"] if self.metrics else []
        return [
            "namesrv", "--listen", f"127.0.0.1:{port}", *metrics,
            f"--scan-not-active-broker-interval-ms={self.scan_interval_ms}",
            f"--broker-channel-expired-time-ms={self.expiry_ms}",
            *self.extra_args,
        ]  # fmt: skip

    def cluster_info(self) -> npb.GetBrokerClusterInfoResponse:
        with grpc.insecure_channel(self.endpoint) as channel:
            answer: npb.GetBrokerClusterInfoResponse = namesrv_pb2_grpc.NameServerServiceStub(
                channel
            ).GetBrokerClusterInfo(npb.GetBrokerClusterInfoRequest(), timeout=CALL_DEADLINE_S)
        return answer

    def route(self, topic: str) -> npb.GetRouteInfoByTopicResponse | None:
        """The topic's route; None when the NameServer answers NOT_FOUND."""
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = namesrv_pb2_grpc.NameServerServiceStub(channel)
            try:
                answer: npb.GetRouteInfoByTopicResponse = stub.GetRouteInfoByTopic(
                    npb.GetRouteInfoByTopicRequest(topic=topic), timeout=CALL_DEADLINE_S
                )
            except grpc.RpcError as e:
                if e.code() is grpc.StatusCode.NOT_FOUND:
                    return None
                raise
        return answer

    def live_brokers(self) -> set[tuple[str, int]]:
        """(broker name, broker id) of every live broker."""
        return {(b.broker_name, b.broker_id) for b in self.cluster_info().brokers}


@dataclass
class ClusterBroker:
    broker_name: str
    broker_id: int
    data_dir: Path
    process: BrokerProcess

    @property
    def endpoint(self) -> str:
        return self.process.endpoint


@dataclass
class Cluster:
    namesrv: NamesrvProcess
    brokers: list[ClusterBroker] = field(default_factory=list)

    def broker(self, broker_name: str, broker_id: int = 0) -> ClusterBroker:
        return next(
            b for b in self.brokers if (b.broker_name, b.broker_id) == (broker_name, broker_id)
        )

    @property
    def masters(self) -> list[ClusterBroker]:
        return [b for b in self.brokers if b.broker_id == 0]


def group_name(index: int) -> str:
    return f"broker-{chr(ord('a') + index)}"


def cluster_broker(
    root: Path,
    namesrv: NamesrvProcess,
    broker_name: str,
    broker_id: int,
    extra_args: Sequence[str] = (),
    register_interval_ms: int = REGISTER_INTERVAL_MS,
) -> ClusterBroker:
    """A broker of the cluster, not yet started (``process.start()``)."""
    data_dir = root / "brokers" / f"{broker_name}-{broker_id}"
    role = "ASYNC_MASTER" if broker_id == 0 else "SLAVE"
    args = [
        "--namesrv", namesrv.endpoint, "--broker-name", broker_name,
        f"--broker-id={broker_id}", "--broker-role", role,
        f"--register-broker-interval-ms={register_interval_ms}", *extra_args,
    ]  # fmt: skip
    return ClusterBroker(
        broker_name, broker_id, data_dir, BrokerProcess(data_dir, "ASYNC_FLUSH", args)
    )


@contextlib.contextmanager
def running_cluster(
    root: Path,
    groups: int = 2,
    slaves: int = 0,
    master_args: Sequence[str] = (),
    slave_args: Sequence[str] = (),
    namesrv: NamesrvProcess | None = None,
    register_interval_ms: int = REGISTER_INTERVAL_MS,
) -> Iterator[Cluster]:
    """A NameServer and ``groups`` groups of a master and ``slaves`` slaves each, all running;
    stopped (SIGTERM, then SIGKILL after a deadline) when the block ends. ``master_args`` and
    ``slave_args`` come last on their brokers' command lines, so they override (a
    ``--broker-role SYNC_MASTER``, an ``--ha-listen 127.0.0.1:0``)."""
    cluster = Cluster(namesrv or NamesrvProcess())
    with contextlib.ExitStack() as stack:
        stack.enter_context(cluster.namesrv)
        for g in range(groups):
            for broker_id in range(slaves + 1):
                args = master_args if broker_id == 0 else slave_args
                b = cluster_broker(
                    root, cluster.namesrv, group_name(g), broker_id, args, register_interval_ms
                )
                cluster.brokers.append(b)
                stack.enter_context(b.process)
        yield cluster
