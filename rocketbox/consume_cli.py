"""``rocketbox consume``: read a topic as a consumer group from any apache.rocketmq.v2 endpoint (a
rocketbox broker, or an Apache RocketMQ 5 proxy), with the official RocketMQ 5 client's
SimpleConsumer (pop: receive, print, ack), and print each message.

The protocol alone does the consuming: QueryRoute (checked first, so that an unknown topic or an
endpoint that serves no v2 is one clear line), then the SimpleConsumer's own Telemetry,
Heartbeat, ReceiveMessage and AckMessage. Where the endpoint also serves rocketbox's broker admin
service, it is used before that to check the topic and to place a new group (below); an endpoint
that does not (UNIMPLEMENTED: a RocketMQ proxy) simply goes without it.

Where a group starts is RocketMQ's ConsumeFromWhere, and as there it applies only to a group
with no position on the topic yet: a new group starts at the first message still stored (the
broker's default for pop groups), or, with ``--from last``, after the last one — set through
the broker's admin ResetOffset before the first receive. A group that has consumed the topic
carries on from where it stopped. Without the admin service ``--from`` does not apply: a new
group starts where the endpoint starts one.

A group the endpoint does not know (CONSUMER_GROUP_NOT_FOUND, as a proxy answers when its broker
does not create groups on first use) is one line saying how to create it, on RocketMQ and on
rocketbox.

With ``--namespace`` the topic and group are the namespace's (stored as NAMESPACE%NAME). Against
a broker with --auth, the consumer signs with ROCKETBOX_ACCESS_KEY and ROCKETBOX_SECRET_KEY; a
user that is not an admin cannot place a group (the admin service is for admins), so the
group starts where the broker starts a new one (its first stored message).

Without ``--follow`` the command stops when one receive waits ``--wait-s`` and nothing arrives.
Ctrl-C stops it cleanly: what was printed is acked, what was received and not printed becomes
visible again after the invisible duration.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import click
import grpc
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.v5.exception import ClientException

from rocketbox import admin_client as admin
from rocketbox.admin_render import format_time_ms
from rocketbox.broker_admin_cli import check_endpoint
from rocketbox.consume_protocol import (
    BrokerRotation,
    ConsumeError,
    broker_queues,
    consume_failure,
    topic_not_found,
    unreachable,
    wait_for_settings,
)
from rocketbox.wording import plural
from rocketbox_api.credentials import CredentialsError, credentials_from_env
from rocketbox_api.names import namespaced

DEFAULT_BROKER = "127.0.0.1:8081"
DEFAULT_GROUP = "rocketbox-cli"
# Messages asked for in one receive (the broker answers at most 32).
RECEIVE_BATCH_MAX = 16
# A received message stays hidden from the group this long; printing and acking take far less.
INVISIBLE_DURATION_S = 30
# The proxy's (and our broker's) long-polling limit is 20 s.
WAIT_S_MAX = 20
WAIT_S_DEFAULT = 5


def place_group(client: admin.AdminClient, group: str, topic: str, start: str) -> str:
    """Applies ``--from`` (FIRST or LAST) when ``group`` has no position on ``topic``; says
    where the group starts, for the log line."""
    try:
        client.describe_topic(topic)
    except admin.AdminCallError as e:
        if e.code is not grpc.StatusCode.NOT_FOUND:
            raise
        # An error here, not a silent empty wait.
        raise topic_not_found(client.endpoint, topic) from e
    try:
        known = client.describe_group(group)
    except admin.AdminCallError as e:
        if e.code is not grpc.StatusCode.NOT_FOUND:
            raise
        client.create_group(group, orderly=False, retry_max_times=None)
        consumed = False
    else:
        consumed = any(t.topic == topic for t in known.topics)
    if consumed:
        return f"group {group} carries on where it stopped on {topic} (--from: new groups only)"
    if start == "LAST":
        client.reset_offset(group, topic, "LAST", None)
        return f"group {group} is new on {topic}: starts after the last message"
    return f"group {group} is new on {topic}: starts at the first message still stored"


def placed_group(endpoint: str, group: str, topic: str, start: str) -> str:
    """``place_group`` where the endpoint offers rocketbox's admin service to this caller; where
    it does not (a RocketMQ proxy, or a user that is no admin), what the group does instead."""
    try:
        with admin.AdminClient(endpoint) as client:
            return place_group(client, group, topic, start)
    except admin.AdminCallError as e:
        if e.not_served:
            return (
                f"{endpoint} serves no rocketbox admin service: the group is not placed "
                "(--from needs it), it starts where the endpoint starts a new group"
            )
        if e.code is grpc.StatusCode.PERMISSION_DENIED:
            return "not an admin: the group is not placed, it starts where the broker starts it"
        if e.unreachable:
            raise unreachable(str(e)) from e
        raise ConsumeError(str(e)) from e


def body_fields(body: bytes) -> dict[str, str]:
    """The body as UTF-8 text, or base64 when it is not valid UTF-8."""
    try:
        return {"body": body.decode("utf-8"), "body_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "body_encoding": "base64"}


def message_to_dict(m: Any) -> dict[str, Any]:
    """A message of the official client (rocketmq.v5.model.Message), JSON-ready."""
    born_ms, delivery_ms = m.born_timestamp, m.delivery_timestamp
    data: dict[str, Any] = {
        "message_id": m.message_id,
        "topic": m.topic,
        "tag": m.tag,
        "keys": sorted(m.keys),
        "message_group": m.message_group,
        "born_time": format_time_ms(born_ms) if born_ms else None,
        "delivery_time": format_time_ms(delivery_ms) if delivery_ms else None,
        "delivery_attempt": m.delivery_attempt,
        "properties": dict(sorted(m.properties.items())),
    }
    data.update(body_fields(bytes(m.body)))
    return data


def message_line(data: dict[str, Any]) -> str:
    parts = [str(data["message_id"])]
    if data["tag"]:
        parts.append(f"tag={data['tag']}")
    if data["keys"]:
        parts.append("keys=" + ",".join(data["keys"]))
    if data["message_group"]:
        parts.append(f"group={data['message_group']}")
    parts.append(f"born={data['born_time']}")
    if data["delivery_time"]:
        parts.append(f"delivery={data['delivery_time']}")
    parts.extend(f"{k}={v}" for k, v in data["properties"].items())
    body = data["body"] if data["body_encoding"] == "utf-8" else f"base64:{data['body']}"
    return "  ".join(parts) + f"  | {body}"


def _receive_loop(
    consumer: SimpleConsumer,
    rotation: BrokerRotation,
    count: int | None,
    follow: bool,
    as_json: bool,
    wait_s: int,
) -> int:
    printed = 0
    empty_in_a_row = 0
    while count is None or printed < count:
        batch = RECEIVE_BATCH_MAX if count is None else min(RECEIVE_BATCH_MAX, count - printed)
        messages = rotation.receive(batch, INVISIBLE_DURATION_S, wait_s)
        empty_in_a_row = 0 if messages else empty_in_a_row + 1
        if empty_in_a_row >= rotation.brokers and not follow:
            n = rotation.brokers
            brokers = "" if n == 1 else f" from each of the {plural(n, 'broker')}"
            click.echo(
                f"nothing arrived within {wait_s} s{brokers}: stopping (--follow waits)", err=True
            )
            break
        for m in messages:
            data = message_to_dict(m)
            click.echo(json.dumps(data, sort_keys=True) if as_json else message_line(data))
            consumer.ack(m)
            printed += 1
    return printed


@click.command("consume", short_help="Print and ack a topic's messages as a consumer group.")
@click.argument("topic")
@click.option(
    "--broker",
    "endpoint",
    default=DEFAULT_BROKER,
    envvar="ROCKETBOX_BROKER",
    metavar="HOST:PORT",
    callback=check_endpoint,
    help="The gRPC address of a rocketbox broker or an Apache RocketMQ proxy.",
)
@click.option("--group", default=DEFAULT_GROUP, help="The consumer group (its position is kept).")
@click.option(
    "--from",
    "start",
    type=click.Choice(["first", "last"], case_sensitive=False),
    default="first",
    help="Where a group new to TOPIC starts: its first stored message, or after its last.",
)
@click.option("--tag", default="*", help="Tag filter: *, one tag, or TagA||TagB.")
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after N messages.")
@click.option("--follow", is_flag=True, help="Keep waiting for messages (Ctrl-C stops).")
@click.option(
    "--wait-s",
    default=WAIT_S_DEFAULT,
    type=click.IntRange(1, WAIT_S_MAX),
    help="Without --follow: stop when nothing arrives within this long.",
)
@click.option("--namespace", default="", help="The namespace of TOPIC and --group.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
def consume_command(
    topic: str,
    endpoint: str,
    group: str,
    start: str,
    tag: str,
    count: int | None,
    follow: bool,
    wait_s: int,
    namespace: str,
    as_json: bool,
) -> None:
    """Print TOPIC's messages as consumer group --group reads them from a rocketbox broker or an
    Apache RocketMQ proxy, acking each after it is printed: message id, tag, keys, born time,
    properties and body (UTF-8 text, or base64 when binary).

    Exit 0; 1 when the endpoint refuses (an unknown topic or group: the line says how to
    create it); 3 when it cannot be reached; 6 when it serves no apache.rocketmq.v2."""
    try:
        credentials = credentials_from_env()
    except CredentialsError as e:
        raise click.ClickException(str(e)) from e
    full_group, full_topic = namespaced(namespace, group), namespaced(namespace, topic)
    click.echo(placed_group(endpoint, full_group, full_topic, start.upper()), err=True)
    consumer = SimpleConsumer(
        ClientConfiguration(
            endpoint,
            Credentials(credentials.access_key, credentials.secret_key)
            if credentials is not None
            else Credentials(),
            namespace,
        ),
        group,
        {topic: FilterExpression(tag)},
        await_duration=wait_s,
    )
    try:
        queues = broker_queues(consumer, endpoint, topic)
    except (ClientException, grpc.RpcError) as e:
        raise consume_failure(e, endpoint, full_topic, full_group) from e
    consumer.startup()
    try:
        wait_for_settings(consumer)
        rotation = BrokerRotation(consumer, topic, queues)
        printed = _receive_loop(consumer, rotation, count, follow, as_json, wait_s)
    except KeyboardInterrupt:
        click.echo("interrupted: stopping", err=True)
        printed = -1
    except Exception as e:  # the client raises a bare Exception too (a route it lost)
        raise consume_failure(e, endpoint, full_topic, full_group) from e
    finally:
        consumer.shutdown()
    if printed >= 0:
        click.echo(f"{plural(printed, 'message')} consumed", err=True)
    sys.exit(0)
