"""The ``rocketbox`` command line: the only composition root that imports every package.

Configuration is built here, once, from options (each also read from an environment variable,
``ROCKETBOX_<COMMAND>_<PARAMETER>`` after the option's parameter name) and passed down frozen.
The root holds the global options and ``rocketbox up``; each other command lives with its
concern: broker_cli.py (the broker), broker_admin_cli.py (its admin commands), sidecar_cli.py,
outbox_cli.py, reconcile_cli.py.
"""

from __future__ import annotations

from pathlib import Path

import click

from broker.config import BrokerConfig
from broker.store.config import FlushDiskType, MessageStoreConfig
from rocketbox.broker_admin_cli import flow_control, group, message, topic
from rocketbox.broker_cli import broker, run_broker, store_geometry_options
from rocketbox.consume_cli import consume_command
from rocketbox.event_loop import EVENT_LOOP_DEFAULT, EVENT_LOOPS
from rocketbox.logs import LOG_FORMATS, configure_logging
from rocketbox.outbox_cli import outbox_group
from rocketbox.reconcile_cli import reconcile_command
from rocketbox.run_settings import RunSettings, run_async
from rocketbox.send_cli import send_command
from rocketbox.sidecar_cli import optional_listen, sidecar_command
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import ProducerConfig

# `rocketbox up --profile`: where the embedded default keeps its outbox.
UP_PROFILES = {
    "rocksdb": "rocksdb://{outbox_dir}",
    "redis": "redis://127.0.0.1:6379/0?prefix=rocketbox:outbox",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/test?table=rocketbox_outbox",
}


@click.group(context_settings={"auto_envvar_prefix": "ROCKETBOX", "show_default": True})
@click.option("--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING"]))
@click.option(
    "--log-format",
    default="text",
    type=click.Choice(LOG_FORMATS),
    help="json: one object per line, with message_id and topic on lines about a message.",
)
@click.option(
    "--event-loop",
    default=EVENT_LOOP_DEFAULT,
    type=click.Choice(EVENT_LOOPS),
    help="The servers' asyncio loop: uvloop (libuv, cheaper per call) or the standard one.",
)
@click.pass_context
def main(ctx: click.Context, log_level: str, log_format: str, event_loop: str) -> None:
    """rocketbox: a reliable-producer sidecar with a durable retry outbox, and its broker."""
    configure_logging(log_level, log_format)
    ctx.obj = RunSettings(event_loop=event_loop)


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("data"))
@click.option("--listen-port", default=8081, type=click.IntRange(0, 65535), help="0: a free port.")
@click.option(
    "--flush",
    "flush_disk_type",
    type=click.Choice([t.value for t in FlushDiskType]),
    default=FlushDiskType.ASYNC_FLUSH.value,
    help="ASYNC_FLUSH: fsync periodically; SYNC_FLUSH: answer sends after their fsync.",
)
@store_geometry_options
@click.option("--file-reserved-hours", default=72.0, type=click.FloatRange(min=0.01))
@click.option("--sidecar-port", default=8980, type=click.IntRange(0, 65535), help="0: a free port.")
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
def up(
    data_dir: Path,
    listen_port: int,
    flush_disk_type: str,
    segment_size_mib: int,
    hash_slot_num: int,
    index_num_max: int,
    file_reserved_hours: float,
    sidecar_port: int,
    profile: str,
    outbox_url: str | None,
    metrics_listen: Endpoint | None,
) -> None:
    """Run rocketbox's embedded default on this machine, data under DATA_DIR: the broker
    (apache.rocketmq.v2 on 127.0.0.1:8081, topics created on first use) and the sidecar
    (rocketbox.v1 on 127.0.0.1:8980) with its outbox, until SIGINT/SIGTERM."""
    store_config = MessageStoreConfig(
        store_path_root_dir=(data_dir / "broker").resolve(),
        mapped_file_size_commit_log_bytes=segment_size_mib * 1024 * 1024,
        hash_slot_num=hash_slot_num,
        index_num_max=index_num_max,
        flush_disk_type=FlushDiskType(flush_disk_type),
        file_reserved_hours=file_reserved_hours,
    )
    # A developer's default: topics appear on first use, as RocketMQ's own default does.
    config = BrokerConfig(
        store=store_config,
        listen_port=listen_port,
        auto_create_topic_enable=True,
        metrics_host=metrics_listen.host if metrics_listen else None,
        metrics_port=metrics_listen.port if metrics_listen else 0,
    )
    url = outbox_url or UP_PROFILES[profile].format(outbox_dir=(data_dir / "outbox").resolve())

    def sidecar_config(broker_port: int) -> SidecarConfig:
        return SidecarConfig(
            producer=ProducerConfig(access_points=(Endpoint("127.0.0.1", broker_port),)),
            outbox_url=url,
            listen_port=sidecar_port,
        )

    run_async(run_broker(config, [], [], sidecar_config))


for command in (broker, sidecar_command, send_command, consume_command, reconcile_command):
    main.add_command(command)
for command in (outbox_group, topic, message, group):
    main.add_command(command)
main.add_command(flow_control)
