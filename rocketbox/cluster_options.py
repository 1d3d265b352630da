"""``rocketbox broker``'s cluster options (RocketMQ's brokerClusterName, brokerName, brokerId,
brokerRole, namesrvAddr, haListenPort, haMasterAddress), as one decorator and one parser.

The options arrive as ``cluster_options``, a ``ClusterOptions``; ``config_fields`` is what they
set in BrokerConfig. Kept apart from broker_cli.py, which is the process's life.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from broker.config import MASTER_ID, BrokerRole
from rocketbox.sidecar_cli import optional_listen
from sidecar.channels import Endpoint


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    broker_cluster_name: str
    broker_name: str
    broker_id: int
    broker_role: BrokerRole
    namesrv_addr: tuple[str, ...]
    register_broker_interval_ms: int
    ha_listen: Endpoint | None
    ha_master_address: str | None
    slave_sync_interval_ms: int
    ha_send_heartbeat_interval_ms: int
    ha_housekeeping_interval_ms: int
    # The store's: how long a SYNC_FLUSH put waits for its fsync and a SYNC_MASTER's for a slave.
    sync_flush_timeout_ms: int

    def config_fields(self) -> dict[str, Any]:
        """BrokerConfig's keyword arguments these options set."""
        return {
            "broker_cluster_name": self.broker_cluster_name,
            "broker_name": self.broker_name,
            "broker_id": self.broker_id,
            "broker_role": self.broker_role,
            "namesrv_addr": self.namesrv_addr,
            "register_broker_interval_ms": self.register_broker_interval_ms,
            "ha_listen_host": self.ha_listen.host if self.ha_listen else None,
            "ha_listen_port": self.ha_listen.port if self.ha_listen else 0,
            "ha_master_address": self.ha_master_address,
            "slave_sync_interval_ms": self.slave_sync_interval_ms,
            "ha_send_heartbeat_interval_ms": self.ha_send_heartbeat_interval_ms,
            "ha_housekeeping_interval_ms": self.ha_housekeeping_interval_ms,
        }


def parse_namesrv_addr(value: str | None) -> tuple[str, ...]:
    """RocketMQ's namesrvAddr: ``host:port;host:port`` (each HOST:PORT checked)."""
    if not value:
        return ()
    addresses = tuple(part.strip() for part in value.split(";") if part.strip())
    for address in addresses:
        Endpoint.parse(address)  # ValueError names the address and what is wrong
    return addresses


def _namesrv(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...]:
    try:
        return parse_namesrv_addr(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def _master_address(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if not value:
        return None
    try:
        Endpoint.parse(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    return value


_OPTIONS: tuple[Callable[[Callable[..., None]], Callable[..., None]], ...] = (
    click.option(
        "--broker-cluster",
        "broker_cluster_name",
        default="DefaultCluster",
        show_default=True,
        help="The cluster this broker's group belongs to (RocketMQ's brokerClusterName).",
    ),
    click.option(
        "--broker-name",
        default="rocketbox-broker",
        show_default=True,
        help="The broker group: a master and its slaves share the name.",
    ),
    click.option(
        "--broker-id",
        default=MASTER_ID,
        show_default=True,
        type=click.IntRange(min=0),
        help="0 for the group's master, 1 and up for its slaves.",
    ),
    click.option(
        "--broker-role",
        type=click.Choice([r.value for r in BrokerRole]),
        default=BrokerRole.ASYNC_MASTER.value,
        show_default=True,
        help="ASYNC_MASTER answers a send after its own store; SYNC_MASTER once a slave holds "
        "it too; SLAVE refuses sends and copies its master.",
    ),
    click.option(
        "--namesrv",
        "namesrv_addr",
        default=None,
        callback=_namesrv,
        metavar="HOST:PORT;HOST:PORT",
        help="NameServers to register with, separated by ';' (default: none; a stand-alone "
        "broker).",
    ),
    click.option(
        "--register-broker-interval-ms",
        default=30_000,
        show_default=True,
        type=click.IntRange(min=1),
        help="How often the broker registers with each NameServer.",
    ),
    click.option(
        "--ha-listen",
        default=None,
        callback=optional_listen,
        metavar="HOST:PORT",
        help="Where a master's slaves connect for replication (port 0: a free port; default: "
        "none).",
    ),
    click.option(
        "--ha-master-address",
        default=None,
        callback=_master_address,
        metavar="HOST:PORT",
        help="A slave's master HA address (default: learned from the NameServer).",
    ),
    click.option(
        "--slave-sync-interval-ms",
        default=10_000,
        show_default=True,
        type=click.IntRange(min=1),
        help="How often a slave copies its master's topics, groups and consume progress.",
    ),
    click.option(
        "--ha-send-heartbeat-interval-ms",
        default=5_000,
        show_default=True,
        type=click.IntRange(min=1),
        help="A slave reports its offset at least this often; an idle master sends a heartbeat.",
    ),
    click.option(
        "--ha-housekeeping-interval-ms",
        default=20_000,
        show_default=True,
        type=click.IntRange(min=2),
        help="An HA connection silent this long is closed (and a slave's made again).",
    ),
    click.option(
        "--sync-flush-timeout-ms",
        default=5_000,
        show_default=True,
        type=click.IntRange(min=1),
        help="How long a put waits for its fsync (--flush sync) and a SYNC_MASTER's for a "
        "slave: past it, the message is stored and answered with the weakness.",
    ),
)
_NAMES = (
    "broker_cluster_name",
    "broker_name",
    "broker_id",
    "broker_role",
    "namesrv_addr",
    "register_broker_interval_ms",
    "ha_listen",
    "ha_master_address",
    "slave_sync_interval_ms",
    "ha_send_heartbeat_interval_ms",
    "ha_housekeeping_interval_ms",
    "sync_flush_timeout_ms",
)


def cluster_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the cluster options; the command receives them as one ``cluster`` argument."""

    def gather(**kwargs: Any) -> None:
        fields = {name: kwargs.pop(name) for name in _NAMES}
        fields["broker_role"] = BrokerRole(fields["broker_role"])
        command(cluster=ClusterOptions(**fields), **kwargs)

    gather.__name__ = command.__name__
    gather.__doc__ = command.__doc__
    for option in reversed(_OPTIONS):
        gather = option(gather)
    return gather
