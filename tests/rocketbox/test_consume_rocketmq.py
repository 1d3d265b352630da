"""`rocketbox consume` and the admin commands against a stand-in Apache RocketMQ 5 proxy (its own
process, serving only apache.rocketmq.v2, two brokers): consume reads and acks what the official
producer sent to both brokers, through the protocol alone, and stops after one empty round; an
unknown group or topic is one line saying how to create it with mqadmin and with rocketbox, exit
1; --wait-s below the proxy's minimum polling time still receives; an endpoint that serves no v2
at all (a rocketbox NameServer) is one line and the not-served exit code. The admin-only commands
(topic, group, message, flow-control, acl, cluster) answer in one line that the endpoint does
not serve rocketbox's service, naming the mqadmin command to use, with their own exit code, and
each one's --help says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from rocketbox.cli import main
from rocketbox.envvars import commands_of
from rocketbox.exit_codes import FAILED_EXIT_CODE, NOT_SERVED_EXIT_CODE
from tests.cluster.processes import NamesrvProcess
from tests.rocketbox_process import rocketbox_cli as rocketbox
from tests.rocketmq_proxy import RocketMQProxy, rocketmq_proxy

pytestmark = pytest.mark.slow

KNOWN_GROUP = "CliReaders"
TOPICS = ("CliOrders", "CliDrain", "CliQuick")
ADMIN_ONLY = ("acl", "cluster", "flow-control", "group", "message", "topic")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocketMQProxy]:
    """Groups are not created on first use here: only KNOWN_GROUP exists."""
    data_dir = tmp_path_factory.mktemp("rocketmq-proxy")
    with rocketmq_proxy(
        data_dir, topics=list(TOPICS), groups=[KNOWN_GROUP], auto_create_group=False
    ) as p:
        yield p


def send(proxy: RocketMQProxy, topic: str, bodies: list[str]) -> list[str]:
    """Sent with the official producer (it spreads them over both brokers' queues)."""
    producer = Producer(ClientConfiguration(proxy.endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        ids = []
        for i, body in enumerate(bodies):
            m = Message()
            m.topic, m.body, m.tag, m.keys = topic, body.encode(), "Created", f"order-{i}"
            m.add_property("region", "eu")
            ids.append(producer.send(m).message_id)
        return ids
    finally:
        producer.shutdown()


def consume_json(proxy: RocketMQProxy, topic: str, *args: str) -> list[dict[str, Any]]:
    done = rocketbox(
        "consume", topic, "--group", KNOWN_GROUP, "--json", *args, broker=proxy.endpoint
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "serves no rocketbox admin service" in done.stderr, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_consume_reads_and_acks_what_both_brokers_hold(proxy: RocketMQProxy) -> None:
    sent = send(proxy, "CliOrders", [f"order {i}" for i in range(8)])
    assert {m.broker_name for m in proxy.stored("CliOrders")} == {"broker-a", "broker-b"}
    got = consume_json(proxy, "CliOrders", "--count", "8")
    assert sorted(m["message_id"] for m in got) == sorted(sent)
    first = next(m for m in got if m["message_id"] == sent[0])
    assert (first["tag"], first["keys"], first["body"]) == ("Created", ["order-0"], "order 0")
    assert first["properties"]["region"] == "eu"
    assert len(proxy.acked(KNOWN_GROUP)) == 8
    # All acked: the next run finds nothing on either broker and says so.
    done = rocketbox("consume", "CliOrders", "--group", KNOWN_GROUP, broker=proxy.endpoint)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "from each of the 2 brokers: stopping" in done.stderr, done.stderr
    assert "0 messages consumed" in done.stderr


def test_without_count_consume_drains_both_brokers_then_stops(proxy: RocketMQProxy) -> None:
    sent = send(proxy, "CliDrain", [f"drain {i}" for i in range(6)])
    got = consume_json(proxy, "CliDrain")
    assert sorted(m["message_id"] for m in got) == sorted(sent)


def test_a_wait_below_the_proxys_polling_minimum_still_receives(proxy: RocketMQProxy) -> None:
    [sent] = send(proxy, "CliQuick", ["quick"])
    got = consume_json(proxy, "CliQuick", "--wait-s", "1")
    assert [m["message_id"] for m in got] == [sent]


def test_an_unknown_group_says_how_to_create_it(proxy: RocketMQProxy) -> None:
    done = rocketbox("consume", "CliOrders", "--group", "CliNobody", broker=proxy.endpoint)
    assert done.returncode == FAILED_EXIT_CODE, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert "consumer group CliNobody does not exist" in error
    assert "CONSUMER_GROUP_NOT_FOUND" in error
    assert "`mqadmin updateSubGroup -n <namesrv> -c <cluster> -g CliNobody`" in error
    assert "`rocketbox group create CliNobody`" in error


def test_an_unknown_topic_says_how_to_create_it(proxy: RocketMQProxy) -> None:
    done = rocketbox("consume", "CliMissing", "--group", KNOWN_GROUP, broker=proxy.endpoint)
    assert done.returncode == FAILED_EXIT_CODE, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert "topic CliMissing does not exist" in error
    assert "`mqadmin updateTopic -n <namesrv> -c <cluster> -t CliMissing`" in error
    assert "`rocketbox topic create CliMissing`" in error


def test_an_endpoint_serving_no_v2_is_one_line_and_the_not_served_code() -> None:
    with NamesrvProcess() as namesrv:
        done = rocketbox("consume", "CliOrders", broker=namesrv.endpoint)
    assert done.returncode == NOT_SERVED_EXIT_CODE, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert f"{namesrv.endpoint} does not serve apache.rocketmq.v2.MessagingService" in error


@pytest.mark.parametrize(
    ("args", "mqadmin"),
    [
        (("topic", "list"), "mqadmin topicList"),
        (("topic", "create", "T"), "mqadmin updateTopic"),
        (("group", "create", "G"), "mqadmin updateSubGroup"),
        (("group", "describe", "G"), "mqadmin consumerProgress"),
        (("message", "get", "0102FC0000000158B30B28EE3400000000"), "mqadmin queryMsgById"),
        (("flow-control", "on"), "mqadmin updateTopicPerm"),
        (("acl", "user", "list"), "mqadmin listUser"),
    ],
)
def test_a_broker_admin_command_says_the_proxy_does_not_serve_it(
    proxy: RocketMQProxy, args: tuple[str, ...], mqadmin: str
) -> None:
    done = rocketbox(*args, "--broker", proxy.endpoint)
    assert done.returncode == NOT_SERVED_EXIT_CODE, done.stdout + done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"Error: {proxy.endpoint} does not serve rocketbox's broker admin service: "
        f"`rocketbox {args[0]}` works only against a rocketbox broker; on Apache RocketMQ use "
        f"{mqadmin}"
    ), line


def test_cluster_list_says_the_endpoint_is_no_rocketbox_namesrv(proxy: RocketMQProxy) -> None:
    done = rocketbox("cluster", "list", "--namesrv", proxy.endpoint)
    assert done.returncode == NOT_SERVED_EXIT_CODE, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert f"{proxy.endpoint} does not serve rocketbox's NameServer service" in line
    assert "`rocketbox cluster` works only against a rocketbox NameServer" in line
    assert line.endswith("on Apache RocketMQ use mqadmin clusterList -n <namesrv>")


def _help_paths() -> Iterator[tuple[str, ...]]:
    commands = commands_of(main)
    for name in ADMIN_ONLY:
        yield (name,)
        command = commands[name]
        if isinstance(command, click.Group):
            for sub, subcommand in commands_of(command).items():
                yield (name, sub)
                if isinstance(subcommand, click.Group):
                    yield from ((name, sub, leaf) for leaf in commands_of(subcommand))


def test_each_admin_only_commands_help_says_it_is_rocketbox_only() -> None:
    paths = list(_help_paths())
    assert ("acl", "user", "create") in paths
    for path in paths:
        result = CliRunner().invoke(main, [*path, "--help"], terminal_width=1000)
        assert result.exit_code == 0, result.output
        note = result.output.strip().splitlines()[-1].strip()
        assert note.startswith("Works only against a rocketbox "), (path, note)
        assert f"(exit {NOT_SERVED_EXIT_CODE} there). On Apache RocketMQ use mqadmin" in note, (
            path,
            note,
        )


def test_consume_help_says_it_reads_from_a_rocketmq_proxy_too(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["consume", "--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    assert "a rocketbox broker or an Apache RocketMQ proxy" in result.output
