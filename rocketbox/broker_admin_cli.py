"""The broker's admin commands (topic, group, message, flow-control): clients of its
rocketbox.admin.v1.BrokerAdmin service (rocketbox/admin_client.py), registered on the root by
rocketbox/cli.py. They are rocketbox's alone: an Apache RocketMQ proxy does not serve the service,
which each command's --help and failure say (rocketbox/admin_errors.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click
import grpc

from broker.group_config import RETRY_MAX_TIMES_DEFAULT
from rocketbox import admin_client as admin
from rocketbox import admin_render as render
from rocketbox import cluster_groups
from rocketbox.admin_errors import (
    AdminCommand,
    AdminCommandError,
    AdminGroup,
    BrokerUnreachableError,
    reported,
)
from rocketbox.cluster_cli import check_namesrv, serving_brokers
from rocketbox.wording import plural
from rocketbox_api.admin.v1 import broker_admin_pb2 as apb

# Each command prints text for people, or JSON with --json. A failed call prints one line on
# stderr and exits with the code admin_errors.py gives it.
DEFAULT_BROKER = "127.0.0.1:8081"


def check_endpoint(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
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
        metavar="HOST:PORT",
        callback=check_endpoint,
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
        with reported(), admin.AdminClient(endpoint, deadline_s) as client:
            f(client, as_json, **kwargs)

    return command


def echo_answer(as_json: bool, data: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else text)


@click.group(cls=AdminGroup)
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
    kind = render.message_type_name(t.message_type)
    text = f"created topic {t.name}: {plural(t.queue_nums, 'queue')}, {kind}"
    echo_answer(as_json, render.topic_to_dict(t), text)


@topic.command("list")
@admin_command
def topic_list(client: admin.AdminClient, as_json: bool) -> None:
    """List the broker's topics."""
    topics = list(client.list_topics().topics)
    data = {"topics": [render.topic_to_dict(t) for t in topics]}
    echo_answer(as_json, data, render.format_topics(topics))


@topic.command("describe", short_help="Show a topic's settings and its queues' offsets.")
@click.argument("name")
@admin_command
def topic_describe(client: admin.AdminClient, as_json: bool, name: str) -> None:
    """Show topic NAME: its settings and each queue's range of queue offsets."""
    answer = client.describe_topic(name)
    echo_answer(as_json, render.describe_to_dict(answer), render.format_describe(answer))


@topic.command("delete", short_help="Delete a topic (its messages stay until retention).")
@click.argument("name")
@admin_command
def topic_delete(client: admin.AdminClient, as_json: bool, name: str) -> None:
    """Delete topic NAME (its stored messages stay until retention removes them)."""
    t = client.delete_topic(name).topic
    echo_answer(as_json, render.topic_to_dict(t), f"deleted topic {t.name}")


@click.group(cls=AdminGroup)
def message() -> None:
    """Look up stored messages."""


@message.command("get")
@click.argument("message_id")
@click.option(
    "--namesrv",
    default=None,
    metavar="HOST:PORT",
    callback=check_namesrv,
    help="Ask every broker group of the cluster this NameServer knows (its master, or a slave "
    "while the master is gone), not --broker alone.",
)
@admin_command
def message_get(
    client: admin.AdminClient, as_json: bool, message_id: str, namesrv: str | None
) -> None:
    """Every stored copy of the message with MESSAGE_ID."""
    if namesrv is None:
        answer = client.get_message(message_id)
        messages, truncated = list(answer.messages), answer.truncated
    else:
        messages, truncated = _get_in_cluster(namesrv, client.deadline_s, message_id)
    data = render.messages_to_dict(messages, truncated)
    echo_answer(as_json, data, render.format_messages(messages, truncated))


def _get_in_cluster(
    namesrv: str, deadline_s: float, message_id: str
) -> tuple[list[apb.StoredMessage], bool]:
    """What any group holds of the message: NOT_FOUND (exit 1) when none does, unreachable
    (exit 3) when no broker answered."""
    addresses = serving_brokers(namesrv, deadline_s)
    messages: list[apb.StoredMessage] = []
    truncated = False
    failures: list[admin.AdminCallError] = []
    for address in addresses:
        try:
            with admin.AdminClient(address, deadline_s) as client:
                answer = client.get_message(message_id)
        except admin.AdminCallError as e:
            if e.code is not grpc.StatusCode.NOT_FOUND:
                failures.append(e)
                click.echo(str(e), err=True)
            continue
        messages.extend(answer.messages)
        truncated = truncated or answer.truncated
    if messages:
        return messages, truncated
    if failures and len(failures) == len(addresses) and all(f.unreachable for f in failures):
        raise BrokerUnreachableError(f"no broker of the cluster answered ({len(failures)} asked)")
    raise AdminCommandError(
        f"NOT_FOUND: message {message_id} is in none of the {len(addresses)} broker groups "
        f"NameServer {namesrv} knows"
    )


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
    data = render.messages_to_dict(messages, answer.truncated)
    echo_answer(as_json, data, render.format_messages(messages, answer.truncated))


@click.command(
    "flow-control",
    cls=AdminCommand,
    short_help="Force flow control on or off, for one topic or all.",
)
@click.argument("state", type=click.Choice(["on", "off"]))
@click.option("--topic", "topic_name", default=None, help="One topic (default: the whole broker).")
@admin_command
def flow_control(
    client: admin.AdminClient, as_json: bool, state: str, topic_name: str | None
) -> None:
    """Force flow control on or off: sends are refused (TOO_MANY_REQUESTS) while it is on."""
    answer = client.set_flow_control(state == "on", topic_name)
    target = f"topic {topic_name}" if topic_name is not None else "the broker"
    text = f"flow control forced {state} for {target}\n{render.format_flow_control(answer)}"
    echo_answer(as_json, render.flow_control_to_dict(answer), text)


@click.group(cls=AdminGroup, short_help="Create, list, describe, reset and delete consumer groups.")
def group() -> None:
    """Create, list, describe and delete consumer groups, and move their consume offsets."""


@group.command("list")
@admin_command
def group_list(client: admin.AdminClient, as_json: bool) -> None:
    """List the broker's consumer groups and their settings."""
    groups = list(client.list_groups().groups)
    data = {"groups": [render.group_to_dict(g) for g in groups]}
    echo_answer(as_json, data, render.format_groups(groups))


@group.command("describe", short_help="Show a group's consumers, progress and lag.")
@click.argument("name")
@admin_command
def group_describe(client: admin.AdminClient, as_json: bool, name: str) -> None:
    """Show group NAME: settings, connected consumers, per-queue progress (consume offset, lag,
    messages in flight) in every topic it consumed, and its dead-letter queue."""
    answer = client.describe_group(name)
    echo_answer(
        as_json, render.describe_group_to_dict(answer), render.format_describe_group(answer)
    )


@group.command("create")
@click.argument("name")
@click.option("--orderly", is_flag=True, help="FIFO consumption of each message group.")
@click.option(
    "--retry-max-times",
    type=int,
    default=None,
    help=f"0..64 (default: {RETRY_MAX_TIMES_DEFAULT}); then a message goes to %DLQ%NAME.",
)
@click.option(
    "--broadcast",
    is_flag=True,
    help="Every consumer receives every message, each with its own progress (default: the "
    "consumers share them). Fixed once created.",
)
@cluster_groups.cluster_wide
@admin_command
def group_create(
    client: admin.AdminClient,
    as_json: bool,
    name: str,
    orderly: bool,
    retry_max_times: int | None,
    broadcast: bool,
    namesrv: str | None,
    cluster_name: str | None,
) -> None:
    """Create consumer group NAME. An existing group is refused, whatever its settings: its
    consume model never changes under its consumers. With --namesrv, on every master of the
    cluster; one that has the group with the same settings counts as done."""
    if namesrv is None:
        g = client.create_group(name, orderly, retry_max_times, broadcast).group
        echo_answer(as_json, render.group_to_dict(g), render.format_created_group(g))
        return
    retries = RETRY_MAX_TIMES_DEFAULT if retry_max_times is None else retry_max_times
    wanted = apb.Group(name=name, orderly=orderly, retry_max_times=retries, broadcast=broadcast)
    cluster, masters = cluster_groups.cluster_masters(namesrv, client.deadline_s, cluster_name)
    outcomes = cluster_groups.create_on_masters(masters, client.deadline_s, wanted)
    cluster_groups.report(cluster_groups.CREATED, cluster, wanted, outcomes, as_json)


@group.command("delete", short_help="Delete a consumer group (mqadmin's deleteSubGroup).")
@click.argument("name")
@cluster_groups.cluster_wide
@admin_command
def group_delete(
    client: admin.AdminClient,
    as_json: bool,
    name: str,
    namesrv: str | None,
    cluster_name: str | None,
) -> None:
    """Delete consumer group NAME, so that it can be created again with other settings. Its
    consume progress stays (a group created again continues it). Refused while a consumer of
    the group is connected. With --namesrv, on every master of the cluster."""
    if namesrv is None:
        g = client.delete_group(name).group
        echo_answer(as_json, render.group_to_dict(g), f"deleted group {g.name}")
        return
    cluster, masters = cluster_groups.cluster_masters(namesrv, client.deadline_s, cluster_name)
    outcomes = cluster_groups.delete_on_masters(masters, client.deadline_s, name)
    cluster_groups.report(cluster_groups.DELETED, cluster, apb.Group(name=name), outcomes, as_json)


@group.command("reset-offset", short_help="Move a group's consume offsets: first, last or a time.")
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
    answer = client.reset_offset(name, topic_name, target, timestamp_ms)
    if answer.broadcast_members:  # a broadcast group: every member moved
        members = list(answer.broadcast_members)
        text = f"group {name} reset to {target.lower()}\n{render.format_broadcast_members(members)}"
        echo_answer(as_json, {"broadcast_members": render.members_to_dicts(members)}, text)
        return
    progress = answer.progress
    text = f"group {name} reset to {target.lower()}\n{render.format_group_progress(progress)}"
    echo_answer(as_json, render.group_progress_to_dict(progress), text)
