"""The official Node client's SimpleConsumer (rocketmq-client-nodejs 1.0.8, pinned in
package.json) receives and acks, against a real ``rocketbox broker``, what the official Python
producer sent.

Proves: every message comes exactly once, with its body, tag and key, though the Node client asks
only for queue 0 of a four-queue topic (docs/rocketmq-protocol.md §6, §8.5); acked messages do not
come back to the group (a second run of it, listening past the invisible time, gets nothing);
another group gets them all again (groups are independent, docs/rocketmq-protocol.md §8.6); a
delivery the Node client did not ack comes back after its invisible time, same message id,
``deliveryAttempt`` 2.

The waits are the Node script's own: its long-polling ``awaitDuration`` and ``--listen-ms``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_producer import message, producer
from tests.node.node_script import run_node_script
from tests.node.test_node_client import NODE_DIR, node_executable

pytestmark = pytest.mark.slow

SCRIPT = NODE_DIR / "receive_ack.mjs"
COUNT = 12
TAGS = ("TagA", "TagB")
# The invisible time each receive asks for (the broker is started allowing 1 s and up; the
# proxy's minimum is 10 s).
INVISIBLE_MS = 2_000
# The script's hard deadline; the subprocess one only guards against its failing to keep it.
NODE_DEADLINE_MS = 60_000
SCRIPT_DEADLINE_S = NODE_DEADLINE_MS / 1000 + 30.0

Received = list[dict[str, Any]]


def broker_for(tmp_path: Path, topic: str) -> BrokerProcess:
    return BrokerProcess(
        tmp_path,
        "--invisible-duration-min-ms",
        "1000",
        "--long-polling-timeout-ms",
        "2000",
        "--topic",
        f"{topic}:4",
    )


def send_all(endpoint: str, topic: str) -> dict[str, dict[str, Any]]:
    """Send COUNT messages with the Python producer; what each should arrive as, by message id."""
    sent = {}
    with producer(endpoint, (topic,)) as p:
        for i in range(COUNT):
            body, tag, key = f"message {i} for node", TAGS[i % 2], f"node-key-{i}"
            receipt = p.send(message(topic, body.encode(), tag=tag, key=key))
            sent[receipt.message_id] = {"body": body, "tag": tag, "keys": [key], "topic": topic}
    assert len(sent) == COUNT
    return sent


def receive(
    node: str,
    broker: BrokerProcess,
    topic: str,
    group: str,
    count: int,
    *options: str,
) -> Received:
    """Run receive_ack.mjs; its JSON lines, one per delivery, in the order received."""
    command = [
        node,
        str(SCRIPT),
        broker.endpoint,
        topic,
        group,
        str(count),
        f"--invisible-ms={INVISIBLE_MS}",
        f"--deadline-ms={NODE_DEADLINE_MS}",
        *options,
    ]
    stdout, report = run_node_script(command, SCRIPT_DEADLINE_S)
    got = []
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "messageId" not in record:
            pytest.fail(f"not a result line: {line!r}\n{report}")
        got.append(record)
    return got


def assert_each_once(got: Received, sent: dict[str, dict[str, Any]], attempt: int) -> None:
    ids = [m["messageId"] for m in got]
    assert sorted(ids) == sorted(sent), f"received {ids}, sent {sorted(sent)}"
    for m in got:
        expected = sent[m["messageId"]]
        actual = {k: m[k] for k in expected}
        assert actual == expected, m["messageId"]
        assert m["deliveryAttempt"] == attempt, m
        assert m["corrupted"] is False, m


def test_node_simple_consumer_receives_and_acks_each_message_once(tmp_path: Path) -> None:
    node = node_executable()
    topic = "NodeWork"
    broker = broker_for(tmp_path, topic)
    try:
        sent = send_all(broker.endpoint, topic)

        first = receive(node, broker, topic, "NodeWorkers", COUNT, "--await-ms=2000")
        assert_each_once(first, sent, attempt=1)

        # Listening past the first run's invisible time: an unacked message would be back.
        again = receive(
            node,
            broker,
            topic,
            "NodeWorkers",
            0,
            "--await-ms=1000",
            f"--listen-ms={INVISIBLE_MS + 1_000}",
        )
        assert again == [], "acked messages came back to the group"

        other = receive(node, broker, topic, "NodeAuditors", COUNT, "--await-ms=2000")
        assert_each_once(other, sent, attempt=1)
    except BaseException as e:
        broker.kill()
        e.add_note(f"broker output:\n{broker.output()}")  # shown by pytest with the failure
        raise
    broker.stop()


def test_an_unacked_node_delivery_comes_back_with_attempt_two(tmp_path: Path) -> None:
    node = node_executable()
    topic = "NodeRetry"
    broker = broker_for(tmp_path, topic)
    try:
        sent = send_all(broker.endpoint, topic)

        first = receive(node, broker, topic, "NodeForgetful", COUNT, "--no-ack", "--await-ms=2000")
        assert_each_once(first, sent, attempt=1)

        # The messages are still invisible when this run starts: its long poll (up to 10 s)
        # returns when their invisible time ends.
        second = receive(node, broker, topic, "NodeForgetful", COUNT, "--await-ms=10000")
        assert_each_once(second, sent, attempt=2)
    except BaseException as e:
        broker.kill()
        e.add_note(f"broker output:\n{broker.output()}")  # shown by pytest with the failure
        raise
    broker.stop()
