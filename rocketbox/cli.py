"""The ``rocketbox`` command line: the only composition root that imports every package.

Configuration is built here, once, from options (each also read from an environment variable,
``ROCKETBOX_<COMMAND>_<PARAMETER>`` after the option's parameter name) and passed down frozen.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from broker.broker_controller import BrokerController
from broker.config import BrokerConfig
from broker.errors import BrokerError
from broker.group_config import RETRY_MAX_TIMES_DEFAULT
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.errors import StoreError
from broker.topic_config import TopicMessageType
from outbox.factory import redact
from rocketbox import admin_client as admin
from rocketbox.event_loop import EVENT_LOOP_DEFAULT, EVENT_LOOPS
from rocketbox.logs import LOG_FORMATS, configure_logging
from rocketbox.outbox_cli import outbox_group
from rocketbox.reconcile_cli import reconcile_command
from rocketbox.run_settings import RunSettings, run_async
from rocketbox.sidecar_cli import optional_listen, sidecar_command, start_sidecar
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import ProducerConfig

LOG = logging.getLogger("rocketbox")
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


def store_geometry_options(command: Callable[..., None]) -> Callable[..., None]:
    """File sizes of the store. RocketMQ's defaults reserve about 1.4 GiB of disk up front
    (a 1 GiB commitlog segment and a 420 MiB index file); small machines and tests shrink them."""
    command = click.option(
        "--max-index-num",
        default=20_000_000,
        type=click.IntRange(min=2),
        help="Entries an index file holds (20 bytes each).",
    )(command)
    command = click.option(
        "--max-hash-slot-num",
        default=5_000_000,
        type=click.IntRange(min=1),
        help="Hash slots of an index file (4 bytes each).",
    )(command)
    return click.option("--segment-size-mib", default=1024, type=click.IntRange(8, 4096))(command)


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
    max_hash_slot_num: int,
    max_index_num: int,
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
        max_hash_slot_num=max_hash_slot_num,
        max_index_num=max_index_num,
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

    run_async(_run_broker(config, [], [], sidecar_config))


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("data/broker"))
@click.option("--listen-host", default="127.0.0.1")
@click.option("--listen-port", default=8081, type=click.IntRange(0, 65535), help="0: a free port.")
@click.option("--advertise-host", default=None, help="Host in routes (default: listen host).")
@click.option(
    "--flush",
    "flush_disk_type",
    type=click.Choice([t.value for t in FlushDiskType]),
    default=FlushDiskType.ASYNC_FLUSH.value,
)
@store_geometry_options
@click.option(
    "--file-reserved-hours",
    default=72.0,
    type=click.FloatRange(min=0.01),
    help="Retention: commitlog segments older than this are deleted.",
)
@click.option("--auto-create-topic/--no-auto-create-topic", default=False)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    help="NAME[:QUEUES[:TYPE]] created at start if missing; TYPE is NORMAL, FIFO, DELAY, "
    "TRANSACTION or MIXED (default).",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    help="NAME[:orderly][:RETRY_MAX_TIMES] consumer group created at start if missing "
    "(orderly: FIFO consumption; default 16 retries).",
)
@click.option("--invisible-duration-min-ms", default=10_000, type=click.IntRange(min=1))
@click.option("--long-polling-timeout-ms", default=20_000, type=click.IntRange(1_000, 20_000))
@click.option("--transaction-timeout-ms", default=6_000, type=click.IntRange(min=0))
@click.option("--transaction-check-interval-ms", default=30_000, type=click.IntRange(min=1))
@click.option("--transaction-check-max", default=15, type=click.IntRange(min=1))
@click.option(
    "--max-message-size-bytes",
    default=4 * 1024 * 1024,
    type=click.IntRange(1, 64 * 1024 * 1024),
    help="The largest body the broker stores (RocketMQ's maxMessageSize).",
)
@click.option("--wait-time-ms-in-send-queue", default=200, type=click.IntRange(min=1))
@click.option("--send-queue-capacity", default=10_000, type=click.IntRange(min=1))
@click.option("--send-workers", default=64, type=click.IntRange(min=1))
@click.option("--tls-cert", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--tls-key", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--metrics-listen",
    default=None,
    callback=optional_listen,
    metavar="HOST:PORT",
    help="Serve the broker's Prometheus metrics here (port 0: a free port; empty: off).",
)
def broker(
    data_dir: Path,
    listen_host: str,
    listen_port: int,
    advertise_host: str | None,
    flush_disk_type: str,
    segment_size_mib: int,
    max_hash_slot_num: int,
    max_index_num: int,
    file_reserved_hours: float,
    auto_create_topic: bool,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    invisible_duration_min_ms: int,
    long_polling_timeout_ms: int,
    transaction_timeout_ms: int,
    transaction_check_interval_ms: int,
    transaction_check_max: int,
    max_message_size_bytes: int,
    wait_time_ms_in_send_queue: int,
    send_queue_capacity: int,
    send_workers: int,
    tls_cert: Path | None,
    tls_key: Path | None,
    metrics_listen: Endpoint | None,
) -> None:
    """Serve the apache.rocketmq.v2 messaging service on the store until SIGINT or SIGTERM."""
    store_config = MessageStoreConfig(
        store_path_root_dir=data_dir.resolve(),
        mapped_file_size_commit_log_bytes=segment_size_mib * 1024 * 1024,
        max_hash_slot_num=max_hash_slot_num,
        max_index_num=max_index_num,
        flush_disk_type=FlushDiskType(flush_disk_type),
        file_reserved_hours=file_reserved_hours,
        max_message_size_bytes=max_message_size_bytes,
    )
    try:
        config = BrokerConfig(
            store=store_config,
            listen_host=listen_host,
            listen_port=listen_port,
            advertised_host=advertise_host,
            auto_create_topic_enable=auto_create_topic,
            invisible_duration_ms_min=invisible_duration_min_ms,
            long_polling_timeout_ms=long_polling_timeout_ms,
            transaction_timeout_ms=transaction_timeout_ms,
            transaction_check_interval_ms=transaction_check_interval_ms,
            transaction_check_max=transaction_check_max,
            wait_time_ms_in_send_queue=wait_time_ms_in_send_queue,
            send_queue_capacity_max=send_queue_capacity,
            send_workers=send_workers,
            tls_cert_file=tls_cert,
            tls_key_file=tls_key,
            metrics_host=metrics_listen.host if metrics_listen else None,
            metrics_port=metrics_listen.port if metrics_listen else 0,
        )
        topic_specs = [parse_topic_spec(spec) for spec in topics]
        group_specs = [parse_group_spec(spec) for spec in groups]
    except (BrokerError, ValueError) as e:
        raise click.BadParameter(str(e)) from e
    run_async(_run_broker(config, topic_specs, group_specs))


main.add_command(sidecar_command)
main.add_command(reconcile_command)
main.add_command(outbox_group)


def parse_topic_spec(spec: str) -> tuple[str, int | None, TopicMessageType]:
    """NAME[:QUEUES[:TYPE]]."""
    parts = spec.split(":")
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"--topic {spec!r}: NAME[:QUEUES[:TYPE]]")
    queues = int(parts[1]) if len(parts) > 1 and parts[1] else None
    kind = TopicMessageType(parts[2].upper()) if len(parts) > 2 else TopicMessageType.MIXED
    return parts[0], queues, kind


def parse_group_spec(spec: str) -> tuple[str, bool, int]:
    """NAME[:orderly][:RETRY_MAX_TIMES]."""
    name, *rest = spec.split(":")
    orderly = "orderly" in rest
    numbers = [int(part) for part in rest if part != "orderly"]
    if len(rest) > 2 or len(numbers) > 1:
        raise ValueError(f"--group {spec!r}: NAME[:orderly][:RETRY_MAX_TIMES]")
    return name, orderly, numbers[0] if numbers else RETRY_MAX_TIMES_DEFAULT


async def _run_broker(
    config: BrokerConfig,
    topic_specs: list[tuple[str, int | None, TopicMessageType]],
    group_specs: list[tuple[str, bool, int]],
    sidecar_config: Callable[[int], SidecarConfig] | None = None,
) -> None:
    """The broker, and with ``sidecar_config`` (``rocketbox up``) a sidecar in front of it in the
    same process: started after the broker, stopped before it, so its last sends still land."""
    controller = BrokerController(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        port = await controller.start()
    except (StoreError, BrokerError, OSError) as e:
        raise click.ClickException(str(e)) from e
    try:
        for name, queues, kind in topic_specs:
            controller.topics.create(name, queues, kind, exist_ok=True)
        for name, orderly, retries in group_specs:
            controller.groups.create(name, orderly, retries, replace=True)
        assert controller.recovery_report is not None
        click.echo(f"recovery: {controller.recovery_report.summary()}")
        sidecar = None
        if sidecar_config is not None:
            sidecar = await start_sidecar(sidecar_config(port))
            c = sidecar.config
            click.echo(
                f"sidecar listening on {c.listen_host}:{sidecar.port} (apps send here: "
                f"rocketbox.v1.SidecarService), outbox {redact(c.outbox_url)}"
            )
            # One process, one scrape target: the broker's endpoint serves the sidecar's too.
            controller.metrics.registry.register(sidecar.metrics.registry)
        if controller.metrics_port:
            click.echo(f"metrics on http://{config.metrics_host}:{controller.metrics_port}/metrics")
        click.echo(f"broker listening on {config.listen_host}:{port}; Ctrl-C stops cleanly")
        try:
            await stop.wait()
        finally:
            if sidecar is not None:
                LOG.info("stopping the sidecar")
                await sidecar.stop()
        LOG.info("stopping the broker")
    finally:
        await controller.shutdown()
    click.echo("rocketbox stopped cleanly")


# -- admin commands: clients of the broker's rocketbox.admin.v1.BrokerAdmin service --------------
# Each prints text for people, or JSON with --json. A failed call prints the broker's status code
# and details on stderr and exits with ADMIN_ERROR_EXIT_CODE, or with UNREACHABLE_EXIT_CODE when
# the broker could not be reached or did not answer within --deadline-s.
ADMIN_ERROR_EXIT_CODE = 1
UNREACHABLE_EXIT_CODE = 3
DEFAULT_BROKER = "127.0.0.1:8081"


class AdminCommandError(click.ClickException):
    exit_code = ADMIN_ERROR_EXIT_CODE


class BrokerUnreachableError(click.ClickException):
    exit_code = UNREACHABLE_EXIT_CODE


def _check_endpoint(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return admin.parse_endpoint(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def admin_command(f: Callable[..., None]) -> Callable[..., None]:
    """--broker, --deadline-s and --json for a command taking (client, as_json, ...)."""

    @click.option(
        "--broker",
        "endpoint",
        default=DEFAULT_BROKER,
        envvar="ROCKETBOX_BROKER",
        metavar="HOST:PORT",
        callback=_check_endpoint,
        help="The broker's gRPC address.",
    )
    @click.option(
        "--deadline-s",
        default=admin.CALL_DEADLINE_S,
        type=click.FloatRange(min=0, min_open=True),
        help="Give up on a call after this long.",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
    @functools.wraps(f)
    def command(endpoint: str, deadline_s: float, as_json: bool, **kwargs: Any) -> None:
        try:
            with admin.AdminClient(endpoint, deadline_s) as client:
                f(client, as_json, **kwargs)
        except admin.AdminCallError as e:
            if e.unreachable:
                raise BrokerUnreachableError(str(e)) from e
            raise AdminCommandError(str(e)) from e

    return command


def _echo(as_json: bool, data: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else text)


@main.group()
def topic() -> None:
    """Create, list, describe and delete the broker's topics."""


@topic.command("create")
@click.argument("name")
@click.option("--queues", type=int, default=None, help="1..1024 (default: the broker's).")
@click.option(
    "--type",
    "message_type",
    type=click.Choice(admin.TOPIC_TYPES, case_sensitive=False),
    default="MIXED",
    help="What the topic accepts; MIXED: all four.",
)
@admin_command
def topic_create(
    client: admin.AdminClient, as_json: bool, name: str, queues: int | None, message_type: str
) -> None:
    """Create topic NAME."""
    t = client.create_topic(name, queues, message_type.upper()).topic
    kind = admin.message_type_name(t.message_type)
    _echo(as_json, admin.topic_to_dict(t), f"created topic {t.name}: {t.queue_nums} queues, {kind}")


@topic.command("list")
@admin_command
def topic_list(client: admin.AdminClient, as_json: bool) -> None:
    """List the broker's topics."""
    topics = list(client.list_topics().topics)
    data = {"topics": [admin.topic_to_dict(t) for t in topics]}
    _echo(as_json, data, admin.format_topics(topics))


@topic.command("describe")
@click.argument("name")
@admin_command
def topic_describe(client: admin.AdminClient, as_json: bool, name: str) -> None:
    """Show topic NAME: its settings and each queue's range of queue offsets."""
    answer = client.describe_topic(name)
    _echo(as_json, admin.describe_to_dict(answer), admin.format_describe(answer))


@topic.command("delete")
@click.argument("name")
@admin_command
def topic_delete(client: admin.AdminClient, as_json: bool, name: str) -> None:
    """Delete topic NAME (its stored messages stay until retention removes them)."""
    t = client.delete_topic(name).topic
    _echo(as_json, admin.topic_to_dict(t), f"deleted topic {t.name}")


@main.group()
def message() -> None:
    """Look up stored messages."""


@message.command("get")
@click.argument("message_id")
@admin_command
def message_get(client: admin.AdminClient, as_json: bool, message_id: str) -> None:
    """Every stored copy of the message with MESSAGE_ID."""
    answer = client.get_message(message_id)
    messages = list(answer.messages)
    data = admin.messages_to_dict(messages, answer.truncated)
    _echo(as_json, data, admin.format_messages(messages, answer.truncated))


@message.command("query")
@click.option("--topic", "topic_name", required=True)
@click.option("--key", required=True, help="One business key.")
@click.option("--max-num", default=32, type=int, help="1..1024.")
@admin_command
def message_query(
    client: admin.AdminClient, as_json: bool, topic_name: str, key: str, max_num: int
) -> None:
    """Messages of a topic carrying a business key, newest first."""
    answer = client.query_message(topic_name, key, max_num)
    messages = list(answer.messages)
    data = admin.messages_to_dict(messages, answer.truncated)
    _echo(as_json, data, admin.format_messages(messages, answer.truncated))


@main.command("flow-control")
@click.argument("state", type=click.Choice(["on", "off"]))
@click.option("--topic", "topic_name", default=None, help="One topic (default: the whole broker).")
@admin_command
def flow_control(
    client: admin.AdminClient, as_json: bool, state: str, topic_name: str | None
) -> None:
    """Force flow control on or off: sends are refused (TOO_MANY_REQUESTS) while it is on."""
    answer = client.set_flow_control(state == "on", topic_name)
    target = f"topic {topic_name}" if topic_name is not None else "the broker"
    text = f"flow control forced {state} for {target}\n{admin.format_flow_control(answer)}"
    _echo(as_json, admin.flow_control_to_dict(answer), text)


@main.group()
def group() -> None:
    """Create, list and describe consumer groups, and move their consume offsets."""


@group.command("list")
@admin_command
def group_list(client: admin.AdminClient, as_json: bool) -> None:
    """List the broker's consumer groups and their settings."""
    groups = list(client.list_groups().groups)
    data = {"groups": [admin.group_to_dict(g) for g in groups]}
    _echo(as_json, data, admin.format_groups(groups))


@group.command("describe")
@click.argument("name")
@admin_command
def group_describe(client: admin.AdminClient, as_json: bool, name: str) -> None:
    """Show group NAME: settings, connected consumers, per-queue progress (consume offset, lag,
    messages in flight) in every topic it consumed, and its dead-letter queue."""
    answer = client.describe_group(name)
    _echo(as_json, admin.describe_group_to_dict(answer), admin.format_describe_group(answer))


@group.command("create")
@click.argument("name")
@click.option("--orderly", is_flag=True, help="FIFO consumption of each message group.")
@click.option(
    "--retry-max-times",
    type=int,
    default=None,
    help=f"0..64 (default: {RETRY_MAX_TIMES_DEFAULT}); then a message goes to %DLQ%NAME.",
)
@admin_command
def group_create(
    client: admin.AdminClient,
    as_json: bool,
    name: str,
    orderly: bool,
    retry_max_times: int | None,
) -> None:
    """Create consumer group NAME."""
    g = client.create_group(name, orderly, retry_max_times).group
    _echo(as_json, admin.group_to_dict(g), admin.format_created_group(g))


@group.command("reset-offset")
@click.argument("name")
@click.option("--topic", "topic_name", required=True)
@click.option(
    "--to",
    "target",
    required=True,
    type=click.Choice(admin.RESET_TARGETS, case_sensitive=False),
    help="first: every stored message again; last: skip the backlog; timestamp: the first "
    "message stored at or after --timestamp-ms.",
)
@click.option(
    "--timestamp-ms", type=click.IntRange(min=0), default=None, help="With --to timestamp."
)
@admin_command
def group_reset_offset(
    client: admin.AdminClient,
    as_json: bool,
    name: str,
    topic_name: str,
    target: str,
    timestamp_ms: int | None,
) -> None:
    """Move group NAME's consume offset in every queue of --topic (messages it has in flight
    there are forgotten)."""
    target = target.upper()
    if (target == "TIMESTAMP") != (timestamp_ms is not None):
        raise click.UsageError("--timestamp-ms goes with --to timestamp, and only with it")
    progress = client.reset_offset(name, topic_name, target, timestamp_ms).progress
    text = f"group {name} reset to {target.lower()}\n{admin.format_group_progress(progress)}"
    _echo(as_json, admin.group_progress_to_dict(progress), text)
