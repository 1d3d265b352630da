"""``rocketbox cluster list``: a cluster's brokers as its NameServer knows them, and the NameServer
look-ups ``rocketbox message get --namesrv`` shares.

One row per live broker: cluster, group, id, role, address, commitlog max offset, replication lag
(a slave's: its master's max offset minus its own, both from their last registrations, so it is
as fresh as those), and how long ago it last registered. ``--json`` for scripts. A failed call is
reported as every admin command's (rocketbox/admin_errors.py): a NameServer that cannot be
reached, or does not answer in --deadline-s, exits UNREACHABLE_EXIT_CODE; an endpoint that does
not serve rocketbox's NameServer service (Apache RocketMQ's NameServer speaks its remoting
protocol) exits NOT_SERVED_EXIT_CODE.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import click
import grpc

from rocketbox import admin_client as admin
from rocketbox.admin_errors import AdminGroup, reported
from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb
from rocketbox_api.namesrv.v1 import namesrv_pb2_grpc

DEFAULT_NAMESRV = "127.0.0.1:9876"
MASTER_ID = 0
_ROLES = {
    npb.BROKER_ROLE_ASYNC_MASTER: "ASYNC_MASTER",
    npb.BROKER_ROLE_SYNC_MASTER: "SYNC_MASTER",
    npb.BROKER_ROLE_SLAVE: "SLAVE",
}


@dataclass(frozen=True, slots=True)
class BrokerRow:
    cluster: str
    group: str
    broker_id: int
    role: str
    address: str
    ha_address: str
    max_offset: int
    replication_lag_bytes: int | None  # a slave's; None for a master or a slave without one
    last_registration_age_ms: int


def check_namesrv(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return admin.parse_endpoint(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def cluster_info(namesrv: str, deadline_s: float) -> npb.GetBrokerClusterInfoResponse:
    """The NameServer's answer; admin.AdminCallError when the call fails."""
    with grpc.insecure_channel(namesrv) as channel:
        stub = namesrv_pb2_grpc.NameServerServiceStub(channel)
        try:
            answer: npb.GetBrokerClusterInfoResponse = stub.GetBrokerClusterInfo(
                npb.GetBrokerClusterInfoRequest(), timeout=deadline_s
            )
        except grpc.RpcError as e:
            raise admin.call_error(
                e, namesrv, deadline_s, admin.NAMESRV_SERVICE, "NameServer"
            ) from e
    return answer


def broker_rows(answer: npb.GetBrokerClusterInfoResponse) -> list[BrokerRow]:
    masters = {
        (b.cluster_name, b.broker_name): b.max_phy_offset
        for b in answer.brokers
        if b.broker_id == MASTER_ID
    }
    rows = []
    for b in answer.brokers:
        master_offset = masters.get((b.cluster_name, b.broker_name))
        lag = None
        if b.broker_id != MASTER_ID and master_offset is not None:
            lag = max(0, master_offset - b.max_phy_offset)
        rows.append(
            BrokerRow(
                cluster=b.cluster_name,
                group=b.broker_name,
                broker_id=b.broker_id,
                role=_ROLES.get(b.role, "UNKNOWN"),
                address=b.broker_addr,
                ha_address=b.ha_server_addr,
                max_offset=b.max_phy_offset,
                replication_lag_bytes=lag,
                last_registration_age_ms=max(0, answer.now_ms - b.last_update_timestamp_ms),
            )
        )
    return rows


def serving_brokers(namesrv: str, deadline_s: float) -> list[str]:
    """Each group's master, or its lowest slave while the master is gone: one address a group."""
    chosen: dict[tuple[str, str], npb.BrokerInfo] = {}
    for b in cluster_info(namesrv, deadline_s).brokers:
        key = (b.cluster_name, b.broker_name)
        if key not in chosen or b.broker_id < chosen[key].broker_id:
            chosen[key] = b
    return [b.broker_addr for _, b in sorted(chosen.items())]


def format_rows(rows: list[BrokerRow]) -> str:
    if not rows:
        return "no brokers"
    header = ("CLUSTER", "GROUP", "ID", "ROLE", "ADDRESS", "MAX OFFSET", "LAG BYTES", "AGE")
    table = [header] + [
        (
            r.cluster,
            r.group,
            str(r.broker_id),
            r.role,
            r.address,
            str(r.max_offset),
            "-" if r.replication_lag_bytes is None else str(r.replication_lag_bytes),
            f"{r.last_registration_age_ms / 1000:.1f}s",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    )


@click.group(cls=AdminGroup)
def cluster() -> None:
    """Look at a cluster's brokers through its NameServer."""


@cluster.command("list", short_help="List the brokers a NameServer knows, one row each.")
@click.option(
    "--namesrv",
    default=DEFAULT_NAMESRV,
    metavar="HOST:PORT",
    callback=check_namesrv,
    help="The NameServer's address.",
)
@click.option(
    "--deadline-s",
    default=admin.CALL_DEADLINE_S,
    type=click.FloatRange(min=0, min_open=True),
    help="Give up on the call after this long.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def cluster_list(namesrv: str, deadline_s: float, as_json: bool) -> None:
    """Every live broker: cluster, group, id, role, address, commitlog max offset, a slave's
    replication lag in bytes, and the age of its last registration."""
    with reported():
        rows = broker_rows(cluster_info(namesrv, deadline_s))
    if as_json:
        data: dict[str, Any] = {"brokers": [asdict(r) for r in rows]}
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        click.echo(format_rows(rows))
