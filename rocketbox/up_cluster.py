"""``rocketbox up --broker-groups N --slaves M``: a local cluster under one data directory.

A NameServer, N broker groups of one master and M slaves each, and the sidecar in front of the
masters. The NameServer and the brokers are child processes (child_process.py), as on real
machines, so that one can be killed and the rest carry on; the sidecar runs in this process as
in the single-broker ``up``. Broker groups are named broker-a, broker-b, ...; a broker's store is
``DATA_DIR/brokers/<group>-<broker id>`` (up_layout.py). The first master listens on
--broker-listen, every other broker on a free port: clients need one access point, the routes
name the rest.

Stopping: the sidecar first (its last sends still land), then the slaves, the masters and the
NameServer, each with SIGTERM. A broker that dies meanwhile is reported and left dead: the
cluster runs on without it, which is what a local cluster is for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from broker.config import MASTER_ID, BrokerRole
from rocketbox.child_process import ChildProcess, ChildStartError
from rocketbox.sidecar_cli import readiness_note, start_sidecar, stop_sidecar
from rocketbox.start_checks import UP_SIDECAR_LISTEN_OPTIONS, refuse_taken
from rocketbox.up_layout import up_cluster_broker_dir
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import ProducerConfig

LOG = logging.getLogger("rocketbox")

# Groups are named by a letter, as RocketMQ's examples name them (broker-a, broker-b).
UP_BROKER_GROUPS_MAX = len(string.ascii_lowercase)
UP_SLAVES_MAX = 3
NAMESRV_READY_LINE = re.compile(r"namesrv listening on \S+:(\d+)")
BROKER_READY_LINE = re.compile(r"broker listening on \S+:(\d+)")
BROKER_METRICS_LINE = re.compile(r"^metrics on (http://\S+/metrics)")


def group_names(broker_groups: int) -> list[str]:
    return [f"broker-{letter}" for letter in string.ascii_lowercase[:broker_groups]]


@dataclass(frozen=True, slots=True)
class UpCluster:
    """What to start. ``broker_args``: the store and broker options every broker gets."""

    data_dir: Path
    broker_groups: int
    slaves: int
    master_role: BrokerRole
    namesrv_listen: Endpoint
    broker_listen: Endpoint
    sidecar_listen: Endpoint
    metrics_listen: Endpoint | None  # the sidecar's; each broker serves its own on a free port
    rocketmq_listen: Endpoint | None  # the sidecar's RocketMQ front
    broker_args: tuple[str, ...]
    root_args: tuple[str, ...]  # the parent's --log-level and --log-format, for every child

    def namesrv_command(self) -> list[str]:
        listen = f"{self.namesrv_listen.host}:{self.namesrv_listen.port}"
        return [*self.root_args, "namesrv", "--listen", listen]

    def broker_command(self, group: str, broker_id: int, namesrv: str) -> list[str]:
        """One broker's arguments; the group's first master takes --broker-listen."""
        first = group == group_names(1)[0] and broker_id == MASTER_ID
        host = self.broker_listen.host
        listen = f"{host}:{self.broker_listen.port if first else 0}"
        role = self.master_role if broker_id == MASTER_ID else BrokerRole.SLAVE
        args = [
            "broker",
            "--data-dir",
            str(up_cluster_broker_dir(self.data_dir, group, broker_id)),
            "--listen",
            listen,
            "--broker-name",
            group,
            "--broker-id",
            str(broker_id),
            "--broker-role",
            role.value,
            "--namesrv",
            namesrv,
            *self.broker_args,
        ]
        if role is not BrokerRole.SLAVE:
            # The slaves learn this address from the NameServer's answer to their registration.
            args += ["--ha-listen", f"{host}:0", "--auto-create-topic"]
        if self.metrics_listen is not None:
            args += ["--metrics-listen", f"{host}:0"]
        return [*self.root_args, *args]


@dataclass(slots=True)
class RunningCluster:
    namesrv: ChildProcess
    namesrv_address: str
    masters: list[tuple[ChildProcess, Endpoint]]
    slaves: list[ChildProcess]

    def children(self) -> list[ChildProcess]:
        return [self.namesrv, *(child for child, _ in self.masters), *self.slaves]

    async def stop(self) -> None:
        """Slaves, then masters, then the NameServer (reverse start order)."""
        for child in reversed(self.children()):
            code = await child.stop()
            if code != 0:
                LOG.warning("%s exited %s", child.name, code)


async def start_cluster(plan: UpCluster) -> RunningCluster:
    """The NameServer, then every master (which registers at once), then the slaves. On a
    failure, what started is stopped and the failure raised."""
    started: list[ChildProcess] = []

    async def start(name: str, args: Sequence[str], ready: re.Pattern[str]) -> int:
        child = ChildProcess(name, args, ready)
        started.append(child)
        return int((await child.start()).group(1))

    try:
        host = plan.namesrv_listen.host
        namesrv_port = await start("namesrv", plan.namesrv_command(), NAMESRV_READY_LINE)
        namesrv = f"{_dial_host(host)}:{namesrv_port}"
        masters: list[tuple[ChildProcess, Endpoint]] = []
        for group in group_names(plan.broker_groups):
            port = await start(
                f"{group}-0", plan.broker_command(group, MASTER_ID, namesrv), BROKER_READY_LINE
            )
            masters.append((started[-1], Endpoint(_dial_host(plan.broker_listen.host), port)))
        for group in group_names(plan.broker_groups):
            for broker_id in range(1, plan.slaves + 1):
                command = plan.broker_command(group, broker_id, namesrv)
                await start(f"{group}-{broker_id}", command, BROKER_READY_LINE)
    except BaseException:
        for child in reversed(started):
            if child.returncode is None:
                await child.stop()
        raise
    return RunningCluster(started[0], namesrv, masters, started[1 + len(masters) :])


def _dial_host(host: str) -> str:
    """A server listening on every address is dialled on loopback."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 - compared, not bound


def cluster_sidecar_config(
    plan: UpCluster, masters: list[Endpoint], outbox_url: str, ack_ledger_path: Path | None
) -> SidecarConfig:
    """The sidecar of a local cluster: every master an access point; it serves its own metrics
    (each broker serves its own on a free port), and the RocketMQ front."""
    metrics_listen, front = plan.metrics_listen, plan.rocketmq_listen
    return SidecarConfig(
        producer=ProducerConfig(access_points=tuple(masters)),
        outbox_url=outbox_url,
        listen_host=plan.sidecar_listen.host,
        listen_port=plan.sidecar_listen.port,
        metrics_host=metrics_listen.host if metrics_listen else None,
        metrics_port=metrics_listen.port if metrics_listen else 0,
        rocketmq_listen_host=front.host if front else None,
        rocketmq_listen_port=front.port if front else 0,
        ack_ledger_path=ack_ledger_path,
    )


async def run_up_cluster(plan: UpCluster, outbox_url: str, ack_ledger_path: Path | None) -> None:
    """Start the cluster and the sidecar, print where each is, serve until SIGINT/SIGTERM."""
    sidecar_listen, metrics_listen = plan.sidecar_listen, plan.metrics_listen
    refuse_taken(cluster_addresses(plan, sidecar_listen, metrics_listen))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        cluster = await start_cluster(plan)
    except ChildStartError as e:
        raise click.ClickException(str(e)) from e
    watchers: list[asyncio.Task[None]] = []
    try:
        masters = [endpoint for _, endpoint in cluster.masters]
        sidecar = await start_sidecar(
            cluster_sidecar_config(plan, masters, outbox_url, ack_ledger_path),
            UP_SIDECAR_LISTEN_OPTIONS,
        )
        try:
            for line in cluster_banner(plan, cluster):
                click.echo(line)
            c = sidecar.config
            click.echo(
                f"sidecar listening on {c.listen_host}:{sidecar.port} (apps send here: "
                f"rocketbox.v1.SidecarService){readiness_note(sidecar)}"
            )
            click.echo("cluster up; Ctrl-C stops it cleanly")
            watchers = [asyncio.create_task(_report_exit(child)) for child in cluster.children()]
            await stop.wait()
        finally:
            LOG.info("stopping the sidecar")
            await stop_sidecar(sidecar)
    finally:
        for watcher in watchers:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        LOG.info("stopping the cluster")
        await cluster.stop()
    click.echo("rocketbox stopped cleanly")


async def _report_exit(child: ChildProcess) -> None:
    code = await child.wait()
    if not child.stopping:
        LOG.warning(
            "%s (pid %s) exited %s; the cluster runs on without it", child.name, child.pid, code
        )


def cluster_banner(plan: UpCluster, cluster: RunningCluster) -> list[str]:
    lines = [f"namesrv listening on {cluster.namesrv_address} (--namesrv-listen)"]
    for child, endpoint in cluster.masters:
        lines.append(f"{child.name}: {plan.master_role.value} on {endpoint}, pid {child.pid}")
    for child in cluster.slaves:
        lines.append(f"{child.name}: SLAVE, pid {child.pid}")
    lines.append(
        f"stores under {(plan.data_dir / 'brokers').resolve()}; "
        f"`rocketbox cluster list --namesrv {cluster.namesrv_address}` shows roles and lag"
    )
    return lines


def up_cluster_plan(ctx: click.Context) -> UpCluster:
    """The cluster ``up``'s options ask for."""
    p = ctx.params
    return UpCluster(
        data_dir=p["data_dir"],
        broker_groups=p["broker_groups"],
        slaves=p["slaves"],
        master_role=BrokerRole(p["master_role"]),
        namesrv_listen=p["namesrv_listen"],
        broker_listen=p["broker_listen"],
        sidecar_listen=p["sidecar_listen"],
        metrics_listen=p["metrics_listen"],
        rocketmq_listen=p["rocketmq_listen"],
        broker_args=cluster_broker_args(ctx),
        root_args=root_args(ctx),
    )


def cluster_broker_args(ctx: click.Context) -> tuple[str, ...]:
    """The store options ``up`` was given, for every broker of the cluster."""
    p = ctx.params
    return (
        "--flush",
        p["flush_disk_type"],
        "--segment-size-mib",
        str(p["segment_size_mib"]),
        "--hash-slot-num",
        str(p["hash_slot_num"]),
        "--index-num-max",
        str(p["index_num_max"]),
        "--consume-queue-file-entries",
        str(p["consume_queue_file_entries"]),
        "--file-reserved-hours",
        str(p["file_reserved_hours"]),
    )


def root_args(ctx: click.Context) -> tuple[str, ...]:
    """The global options ``rocketbox`` was given, so each child logs and loops alike."""
    p = ctx.find_root().params
    return (
        "--log-level",
        p["log_level"],
        "--log-format",
        p["log_format"],
        "--event-loop",
        p["event_loop"],
    )


def cluster_addresses(
    plan: UpCluster, sidecar_listen: Endpoint, metrics_listen: Endpoint | None
) -> list[tuple[str, str, int]]:
    """The fixed listen addresses, by option, for ``refuse_taken`` (the rest take free ports)."""
    addresses = [
        ("--namesrv-listen", plan.namesrv_listen.host, plan.namesrv_listen.port),
        ("--broker-listen", plan.broker_listen.host, plan.broker_listen.port),
        ("--sidecar-listen", sidecar_listen.host, sidecar_listen.port),
    ]
    if metrics_listen is not None:
        addresses.append(("--metrics-listen", metrics_listen.host, metrics_listen.port))
    if plan.rocketmq_listen is not None:
        front = plan.rocketmq_listen
        addresses.append(("--rocketmq-listen", front.host, front.port))
    return addresses
