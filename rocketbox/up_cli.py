"""``rocketbox up``: rocketbox's embedded default on one machine, a broker and a sidecar in one
process (or, with --broker-groups or --slaves, a local cluster of processes), for development.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from broker.config import BrokerConfig, BrokerRole
from broker.store.config import FlushDiskType
from rocketbox.broker_cli import broker_addresses, run_broker
from rocketbox.run_settings import run_async
from rocketbox.sidecar_cli import listen_endpoint, optional_listen
from rocketbox.sidecar_security_options import AppSecurity, app_security_options
from rocketbox.start_checks import (
    UP_BROKER_LISTEN_OPTIONS,
    refuse_locked,
    refuse_outbox_locked,
    refuse_taken,
)
from rocketbox.store_geometry import (
    FIELDS,
    ROCKETMQ_STORE_GEOMETRY,
    StoreGeometry,
    sizes_on_disk,
    store_geometry_options,
)
from rocketbox.up_cluster import (
    UP_BROKER_GROUPS_MAX,
    UP_SLAVES_MAX,
    run_up_cluster,
    up_cluster_plan,
)
from rocketbox.up_layout import UP_ACK_LEDGER_NAME, up_ack_ledger, up_broker_dir, up_outbox_dir
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import ProducerConfig

# Listen addresses meaning "every address": the sidecar of `up` reaches such a broker on loopback.
ANY_ADDRESS = ("0.0.0.0", "::")  # noqa: S104 - compared with, not bound
# `rocketbox up`'s store files: a developer's default, on a laptop's disk. Each file is written in
# full when it is created, so RocketMQ's sizes held gigabytes for a few MB of messages (two 1 GiB
# commitlog segments, a 400 MiB index file, 47 MiB per topic). 64 MiB segments still hold 16 of
# the largest (4 MiB) messages and about 60,000 of 1 KiB, and retention, which deletes whole
# segments, frees disk sooner; an index file of 400,000 entries (8 MiB, RocketMQ's 1:4 ratio of
# slots to entries) covers about 200,000 messages before the next; 30,000 entries a consume
# queue file (586 KiB) make a topic of 8 queues cost under 5 MiB. `rocketbox broker`, the
# production command, keeps RocketMQ's sizes.
UP_STORE_GEOMETRY = StoreGeometry(
    segment_size_mib=64,
    hash_slot_num=100_000,
    index_num_max=400_000,
    consume_queue_file_entries=30_000,
)
# `rocketbox up`'s RocketMQ front, on by default so that an app already written against an
# official RocketMQ 5 SDK can point its endpoint here in its first hour. Not RocketMQ's proxy
# port 8081 (the broker's here) nor 8080/8980 (the sidecar's): the next free one after them.
UP_ROCKETMQ_LISTEN = "127.0.0.1:8982"
# `rocketbox up --profile`: where the embedded default keeps its outbox.
UP_PROFILES = {
    "rocksdb": "rocksdb://{outbox_dir}",
    "redis": "redis://127.0.0.1:6379/0?prefix=rocketbox:outbox",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/test?table=rocketbox_outbox",
}


@click.command(short_help="Run a broker and a sidecar in one process, for development.")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("data"))
@click.option(
    "--broker-listen",
    default="127.0.0.1:8081",
    callback=listen_endpoint,
    metavar="HOST:PORT",
    help="Where the broker listens (port 0: a free port).",
)
@click.option(
    "--flush",
    "flush_disk_type",
    type=click.Choice([t.value for t in FlushDiskType]),
    default=FlushDiskType.ASYNC_FLUSH.value,
    help="ASYNC_FLUSH: fsync periodically; SYNC_FLUSH: answer sends after their fsync.",
)
@store_geometry_options(UP_STORE_GEOMETRY)
@click.option("--file-reserved-hours", default=72.0, type=click.FloatRange(min=0.01))
@click.option(
    "--sidecar-listen",
    default="127.0.0.1:8980",
    callback=listen_endpoint,
    metavar="HOST:PORT",
    help="Where apps connect to the sidecar (port 0: a free port).",
)
@click.option(
    "--profile",
    type=click.Choice(sorted(UP_PROFILES)),
    default="rocksdb",
    help="The outbox: RocksDB under DATA_DIR/outbox, or this machine's Redis or MySQL.",
)
@click.option("--outbox", "outbox_url", default=None, metavar="URL", help="Overrides --profile.")
@click.option(
    "--metrics-listen",
    default="127.0.0.1:9108",
    callback=optional_listen,
    metavar="HOST:PORT",
    help="Serve the broker's and the sidecar's Prometheus metrics here (port 0: a free "
    "port; empty: off).",
)
@click.option(
    "--rocketmq-listen",
    default=UP_ROCKETMQ_LISTEN,
    callback=optional_listen,
    metavar="HOST:PORT",
    help="The sidecar's RocketMQ front (apache.rocketmq.v2): an app on an official RocketMQ 5 "
    "SDK sets its endpoint here and sends through the outbox unchanged (port 0: a free port; "
    "empty or off: off).",
)
@click.option(
    "--ack-ledger",
    "ack_ledger",
    default=None,
    metavar="PATH",
    show_default=f"DATA_DIR/{UP_ACK_LEDGER_NAME}",
    help="The sidecar's acknowledgement ledger (the answers sent to apps), read by "
    "`rocketbox reconcile --acks`; empty: none.",
)
@click.option(
    "--broker-groups",
    default=1,
    type=click.IntRange(1, UP_BROKER_GROUPS_MAX),
    help="Broker groups (broker-a, broker-b, ...): more than one, or --slaves, starts a local "
    "cluster of processes with a NameServer.",
)
@click.option(
    "--slaves",
    default=0,
    type=click.IntRange(0, UP_SLAVES_MAX),
    help="Slaves per broker group, each replicating its master (HA).",
)
@click.option(
    "--master-role",
    type=click.Choice([BrokerRole.ASYNC_MASTER.value, BrokerRole.SYNC_MASTER.value]),
    default=BrokerRole.ASYNC_MASTER.value,
    help="A cluster's masters: SYNC_MASTER answers a send once a slave holds it too.",
)
@click.option(
    "--namesrv-listen",
    default="127.0.0.1:9876",
    callback=listen_endpoint,
    metavar="HOST:PORT",
    help="Where a local cluster's NameServer listens (port 0: a free port).",
)
@app_security_options(health=False)
def up(
    data_dir: Path,
    broker_listen: Endpoint,
    flush_disk_type: str,
    segment_size_mib: int,
    hash_slot_num: int,
    index_num_max: int,
    consume_queue_file_entries: int,
    file_reserved_hours: float,
    sidecar_listen: Endpoint,
    profile: str,
    outbox_url: str | None,
    metrics_listen: Endpoint | None,
    rocketmq_listen: Endpoint | None,
    ack_ledger: str | None,
    broker_groups: int,
    slaves: int,
    master_role: str,
    namesrv_listen: Endpoint,
    app_security: AppSecurity,
) -> None:
    """Run rocketbox's embedded default on this machine, data under DATA_DIR: the broker
    (apache.rocketmq.v2 on --broker-listen, topics created on first use, 64 MiB commitlog
    segments) and the sidecar (rocketbox.v1 on --sidecar-listen, apache.rocketmq.v2 for apps on
    an official RocketMQ 5 SDK on --rocketmq-listen) with its outbox and its ack ledger, until
    SIGINT/SIGTERM. With --broker-groups or --slaves: a local cluster instead
    (a NameServer and a process per broker, stores under DATA_DIR/brokers)."""
    ctx = click.get_current_context()
    url = outbox_url or UP_PROFILES[profile].format(outbox_dir=up_outbox_dir(data_dir))
    ledger = up_ack_ledger(data_dir) if ack_ledger is None else ack_ledger
    ledger_path = Path(ledger).resolve() if ledger else None
    if broker_groups > 1 or slaves > 0:
        if app_security != AppSecurity():
            raise click.UsageError(
                "--tls-cert, a token and the front's credentials are not offered with a local "
                "cluster"
            )
        refuse_outbox_locked(url, "--outbox" if outbox_url else "--data-dir")
        run_async(run_up_cluster(up_cluster_plan(ctx), url, ledger_path))
        return
    config, geometry, kept = up_broker_config(ctx)
    refuse_locked(config.store.lock_file_path, "--data-dir")
    refuse_outbox_locked(url, "--outbox" if outbox_url else "--data-dir")
    _refuse_taken_addresses(config, sidecar_listen, rocketmq_listen)

    # A broker listening on every address is reached on loopback; otherwise where it listens.
    broker_host = "127.0.0.1" if broker_listen.host in ANY_ADDRESS else broker_listen.host

    def sidecar_config(broker_port: int) -> SidecarConfig:
        return SidecarConfig(
            producer=ProducerConfig(access_points=(Endpoint(broker_host, broker_port),)),
            outbox_url=url,
            listen_host=sidecar_listen.host,
            listen_port=sidecar_listen.port,
            rocketmq_listen_host=rocketmq_listen.host if rocketmq_listen else None,
            rocketmq_listen_port=rocketmq_listen.port if rocketmq_listen else 0,
            # The broker's metrics endpoint serves the sidecar's registry: keep its gauges fresh.
            outbox_stats_enable=metrics_listen is not None,
            ack_ledger_path=ledger_path,
            **app_security.config_fields(),
        )

    def banner(c: SidecarConfig) -> list[str]:
        return up_banner(data_dir, geometry, kept, c)

    run_async(run_broker(config, [], [], sidecar_config, banner))


def _refuse_taken_addresses(
    config: BrokerConfig, sidecar_listen: Endpoint, rocketmq_listen: Endpoint | None
) -> None:
    """Refuse to start when any address ``up`` would listen on is taken, naming its option."""
    addresses = [
        *broker_addresses(config, UP_BROKER_LISTEN_OPTIONS),
        ("--sidecar-listen", sidecar_listen.host, sidecar_listen.port),
    ]
    if rocketmq_listen is not None:
        addresses.append(("--rocketmq-listen", rocketmq_listen.host, rocketmq_listen.port))
    refuse_taken(addresses)


def up_broker_config(ctx: click.Context) -> tuple[BrokerConfig, StoreGeometry, list[str]]:
    """The single broker of ``up``, its store's geometry, and the sizes kept from an earlier
    run's store (``sizes_on_disk``)."""
    p = ctx.params
    store_dir = up_broker_dir(p["data_dir"])
    geometry, kept = sizes_on_disk(
        store_dir,
        StoreGeometry(
            p["segment_size_mib"],
            p["hash_slot_num"],
            p["index_num_max"],
            p["consume_queue_file_entries"],
        ),
        {n for n in FIELDS if ctx.get_parameter_source(n) is ParameterSource.DEFAULT},
    )
    store_config = geometry.store_config(
        store_dir,
        flush_disk_type=FlushDiskType(p["flush_disk_type"]),
        file_reserved_hours=p["file_reserved_hours"],
    )
    broker_listen, metrics_listen = p["broker_listen"], p["metrics_listen"]
    # A developer's default: topics appear on first use, as RocketMQ's own default does.
    config = BrokerConfig(
        store=store_config,
        listen_host=broker_listen.host,
        listen_port=broker_listen.port,
        auto_create_topic_enable=True,
        metrics_host=metrics_listen.host if metrics_listen else None,
        metrics_port=metrics_listen.port if metrics_listen else 0,
    )
    return config, geometry, kept


def up_banner(
    data_dir: Path, geometry: StoreGeometry, kept: list[str], c: SidecarConfig
) -> list[str]:
    """What ``up`` keeps where, and the option that changes each."""
    rocketmq = ROCKETMQ_STORE_GEOMETRY.segment_size_mib
    lines = [
        f"data under {data_dir.resolve()}: commitlog segments of {geometry.segment_size_mib} "
        f"MiB (--segment-size-mib; `rocketbox broker` keeps RocketMQ's {rocketmq}; --help "
        "lists the other file sizes)"
    ]
    if kept:
        lines.append(
            "kept RocketMQ's sizes an earlier run wrote this store with: "
            + ", ".join(f"--{name.replace('_', '-')}" for name in kept)
        )
    if c.ack_ledger_path is not None:
        lines.append(
            f"ack ledger {c.ack_ledger_path} (--ack-ledger): for rocketbox reconcile --acks"
        )
    return lines
