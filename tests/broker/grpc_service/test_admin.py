"""The broker's admin service (rocketbox.admin.v1.BrokerAdmin) through the ``rocketbox`` CLI, run
as real processes against a real ``rocketbox broker`` process; messages are sent with the
official Python client (5.1.2).

Proves:
- topics: create / list / describe / delete round trip; a duplicate is ALREADY_EXISTS, an unknown
  topic NOT_FOUND, a bad name or queue count INVALID_ARGUMENT naming the field and its limit;
- every message the client sent (tag, keys, user properties, message group) is found by
  ``message get <id>`` with those properties intact, and by ``message query --topic --key``;
- ``flow-control on --topic T`` makes the client's send to T fail with TOO_MANY_REQUESTS (42900)
  and nothing of it is stored, while other topics are served; ``off`` restores it; the same for
  the whole broker;
- ``--broker`` may come from ROCKETBOX_BROKER;
- an unreachable or silent broker is a clear error with a non-zero exit, within the deadline;
- the gRPC health service reports the admin service SERVING.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.v5.exception import TooManyRequestsException

from tests.broker.broker_process import REPO_ROOT, BrokerProcess, wait_until
from tests.grpc_health import HealthStub

pytestmark = pytest.mark.slow

CLI_DEADLINE_S = 60.0
DISPATCH_DEADLINE_S = 30.0
TOPICS = ("--topic", "Orders:4", "--topic", "Steps:2:FIFO", "--topic", "Other:2")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", *TOPICS)
    try:
        yield b
    finally:
        b.stop()


@contextmanager
def producer(endpoint: str, topics: tuple[str, ...]) -> Iterator[Producer]:
    p = Producer(ClientConfiguration(endpoint, Credentials()), topics)
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()


def cli(broker: BrokerProcess | str, *args: str) -> subprocess.CompletedProcess[str]:
    endpoint = broker if isinstance(broker, str) else broker.endpoint
    return subprocess.run(
        [sys.executable, "-m", "rocketbox", *args, "--broker", endpoint],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_DEADLINE_S,
        check=False,
    )


def cli_json(broker: BrokerProcess, *args: str) -> Any:
    done = cli(broker, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def refused(done: subprocess.CompletedProcess[str], code: str, *words: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert code in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def message(topic: str, body: bytes) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    return m


def copies(broker: BrokerProcess, message_id: str) -> list[dict[str, Any]]:
    """The stored copies of a message, once the dispatcher has indexed it."""
    found: list[dict[str, Any]] = []

    def indexed() -> bool:
        done = cli(broker, "message", "get", message_id, "--json")
        if done.returncode == 0:
            found.extend(json.loads(done.stdout)["messages"])
        return bool(found)

    wait_until(indexed, DISPATCH_DEADLINE_S, f"message {message_id} to be indexed")
    return found


def test_topic_create_list_describe_delete_round_trip(broker: BrokerProcess) -> None:
    created = cli_json(broker, "topic", "create", "Payments", "--queues", "3", "--type", "fifo")
    assert created == {"name": "Payments", "queue_nums": 3, "message_type": "FIFO"}
    listed = cli_json(broker, "topic", "list")["topics"]
    assert [t["name"] for t in listed] == ["Orders", "Other", "Payments", "Steps"]
    described = cli_json(broker, "topic", "describe", "Payments")
    assert described["queues"] == [
        {"queue_id": q, "min_queue_offset": 0, "max_queue_offset": 0} for q in range(3)
    ]
    assert described["flow_control_forced"] is False
    text = cli(broker, "topic", "describe", "Payments").stdout
    assert "topic Payments: 3 queues, FIFO" in text
    assert cli_json(broker, "topic", "delete", "Payments")["name"] == "Payments"
    from_env = subprocess.run(
        [sys.executable, "-m", "rocketbox", "topic", "list"],
        cwd=REPO_ROOT,
        env={**os.environ, "ROCKETBOX_BROKER": broker.endpoint},
        capture_output=True,
        text=True,
        timeout=CLI_DEADLINE_S,
        check=False,
    )
    assert from_env.returncode == 0, from_env.stderr
    assert "Orders" in from_env.stdout
    assert "Payments" not in from_env.stdout
    refused(cli(broker, "topic", "describe", "Payments"), "NOT_FOUND", "Payments")


def test_topic_errors_name_the_code_and_the_limit(broker: BrokerProcess) -> None:
    refused(cli(broker, "topic", "create", "Orders"), "ALREADY_EXISTS", "Orders")
    refused(cli(broker, "topic", "delete", "Nowhere"), "NOT_FOUND", "Nowhere")
    refused(cli(broker, "topic", "create", "bad name"), "INVALID_ARGUMENT", "topic", "a-zA-Z0-9")
    refused(cli(broker, "topic", "create", "%DLQ%group"), "INVALID_ARGUMENT", "system")
    refused(cli(broker, "topic", "create", "T" * 128), "INVALID_ARGUMENT", "127")
    refused(
        cli(broker, "topic", "create", "Wide", "--queues", "1025"),
        "INVALID_ARGUMENT",
        "queue_nums",
        "1..1024",
    )
    refused(cli(broker, "message", "get", " "), "INVALID_ARGUMENT", "message_id")
    refused(cli(broker, "message", "query", "--topic", "Nowhere", "--key", "k"), "NOT_FOUND")
    refused(
        cli(broker, "message", "query", "--topic", "Orders", "--key", "k", "--max-num", "5000"),
        "INVALID_ARGUMENT",
        "max_num",
    )
    refused(cli(broker, "flow-control", "on", "--topic", "Nowhere"), "NOT_FOUND")


def test_sent_messages_are_found_by_id_and_by_key_with_their_properties(
    broker: BrokerProcess,
) -> None:
    with producer(broker.endpoint, ("Orders", "Steps")) as p:
        order = message("Orders", b"order-1 created")
        order.tag = "created"
        order.keys = "order-1"
        order.keys = "customer-9"
        order.add_property("region", "eu-west")
        order.add_property("priority", "high")
        order_id = p.send(order).message_id
        step = message("Steps", "schritt \u00fcber".encode())
        step.message_group = "order-1"
        step.keys = "order-1"
        step_id = p.send(step).message_id

    [got] = copies(broker, order_id)
    assert got["message_id"] == order_id
    assert got["topic"] == "Orders"
    assert got["body_text"] == "order-1 created"
    assert got["tag"] == "created"
    assert sorted(got["keys"]) == ["customer-9", "order-1"]
    assert got["user_properties"] == {"priority": "high", "region": "eu-west"}
    assert got["message_group"] is None
    assert got["born_host"].startswith("127.0.0.1:")
    # Only the host: a broker listening on port 0 records store port 0 (the store is built
    # before the port is bound).
    assert got["store_host"].startswith("127.0.0.1:")
    assert got["store_timestamp_ms"] >= got["born_timestamp_ms"] // 1000 * 1000
    [fifo] = copies(broker, step_id)
    assert fifo["message_group"] == "order-1"
    assert fifo["tag"] is None
    assert fifo["body_text"] == "schritt \u00fcber"

    text = cli(broker, "message", "get", order_id).stdout
    for shown in (order_id, "created", "priority=high, region=eu-west", "'order-1 created'"):
        assert shown in text, text
    by_key = cli_json(broker, "message", "query", "--topic", "Orders", "--key", "customer-9")
    assert [m["message_id"] for m in by_key["messages"]] == [order_id]
    by_key = cli_json(broker, "message", "query", "--topic", "Steps", "--key", "order-1")
    assert [m["message_id"] for m in by_key["messages"]] == [step_id]
    none = cli_json(broker, "message", "query", "--topic", "Orders", "--key", "order-2")
    assert none == {"messages": [], "truncated": False}
    queues = cli_json(broker, "topic", "describe", "Orders")["queues"]
    assert sum(q["max_queue_offset"] for q in queues) == 1


def test_flow_control_on_a_topic_refuses_its_sends_and_stores_nothing(
    broker: BrokerProcess,
) -> None:
    state = cli_json(broker, "flow-control", "on", "--topic", "Orders")
    assert state == {"broker_wide": False, "topics": ["Orders"]}
    assert cli_json(broker, "topic", "describe", "Orders")["flow_control_forced"] is True
    with producer(broker.endpoint, ("Orders", "Other")) as p:
        throttled = message("Orders", b"refused")
        with pytest.raises(TooManyRequestsException, match="42900"):
            p.send(throttled)
        # Another topic is served, and once its later send is indexed, the dispatcher is past
        # any record of the refused one: NOT_FOUND now proves it was never stored.
        copies(broker, p.send(message("Other", b"served")).message_id)
        refused(cli(broker, "message", "get", throttled.message_id), "NOT_FOUND")
        queues = cli_json(broker, "topic", "describe", "Orders")["queues"]
        assert all(q["max_queue_offset"] == 0 for q in queues)

        state = cli_json(broker, "flow-control", "off", "--topic", "Orders")
        assert state == {"broker_wide": False, "topics": []}
        accepted = p.send(message("Orders", b"accepted")).message_id
    assert copies(broker, accepted)[0]["body_text"] == "accepted"


def test_flow_control_for_the_whole_broker(broker: BrokerProcess) -> None:
    on = cli(broker, "flow-control", "on")
    assert on.returncode == 0, on.stderr
    assert "flow control forced on for the broker" in on.stdout
    assert cli_json(broker, "topic", "describe", "Other")["flow_control_forced"] is True
    with producer(broker.endpoint, ("Orders", "Other")) as p:
        refused_ids = []
        for topic in ("Orders", "Other"):
            m = message(topic, b"refused")
            with pytest.raises(TooManyRequestsException, match="42900"):
                p.send(m)
            refused_ids.append(m.message_id)
        assert cli_json(broker, "flow-control", "off") == {"broker_wide": False, "topics": []}
        copies(broker, p.send(message("Other", b"served")).message_id)
    for message_id in refused_ids:
        refused(cli(broker, "message", "get", message_id), "NOT_FOUND")


def test_an_unreachable_broker_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    done = cli(f"127.0.0.1:{free_port}", "topic", "list")
    assert done.returncode == 3, done
    assert f"broker 127.0.0.1:{free_port} is unreachable: UNAVAILABLE" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_silent_broker_is_an_error_after_the_deadline() -> None:
    # A listener that never speaks gRPC: connections complete in the kernel's backlog.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        done = cli(endpoint, "topic", "list", "--deadline-s", "1")
        took_s = time.monotonic() - began
    assert done.returncode == 3, done
    assert "DEADLINE_EXCEEDED" in done.stderr or "UNAVAILABLE" in done.stderr, done.stderr
    assert took_s < 20, f"the CLI took {took_s:.1f} s with a 1 s deadline"


def test_health_reports_the_admin_service_serving(broker: BrokerProcess) -> None:
    with grpc.insecure_channel(broker.endpoint) as channel:
        check = HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="rocketbox.admin.v1.BrokerAdmin"), timeout=10
        )
    assert check.status == health_pb2.HealthCheckResponse.SERVING
