"""``rocketbox group create|delete --namesrv``: a consumer group created or deleted on every
master of a cluster, as mqadmin's ``updateSubGroup -c`` and ``deleteSubGroup -c`` do.

Each broker keeps its own group table, and a consumer of a cluster reads the queues of every
broker group. A broadcast group created on one master alone is, on the others, a clustering
group made on first use, where its consumers share the messages: a group's settings must be on
every master. The masters are the NameServer's (GetBrokerClusterInfo): broker id 0 of each
broker group of the cluster. Each master hands the change to its slaves (broker/ha). A broker
group whose master is not registered cannot take the change and is reported as failed.

One outcome for each broker group: ``created``; ``exists`` (with the same settings: so a command
that failed on one master can be run again); ``deleted``; ``absent`` (a delete where the group
is not); ``failed`` (with why). The command exits 0 when every master ends as asked,
FAILED_EXIT_CODE otherwise, and UNREACHABLE_EXIT_CODE when no master answered.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import click
import grpc

from rocketbox.admin_client import AdminCallError, AdminClient
from rocketbox.admin_errors import AdminCommandError, BrokerUnreachableError
from rocketbox.admin_render import group_to_dict
from rocketbox.cluster_cli import MASTER_ID, check_namesrv, cluster_info
from rocketbox_api.admin.v1 import broker_admin_pb2 as apb

CREATED, EXISTS, DELETED, ABSENT, FAILED = "created", "exists", "deleted", "absent", "failed"


@dataclass(frozen=True, slots=True)
class MasterOutcome:
    broker_name: str
    address: str  # "" when the broker group has no master registered
    outcome: str
    detail: str = ""
    unreachable: bool = False


def cluster_wide(f: Callable[..., None]) -> Callable[..., None]:
    """--namesrv and --cluster for a group command; the command gets ``namesrv`` (None: the
    --broker alone) and ``cluster_name``."""

    @click.option(
        "--namesrv",
        default=None,
        metavar="HOST:PORT",
        callback=check_namesrv,
        help="Do it on every master of the cluster this NameServer knows (mqadmin's -c), not "
        "on --broker alone; each master's slaves take it from their master.",
    )
    @click.option(
        "--cluster",
        "cluster_name",
        default=None,
        metavar="NAME",
        help="With --namesrv: the cluster (needed when the NameServer knows more than one).",
    )
    @functools.wraps(f)
    def command(*args: Any, namesrv: str | None, cluster_name: str | None, **kwargs: Any) -> None:
        if cluster_name is not None and namesrv is None:
            raise click.UsageError("--cluster goes with --namesrv")
        f(*args, namesrv=namesrv, cluster_name=cluster_name, **kwargs)

    return command


def cluster_masters(
    namesrv: str, deadline_s: float, cluster_name: str | None
) -> tuple[str, list[tuple[str, str]]]:
    """The cluster's name and (broker name, master address, "" when none) of each of its broker
    groups, by name."""
    brokers = cluster_info(namesrv, deadline_s).brokers
    clusters = sorted({b.cluster_name for b in brokers})
    if cluster_name is None:
        if len(clusters) != 1:
            known = ", ".join(clusters) or "none"
            raise click.UsageError(
                f"NameServer {namesrv} knows {len(clusters)} clusters ({known}): name one with "
                "--cluster"
            )
        cluster_name = clusters[0]
    elif cluster_name not in clusters:
        raise AdminCommandError(
            f"NOT_FOUND: NameServer {namesrv} knows no cluster {cluster_name!r} (it knows: "
            f"{', '.join(clusters) or 'none'})"
        )
    masters: dict[str, str] = {}
    for b in brokers:
        if b.cluster_name == cluster_name:
            known_address = masters.get(b.broker_name, "")
            masters[b.broker_name] = b.broker_addr if b.broker_id == MASTER_ID else known_address
    return cluster_name, sorted(masters.items())


def create_on_masters(
    masters: list[tuple[str, str]], deadline_s: float, wanted: apb.Group
) -> list[MasterOutcome]:
    def create(client: AdminClient) -> tuple[str, str]:
        try:
            client.create_group(
                wanted.name, wanted.orderly, wanted.retry_max_times, wanted.broadcast
            )
        except AdminCallError as e:
            if e.code is not grpc.StatusCode.ALREADY_EXISTS:
                raise
            found = client.describe_group(wanted.name).group
            if found != wanted:
                return FAILED, f"exists with other settings: {found_settings(found)}"
            return EXISTS, "with the same settings"
        return CREATED, ""

    return list(_on_each(masters, deadline_s, create))


def delete_on_masters(
    masters: list[tuple[str, str]], deadline_s: float, group: str
) -> list[MasterOutcome]:
    def delete(client: AdminClient) -> tuple[str, str]:
        try:
            client.delete_group(group)
        except AdminCallError as e:
            if e.code is not grpc.StatusCode.NOT_FOUND:
                raise
            return ABSENT, ""
        return DELETED, ""

    return list(_on_each(masters, deadline_s, delete))


def _on_each(
    masters: list[tuple[str, str]],
    deadline_s: float,
    call: Callable[[AdminClient], tuple[str, str]],
) -> Iterator[MasterOutcome]:
    for broker_name, address in masters:
        if not address:
            yield MasterOutcome(broker_name, "", FAILED, "no master registered")
            continue
        try:
            with AdminClient(address, deadline_s) as client:
                outcome, detail = call(client)
        except AdminCallError as e:
            yield MasterOutcome(broker_name, address, FAILED, str(e), e.unreachable)
            continue
        yield MasterOutcome(broker_name, address, outcome, detail)


def found_settings(group: apb.Group) -> str:
    kind = "orderly" if group.orderly else "concurrent"
    model = "broadcasting" if group.broadcast else "clustering"
    return f"{kind}, retry_max_times {group.retry_max_times}, {model}"


def report(
    verb: str,
    cluster_name: str,
    group: apb.Group,
    outcomes: list[MasterOutcome],
    as_json: bool,
) -> None:
    """Print the outcomes (``verb``: CREATED or DELETED; ``group``: the settings asked for, the
    name alone for a delete); raise the command's error when a master did not end as asked."""
    if as_json:
        data = {
            "cluster": cluster_name,
            "group": group_to_dict(group) if verb == CREATED else {"name": group.name},
            "brokers": [asdict(o) for o in outcomes],
        }
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        settings = f" ({found_settings(group)})" if verb == CREATED else ""
        click.echo(f"group {group.name}{settings} on cluster {cluster_name}:")
        for o in outcomes:
            detail = f": {o.detail}" if o.detail else ""
            click.echo(f"  {o.broker_name}  {o.address or '-'}  {o.outcome}{detail}")
    failed = [o for o in outcomes if o.outcome == FAILED]
    if failed and len(failed) == len(outcomes) and all(o.unreachable for o in failed):
        raise BrokerUnreachableError(f"no master of cluster {cluster_name} answered")
    if failed:
        raise AdminCommandError(
            f"group {group.name} not {verb} on {len(failed)} of {len(outcomes)} masters of "
            f"cluster {cluster_name}: {', '.join(o.broker_name for o in failed)}"
        )
    if verb == DELETED and all(o.outcome == ABSENT for o in outcomes):
        raise AdminCommandError(
            f"NOT_FOUND: group {group.name} is on none of the {len(outcomes)} masters of "
            f"cluster {cluster_name}"
        )
