"""``rocketbox sidecar``: the app-facing sidecar in front of a broker, with its durable outbox."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import click

from outbox.entry import OutboxLimits
from outbox.errors import OutboxError
from rocketbox.lookup_options import lookup_namesrv_option
from rocketbox.run_settings import run_async
from rocketbox.sidecar_security_options import app_security_options, broker_security_options
from rocketbox.start_checks import (
    SIDECAR_LISTEN_OPTIONS,
    ListenOptions,
    listen_refused,
    refuse_outbox_locked,
    refuse_taken,
)
from rocketbox_api.listen import ListenError
from sidecar.channels import Endpoint
from sidecar.coalescer import COALESCE_BYTES_MAX_LIMIT, CoalesceConfig
from sidecar.config import ResendConfig, SidecarConfig
from sidecar.health_log import STATE_LOG_INTERVAL_MS_DEFAULT
from sidecar.ledger import ACK_LEDGER_FLUSH_INTERVAL_MS_DEFAULT
from sidecar.metrics import READY
from sidecar.producer import ProducerConfig
from sidecar.sidecar import Sidecar

LOG = logging.getLogger("rocketbox")


def _endpoint(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[Endpoint, ...]:
    try:
        return tuple(Endpoint.parse(v) for v in value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def listen_endpoint(_ctx: click.Context, _param: click.Parameter, value: str) -> Endpoint:
    """HOST:PORT where a server listens (port 0: a free port)."""
    try:
        return Endpoint.parse(value, port_min=0)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


# What turns an optional listener off, beside an empty value.
LISTEN_OFF = "off"


def optional_listen(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> Endpoint | None:
    """HOST:PORT, or None when the option is empty or ``off``."""
    if not value or value.strip().lower() == LISTEN_OFF:
        return None
    return listen_endpoint(ctx, param, value)


@click.command("sidecar", short_help="Serve apps: send to the broker, spool what it refuses.")
@click.option(
    "--broker",
    "brokers",
    multiple=True,
    required=True,
    callback=_endpoint,
    metavar="HOST:PORT",
    help="A broker (or RocketMQ 5 proxy) access point; repeatable.",
)
@click.option(
    "--outbox",
    "outbox_url",
    required=True,
    metavar="URL",
    help="rocksdb:///path, redis://host:port/db?prefix=NAME or "
    "mysql+pymysql://user:password@host:port/db?table=NAME",
)
@click.option(
    "--listen",
    default="127.0.0.1:8980",
    callback=listen_endpoint,
    metavar="HOST:PORT",
    help="Where apps connect (port 0: a free port).",
)
@click.option(
    "--metrics-listen",
    default=None,
    callback=optional_listen,
    metavar="HOST:PORT",
    help="Serve Prometheus metrics here (off by default).",
)
@click.option(
    "--rocketmq-listen",
    default=None,
    callback=optional_listen,
    metavar="HOST:PORT",
    help="Also serve apache.rocketmq.v2 here, for apps using an official RocketMQ 5 SDK: they "
    "point their endpoint at it and gain the outbox unchanged (port 0: a free port; off by "
    "default).",
)
@click.option(
    "--rocketmq-advertise",
    default=None,
    metavar="HOST:PORT",
    help="The endpoint the RocketMQ front's routes name (default: the address each app "
    "reached it on).",
)
@click.option(
    "--outbox-stats-interval-ms",
    default=5_000,
    type=click.IntRange(min=10),
    help="How often the outbox gauges are refreshed.",
)
@lookup_namesrv_option
@click.option("--namespace", default="", help="RocketMQ namespace of the topics.")
@click.option("--retry-times-when-send-failed", default=2, type=click.IntRange(0, 16))
@click.option("--send-msg-timeout-ms", default=3_000, type=click.IntRange(min=1))
@click.option("--send-latency-fault-enable/--no-send-latency-fault-enable", default=True)
@click.option("--route-refresh-interval-ms", default=30_000, type=click.IntRange(min=1))
@click.option(
    "--outbox-threads",
    default=64,
    type=click.IntRange(1, 1024),
    help="Threads for the outbox's blocking calls (spool writes, resends' claims and marks).",
)
@click.option("--outbox-entries-max", default=1_000_000, type=click.IntRange(min=1))
@click.option("--outbox-bytes-max", default=1024**3, type=click.IntRange(min=1))
@click.option("--resend-concurrency-max", default=64, type=click.IntRange(min=1))
@click.option("--claim-batch-max", default=512, type=click.IntRange(min=1))
@click.option("--lease-ms", default=30_000, type=click.IntRange(min=1))
@click.option(
    "--sidecar-id",
    default="",
    show_default="HOSTNAME:PORT, the host name (a pod's name in Kubernetes) and the --listen port",
    help="This sidecar across its restarts. At start it ends the outbox leases an earlier run "
    "of the same id left, so that their entries are resent at once (the broker's index asked "
    "first) rather than after --lease-ms. Each sidecar sharing an outbox needs its own.",
)
@click.option("--poll-interval-ms", default=200, type=click.IntRange(min=1))
@click.option(
    "--age-max-s",
    default=7 * 24 * 3600,
    type=click.IntRange(min=1),
    help="The delivery budget of a message that sets none (rocketbox.v1 Message."
    "delivery_timeout): a spooled message still not delivered this long after its spool is "
    "given up (DEAD). Failed resends never give up by count.",
)
@click.option("--backoff-initial-ms", default=500, type=click.IntRange(min=1))
@click.option("--backoff-max-ms", default=60_000, type=click.IntRange(min=1))
@click.option(
    "--probe-interval-max-ms",
    default=5_000,
    type=click.IntRange(min=1),
    help="While the broker takes no sends, one outbox entry probes it per interval, growing to "
    "this; the others wait untouched. The longest the drain waits once the broker is back.",
)
@click.option(
    "--pull-in-ids-max",
    default=65_536,
    type=click.IntRange(min=0),
    help="Entries waiting out an UNAVAILABLE back-off whose ids are kept, to make them due at "
    "once when their topic's sends are stored again (0: off; past it the oldest keep their "
    "back-off).",
)
@click.option("--delivered-retention-hours", default=72.0, type=click.FloatRange(min=0))
@click.option("--shutdown-grace-ms", default=10_000, type=click.IntRange(min=0))
@click.option(
    "--intake-in-flight-max",
    default=2_048,
    type=click.IntRange(min=1),
    help="Messages inside the sidecar at once; one more is refused at once "
    "(RESOURCE_EXHAUSTED with a retry-after) instead of queued.",
)
@click.option(
    "--pending-calls-max",
    default=256,
    type=click.IntRange(min=1),
    help="Calls gRPC may hold before the sidecar takes them; past it a call is refused at "
    "once (CANCELLED) instead of waiting behind a saturated sidecar.",
)
@click.option(
    "--coalesce/--no-coalesce",
    default=True,
    help="Send plain messages accepted concurrently for one topic as one SendMessage.",
)
@click.option(
    "--coalesce-messages-max",
    default=128,
    type=click.IntRange(1, 1_024),
    help="Messages in one coalesced SendMessage.",
)
@click.option(
    "--coalesce-bytes-max",
    default=COALESCE_BYTES_MAX_LIMIT,
    type=click.IntRange(1, COALESCE_BYTES_MAX_LIMIT),
    help="Body bytes in one coalesced SendMessage.",
)
@click.option(
    "--coalesce-requests-in-flight-max",
    default=1,
    type=click.IntRange(1, 64),
    help="Coalesced SendMessage requests of one topic out at once.",
)
@click.option(
    "--fifo-fence-refresh-interval-ms",
    default=1_000,
    type=click.IntRange(min=1),
    help="How often the in-memory FIFO fence is re-read from the outbox.",
)
@click.option(
    "--state-log-interval-ms",
    default=STATE_LOG_INTERVAL_MS_DEFAULT,
    type=click.IntRange(min=1),
    help="While the broker does not take messages, or the outbox is unreachable, say so again "
    "at most this often, with counts since the last line (changes are logged at once).",
)
@click.option(
    "--ack-ledger",
    "ack_ledger_path",
    default=None,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Append the STORED and SPOOLED answers sent to apps (JSON lines), for reconciliation.",
)
@click.option(
    "--ack-ledger-flush-interval-ms",
    default=ACK_LEDGER_FLUSH_INTERVAL_MS_DEFAULT,
    show_default=True,
    type=click.IntRange(min=0),
    help="When a sent answer reaches the ack ledger's file: 0 at once (one write per call); N "
    "every N ms (less work per call; a crash loses up to the last N ms of answers).",
)
@app_security_options()
@broker_security_options
def sidecar_command(**options: Any) -> None:
    """Serve rocketbox.v1.SidecarService: send to the broker with RocketMQ's retries, spool
    what it does not take to the outbox, resend from there; until SIGINT/SIGTERM."""
    try:
        config = sidecar_config(options)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    refuse_outbox_locked(config.outbox_url, "--outbox")
    addresses = [("--listen", config.listen_host, config.listen_port)]
    if config.metrics_host is not None:
        addresses.append(("--metrics-listen", config.metrics_host, config.metrics_port))
    if config.rocketmq_listen_host is not None:
        addresses.append(
            ("--rocketmq-listen", config.rocketmq_listen_host, config.rocketmq_listen_port)
        )
    if config.health_listen_host is not None:
        addresses.append(("--health-listen", config.health_listen_host, config.health_listen_port))
    refuse_taken(addresses)
    run_async(run_sidecar(config))


def sidecar_config(o: dict[str, Any]) -> SidecarConfig:
    """The sidecar's configuration from ``rocketbox sidecar``'s options, by parameter name."""
    listen: Endpoint = o["listen"]
    metrics_listen: Endpoint | None = o["metrics_listen"]
    rocketmq_listen: Endpoint | None = o["rocketmq_listen"]
    return SidecarConfig(
        producer=ProducerConfig(
            access_points=o["brokers"],
            namespace=o["namespace"],
            retry_times_when_send_failed=o["retry_times_when_send_failed"],
            send_msg_timeout_ms=o["send_msg_timeout_ms"],
            send_latency_fault_enable=o["send_latency_fault_enable"],
            route_refresh_interval_ms=o["route_refresh_interval_ms"],
            uniq_key_lookup=o["uniq_key_lookup"],
            **o["broker_security"].producer_fields(),
        ),
        outbox_url=o["outbox_url"],
        outbox_threads=o["outbox_threads"],
        outbox_limits=OutboxLimits(
            outbox_entries_max=o["outbox_entries_max"], outbox_bytes_max=o["outbox_bytes_max"]
        ),
        resend=_resend_config(o),
        listen_host=listen.host,
        listen_port=listen.port,
        metrics_host=metrics_listen.host if metrics_listen else None,
        metrics_port=metrics_listen.port if metrics_listen else 0,
        rocketmq_listen_host=rocketmq_listen.host if rocketmq_listen else None,
        rocketmq_listen_port=rocketmq_listen.port if rocketmq_listen else 0,
        rocketmq_advertised=o["rocketmq_advertise"],
        outbox_stats_interval_ms=o["outbox_stats_interval_ms"],
        shutdown_grace_ms=o["shutdown_grace_ms"],
        intake_in_flight_max=o["intake_in_flight_max"],
        pending_calls_max=o["pending_calls_max"],
        coalesce=CoalesceConfig(
            enabled=o["coalesce"],
            coalesce_messages_max=o["coalesce_messages_max"],
            coalesce_bytes_max=o["coalesce_bytes_max"],
            coalesce_requests_in_flight_max=o["coalesce_requests_in_flight_max"],
        ),
        fifo_fence_refresh_interval_ms=o["fifo_fence_refresh_interval_ms"],
        ack_ledger_path=o["ack_ledger_path"],
        ack_ledger_flush_interval_ms=o["ack_ledger_flush_interval_ms"],
        sidecar_id=o["sidecar_id"],
        state_log_interval_ms=o["state_log_interval_ms"],
        **o["app_security"].config_fields(),
    )


def _resend_config(o: dict[str, Any]) -> ResendConfig:
    return ResendConfig(
        resend_concurrency_max=o["resend_concurrency_max"],
        claim_batch_max=o["claim_batch_max"],
        lease_ms=o["lease_ms"],
        poll_interval_ms=o["poll_interval_ms"],
        age_max_s=o["age_max_s"],
        backoff_initial_ms=o["backoff_initial_ms"],
        backoff_max_ms=o["backoff_max_ms"],
        probe_interval_max_ms=o["probe_interval_max_ms"],
        pull_in_ids_max=o["pull_in_ids_max"],
        delivered_retention_hours=o["delivered_retention_hours"],
    )


async def start_sidecar(
    config: SidecarConfig, options: ListenOptions = SIDECAR_LISTEN_OPTIONS
) -> Sidecar:
    """A started sidecar (``rocketbox sidecar`` and ``rocketbox up``); a failure to start is
    the command's error (a listener's in one line naming its option in ``options``)."""
    sidecar = Sidecar(config)
    try:
        await sidecar.start()
    except ListenError as e:
        raise listen_refused(e, options) from e
    except (OutboxError, OSError, ValueError) as e:  # SecurityConfigError too: names the option
        raise click.ClickException(f"the sidecar cannot start: {e}") from e
    if sidecar.metrics_port:
        click.echo(f"sidecar metrics on {config.metrics_host}:{sidecar.metrics_port}")
    if sidecar.health_port:
        click.echo(f"sidecar health on {config.health_listen_host}:{sidecar.health_port}")
    if sidecar.rocketmq_port:
        click.echo(
            f"sidecar RocketMQ front on {config.rocketmq_listen_host}:{sidecar.rocketmq_port} "
            "(apache.rocketmq.v2: an app on an official RocketMQ 5 SDK sets its endpoint here)"
        )
    return sidecar


def readiness_note(sidecar: Sidecar) -> str:
    """What the start banner adds when the sidecar is not ready: NOT READY, and why."""
    if sidecar.readiness_reason == READY:
        return ""
    return (
        f" - NOT READY ({sidecar.readiness_reason}: {sidecar.readiness_detail}); it serves, "
        "answers health NOT_SERVING and becomes READY by itself once the outbox can be written"
    )


async def run_sidecar(config: SidecarConfig) -> None:
    """Run until SIGINT/SIGTERM, then stop gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    sidecar = await start_sidecar(config)
    click.echo(f"sidecar listening on {config.listen_host}:{sidecar.port}{readiness_note(sidecar)}")
    try:
        await stop.wait()
        LOG.info("stopping the sidecar")
    finally:
        await stop_sidecar(sidecar)
    click.echo("sidecar stopped cleanly")


async def stop_sidecar(sidecar: Sidecar) -> None:
    """Stop it; a background task that died (logged with its traceback when it did) is the
    command's error in one line, so the traceback is not printed a second time."""
    try:
        await sidecar.stop()
    except ExceptionGroup as group:
        died = "; ".join(repr(e) for e in group.exceptions)
        raise click.ClickException(
            f"the sidecar stopped because a background task died ({died}); its traceback is "
            "logged above"
        ) from group
