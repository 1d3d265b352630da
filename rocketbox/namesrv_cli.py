"""``rocketbox namesrv``: the NameServer (RocketMQ's mqnamesrv), serving
rocketbox.namesrv.v1.NameServerService until SIGINT or SIGTERM.

It keeps nothing on disk: its route table is filled by the brokers' registrations, and a
restarted NameServer is filled again by their next ones.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from namesrv.config import (
    BROKER_CHANNEL_EXPIRED_TIME_MS_DEFAULT,
    NAMESRV_PORT_DEFAULT,
    SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS_DEFAULT,
    NamesrvConfig,
)
from namesrv.controller import NamesrvController
from rocketbox.run_settings import run_async
from rocketbox.sidecar_cli import listen_endpoint, optional_listen
from rocketbox.start_checks import BROKER_LISTEN_OPTIONS, listen_refused, refuse_taken
from rocketbox_api.listen import ListenError
from sidecar.channels import Endpoint

LOG = logging.getLogger("rocketbox")
# The NameServer's listeners are set by the same options as the broker's.
NAMESRV_LISTEN_OPTIONS = BROKER_LISTEN_OPTIONS


@click.command("namesrv", short_help="Serve the NameServer: brokers register, routes are read.")
@click.option(
    "--listen",
    default=f"127.0.0.1:{NAMESRV_PORT_DEFAULT}",
    callback=listen_endpoint,
    metavar="HOST:PORT",
    help="Where brokers and tools connect (port 0: a free port).",
)
@click.option(
    "--metrics-listen",
    default=None,
    callback=optional_listen,
    metavar="HOST:PORT",
    help="Serve the NameServer's Prometheus metrics here (port 0: a free port; empty: off).",
)
@click.option(
    "--scan-not-active-broker-interval-ms",
    default=SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS_DEFAULT,
    type=click.IntRange(min=1),
    help="How often to look for brokers gone silent.",
)
@click.option(
    "--broker-channel-expired-time-ms",
    default=BROKER_CHANNEL_EXPIRED_TIME_MS_DEFAULT,
    type=click.IntRange(min=1),
    help="Drop a broker whose last registration is older than this.",
)
def namesrv(
    listen: Endpoint,
    metrics_listen: Endpoint | None,
    scan_not_active_broker_interval_ms: int,
    broker_channel_expired_time_ms: int,
) -> None:
    """Serve the NameServer until SIGINT or SIGTERM. Brokers started with --namesrv register
    here; their routes are read here (by the brokers, for clients, and by `rocketbox cluster
    list`)."""
    config = NamesrvConfig(
        listen_host=listen.host,
        listen_port=listen.port,
        metrics_host=metrics_listen.host if metrics_listen else None,
        metrics_port=metrics_listen.port if metrics_listen else 0,
        scan_not_active_broker_interval_ms=scan_not_active_broker_interval_ms,
        broker_channel_expired_time_ms=broker_channel_expired_time_ms,
    )
    addresses = [("--listen", listen.host, listen.port)]
    if metrics_listen is not None:
        addresses.append(("--metrics-listen", metrics_listen.host, metrics_listen.port))
    refuse_taken(addresses)
    run_async(run_namesrv(config))


async def run_namesrv(config: NamesrvConfig) -> None:
    controller = NamesrvController(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        port = await controller.start()
    except ListenError as e:
        raise listen_refused(e, NAMESRV_LISTEN_OPTIONS) from e
    try:
        if controller.metrics_port:
            click.echo(f"metrics on http://{config.metrics_host}:{controller.metrics_port}/metrics")
        click.echo(f"namesrv listening on {config.listen_host}:{port}; Ctrl-C stops cleanly")
        stopped = asyncio.create_task(stop.wait())
        failed = asyncio.create_task(controller.wait_failed())
        await asyncio.wait({stopped, failed}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        failed.cancel()
        LOG.info("stopping the namesrv")
    finally:
        await controller.shutdown()
    if failed.done() and not failed.cancelled():
        raise click.ClickException(f"the NameServer's scan died: {failed.result()!r}")
    click.echo("rocketbox namesrv stopped cleanly")
