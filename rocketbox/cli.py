"""The ``rocketbox`` command line: the only composition root that imports every package.

Configuration is built here, once, from options (each also read from an environment variable,
named by envvars.py's rule) and passed down frozen.
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
from rocketbox.envvars import RocketboxGroup
from rocketbox.event_loop import EVENT_LOOP_DEFAULT, EVENT_LOOPS
from rocketbox.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from rocketbox.outbox_cli import outbox_group
from rocketbox.reconcile_cli import reconcile_command
from rocketbox.run_settings import RunSettings, run_async
from rocketbox.sidecar_cli import listen_endpoint, optional_listen, sidecar_command
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import ProducerConfig

# Listen addresses meaning "every address": the sidecar of `up` reaches such a broker on loopback.
ANY_ADDRESS = ("0.0.0.0", "::")  # noqa: S104 - compared with, not bound
# `rocketbox up --profile`: where the embedded default keeps its outbox.
UP_PROFILES = {
    "rocksdb": "rocksdb://{outbox_dir}",
    "redis": "redis://127.0.0.1:6379/0?prefix=rocketbox:outbox",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/test?table=rocketbox_outbox",
}


# `rocketbox --help`'s last lines: shell completion is click's, undocumented otherwise.
EPILOG = """\b
Shell completion (bash; zsh and fish alike, with zsh_source or fish_source):
  eval "$(_ROCKETBOX_COMPLETE=bash_source rocketbox)"
"""


@click.group(cls=RocketboxGroup, context_settings={"show_default": True}, epilog=EPILOG)
@click.version_option(package_name="rocketbox", message="rocketbox %(version)s")
@click.option("--log-level", default="INFO", type=click.Choice(LOG_LEVELS))
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


@main.command(short_help="Run a broker and a sidecar in one process, for development.")
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
@store_geometry_options
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
def up(
    data_dir: Path,
    broker_listen: Endpoint,
    flush_disk_type: str,
    segment_size_mib: int,
    hash_slot_num: int,
    index_num_max: int,
    file_reserved_hours: float,
    sidecar_listen: Endpoint,
    profile: str,
    outbox_url: str | None,
    metrics_listen: Endpoint | None,
) -> None:
    """Run rocketbox's embedded default on this machine, data under DATA_DIR: the broker
    (apache.rocketmq.v2 on --broker-listen, topics created on first use) and the sidecar
    (rocketbox.v1 on --sidecar-listen) with its outbox, until SIGINT/SIGTERM."""
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
        listen_host=broker_listen.host,
        listen_port=broker_listen.port,
        auto_create_topic_enable=True,
        metrics_host=metrics_listen.host if metrics_listen else None,
        metrics_port=metrics_listen.port if metrics_listen else 0,
    )
    url = outbox_url or UP_PROFILES[profile].format(outbox_dir=(data_dir / "outbox").resolve())

    # A broker listening on every address is reached on loopback; otherwise where it listens.
    broker_host = "127.0.0.1" if broker_listen.host in ANY_ADDRESS else broker_listen.host

    def sidecar_config(broker_port: int) -> SidecarConfig:
        return SidecarConfig(
            producer=ProducerConfig(access_points=(Endpoint(broker_host, broker_port),)),
            outbox_url=url,
            listen_host=sidecar_listen.host,
            listen_port=sidecar_listen.port,
        )

    run_async(run_broker(config, [], [], sidecar_config))


for command in (broker, sidecar_command, reconcile_command, outbox_group, topic, message, group):
    main.add_command(command)
main.add_command(flow_control)
