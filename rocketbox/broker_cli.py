"""``rocketbox broker``: the bundled broker serving apache.rocketmq.v2 on its store, and the
store's options that ``rocketbox up`` shares.

``run_broker`` is the broker process's life (start, create the topics and groups asked for, serve
until SIGINT/SIGTERM, stop cleanly), with or without a sidecar in the same process.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import click

from broker.broker_controller import BrokerController
from broker.config import BrokerConfig
from broker.errors import BackgroundTaskError, BrokerError
from broker.group_config import RETRY_MAX_TIMES_DEFAULT, validate_group_name
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.errors import MessageIllegalError, StoreError, StoreLockedError
from broker.topic_config import TopicMessageType, validate_topic_name
from outbox.factory import redact
from rocketbox.broker_security_options import SecurityOptions, security_options
from rocketbox.cluster_options import ClusterOptions, cluster_options
from rocketbox.run_settings import run_async
from rocketbox.sidecar_cli import (
    listen_endpoint,
    optional_listen,
    readiness_note,
    start_sidecar,
    stop_sidecar,
)
from rocketbox.start_checks import (
    BROKER_LISTEN_OPTIONS,
    UP_BROKER_LISTEN_OPTIONS,
    UP_SIDECAR_LISTEN_OPTIONS,
    ListenOptions,
    StartRefused,
    listen_refused,
    refuse_locked,
    refuse_taken,
)
from rocketbox.store_geometry import store_geometry_options
from rocketbox_api.listen import GRPC, HA, METRICS, ListenError
from rocketbox_api.message_rules import BODY_BYTES_MAX
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig

LOG = logging.getLogger("rocketbox")


@click.command("broker", short_help="Serve apache.rocketmq.v2 on a store of its own.")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("data/broker"))
@click.option(
    "--listen",
    default="127.0.0.1:8081",
    callback=listen_endpoint,
    metavar="HOST:PORT",
    help="Where clients and sidecars connect (port 0: a free port).",
)
@click.option("--advertise-host", default=None, help="Host in routes (default: --listen's host).")
@click.option(
    "--flush",
    "flush_disk_type",
    type=click.Choice([t.value for t in FlushDiskType]),
    default=FlushDiskType.ASYNC_FLUSH.value,
)
@store_geometry_options()
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
    help="NAME[:orderly][:broadcast][:RETRY_MAX_TIMES] consumer group created at start, or its "
    "settings replaced (orderly: FIFO consumption; broadcast: every consumer receives every "
    "message; default 16 retries).",
)
@click.option("--invisible-duration-min-ms", default=10_000, type=click.IntRange(min=1))
@click.option("--long-polling-timeout-ms", default=20_000, type=click.IntRange(1_000, 20_000))
@click.option("--transaction-timeout-ms", default=6_000, type=click.IntRange(min=0))
@click.option("--transaction-check-interval-ms", default=30_000, type=click.IntRange(min=1))
@click.option("--transaction-check-max", default=15, type=click.IntRange(min=1))
@click.option(
    "--message-size-bytes-max",
    default=BODY_BYTES_MAX,
    type=click.IntRange(1, 64 * 1024 * 1024),
    help="The largest body the broker stores (RocketMQ's maxMessageSize).",
)
@click.option("--wait-time-ms-in-send-queue", default=200, type=click.IntRange(min=1))
@click.option("--send-queue-capacity", default=10_000, type=click.IntRange(min=1))
@click.option("--send-workers", default=64, type=click.IntRange(min=1))
@security_options
@click.option(
    "--metrics-listen",
    default=None,
    callback=optional_listen,
    metavar="HOST:PORT",
    help="Serve the broker's Prometheus metrics here (port 0: a free port; empty: off).",
)
@cluster_options
def broker(
    data_dir: Path,
    listen: Endpoint,
    advertise_host: str | None,
    flush_disk_type: str,
    segment_size_mib: int,
    hash_slot_num: int,
    index_num_max: int,
    consume_queue_file_entries: int,
    file_reserved_hours: float,
    auto_create_topic: bool,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    invisible_duration_min_ms: int,
    long_polling_timeout_ms: int,
    transaction_timeout_ms: int,
    transaction_check_interval_ms: int,
    transaction_check_max: int,
    message_size_bytes_max: int,
    wait_time_ms_in_send_queue: int,
    send_queue_capacity: int,
    send_workers: int,
    security: SecurityOptions,
    metrics_listen: Endpoint | None,
    cluster: ClusterOptions,
) -> None:
    """Serve the apache.rocketmq.v2 messaging service on the store until SIGINT or SIGTERM.
    With --namesrv, the broker is one of a cluster's: it registers with the NameServers, and
    its --broker-role decides whether it takes sends (a master) or copies its master (a slave)."""
    store_config = MessageStoreConfig(
        store_path_root_dir=data_dir.resolve(),
        mapped_file_size_commit_log_bytes=segment_size_mib * 1024 * 1024,
        hash_slot_num=hash_slot_num,
        index_num_max=index_num_max,
        mapped_file_size_consume_queue_entries=consume_queue_file_entries,
        flush_disk_type=FlushDiskType(flush_disk_type),
        file_reserved_hours=file_reserved_hours,
        message_size_bytes_max=message_size_bytes_max,
        sync_flush_timeout_ms=cluster.sync_flush_timeout_ms,
    )
    try:
        config = BrokerConfig(
            store=store_config,
            listen_host=listen.host,
            listen_port=listen.port,
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
            **security.config_fields(),
            metrics_host=metrics_listen.host if metrics_listen else None,
            metrics_port=metrics_listen.port if metrics_listen else 0,
            **cluster.config_fields(),
        )
        topic_specs = [parse_topic_spec(spec) for spec in topics]
        group_specs = [parse_group_spec(spec) for spec in groups]
    except (BrokerError, MessageIllegalError, ValueError) as e:
        raise click.BadParameter(str(e)) from e
    refuse_locked(store_config.lock_file_path, "--data-dir")
    refuse_taken(broker_addresses(config, BROKER_LISTEN_OPTIONS))
    run_async(run_broker(config, topic_specs, group_specs))


def broker_addresses(config: BrokerConfig, options: ListenOptions) -> list[tuple[str, str, int]]:
    """The broker's listen addresses, by the option that sets each, for ``refuse_taken``."""
    addresses = [(options[GRPC], config.listen_host, config.listen_port)]
    if config.metrics_host is not None:
        addresses.append((options[METRICS], config.metrics_host, config.metrics_port))
    if config.ha_listen_host is not None and not config.is_slave:
        addresses.append((options[HA], config.ha_listen_host, config.ha_listen_port))
    return addresses


def parse_topic_spec(spec: str) -> tuple[str, int | None, TopicMessageType]:
    """NAME[:QUEUES[:TYPE]]."""
    parts = spec.split(":")
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"--topic {spec!r}: NAME[:QUEUES[:TYPE]]")
    queues = int(parts[1]) if len(parts) > 1 and parts[1] else None
    kind = TopicMessageType(parts[2].upper()) if len(parts) > 2 else TopicMessageType.MIXED
    validate_topic_name(parts[0])  # before the store opens: one line, no traceback
    return parts[0], queues, kind


class GroupSpec(NamedTuple):
    name: str
    orderly: bool = False
    retry_max_times: int = RETRY_MAX_TIMES_DEFAULT
    broadcast: bool = False


_GROUP_SPEC_FORM = "NAME[:orderly][:broadcast][:RETRY_MAX_TIMES]"


def parse_group_spec(spec: str) -> GroupSpec:
    """NAME[:orderly][:broadcast][:RETRY_MAX_TIMES], the words in any order, each once."""
    name, *rest = spec.split(":")
    words = [part for part in rest if part in ("orderly", "broadcast")]
    try:
        numbers = [int(part) for part in rest if part not in words]
    except ValueError:
        raise ValueError(f"--group {spec!r}: {_GROUP_SPEC_FORM}") from None
    if len(set(words)) != len(words) or len(numbers) > 1:
        raise ValueError(f"--group {spec!r}: {_GROUP_SPEC_FORM}")
    retries = numbers[0] if numbers else RETRY_MAX_TIMES_DEFAULT
    validate_group_name(name)
    return GroupSpec(name, "orderly" in words, retries, "broadcast" in words)


async def run_broker(
    config: BrokerConfig,
    topic_specs: list[tuple[str, int | None, TopicMessageType]],
    group_specs: list[GroupSpec],
    sidecar_config: Callable[[int], SidecarConfig] | None = None,
    banner: Callable[[SidecarConfig], list[str]] | None = None,
) -> None:
    """The broker, and with ``sidecar_config`` (``rocketbox up``) a sidecar in front of it in the
    same process: started after the broker, stopped before it, so its last sends still land.
    ``banner``: lines about the sidecar printed once both serve (up's data and where to change
    them)."""
    options = BROKER_LISTEN_OPTIONS if sidecar_config is None else UP_BROKER_LISTEN_OPTIONS
    controller = BrokerController(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        port = await controller.start()
    except ListenError as e:
        raise listen_refused(e, options) from e
    except StoreLockedError as e:
        raise StartRefused(f"{e}; stop it or choose another --data-dir") from e
    except (StoreError, BrokerError, OSError) as e:
        raise click.ClickException(str(e)) from e
    try:
        for name, queues, kind in topic_specs:
            controller.topics.create(name, queues, kind, exist_ok=True)
        # No consumer is connected yet: the one moment a group's consume model may change.
        for g in group_specs:
            controller.groups.create(
                g.name,
                g.orderly,
                g.retry_max_times,
                replace=True,
                consume_broadcast_enable=g.broadcast,
            )
        assert controller.recovery_report is not None
        click.echo(f"recovery: {controller.recovery_report.summary()}")
        sidecar = None
        if sidecar_config is not None:
            sidecar = await start_sidecar(sidecar_config(port), UP_SIDECAR_LISTEN_OPTIONS)
            c = sidecar.config
            for line in banner(c) if banner is not None else []:
                click.echo(line)
            click.echo(
                f"sidecar listening on {c.listen_host}:{sidecar.port} (apps send here: "
                f"rocketbox.v1.SidecarService), outbox {redact(c.outbox_url)}"
                + readiness_note(sidecar)
            )
            # One process, one scrape target: the broker's endpoint serves the sidecar's too.
            controller.metrics.registry.register(sidecar.metrics.registry)
        if controller.metrics_port:
            click.echo(f"metrics on http://{config.metrics_host}:{controller.metrics_port}/metrics")
        ha_address = controller.ha_address()
        if ha_address is not None:
            click.echo(f"broker HA listening on {ha_address} ({config.broker_role.value})")
        click.echo(f"broker listening on {config.listen_host}:{port}; Ctrl-C stops cleanly")
        try:
            await stop.wait()
        finally:
            if sidecar is not None:
                LOG.info("stopping the sidecar")
                await stop_sidecar(sidecar)
        LOG.info("stopping the broker")
    finally:
        await _shutdown(controller)
    click.echo("rocketbox stopped cleanly")


async def _shutdown(controller: BrokerController) -> None:
    """Shut the broker down; a background task that died (logged with its traceback when it did)
    is the command's error in one line, so the traceback is not printed a second time."""
    try:
        await controller.shutdown()
    except BackgroundTaskError as e:
        raise click.ClickException(f"{e}; its traceback is logged above") from e
