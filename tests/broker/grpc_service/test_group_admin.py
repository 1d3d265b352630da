"""Consumer-group admin (``rocketbox group list|describe|create|reset-offset``, the BrokerAdmin
group RPCs) through the CLI, run as real processes against a real ``rocketbox broker`` process,
with messages sent and consumed by the official Python client (Producer + SimpleConsumer).

Proves:
- create / list round trip with the settings; a duplicate is ALREADY_EXISTS; a bad name or
  retry count is INVALID_ARGUMENT naming the field; an unknown group NOT_FOUND;
- CreateGroup (and CreateTopic) of a 100,000-character name, called by a gRPC client with its
  default limits, is INVALID_ARGUMENT naming the field, the length and the limit: the name is not
  echoed (it made the answer's metadata too large, RESOURCE_EXHAUSTED at the client);
- describe lists a connected consumer as a member (and not after it shut down), and shows per
  queue the lag and the messages in flight while they are received but not acked, and after acks;
- describe counts a message dead-lettered after the group's last delivery in ``%DLQ%<group>``;
- reset-offset --to first makes acked messages come back; --to last skips the backlog (only
  later messages are delivered); --to timestamp starts at the first message stored at or after
  the time (taken from a stored message's store time);
- reset-offset refuses an unknown group or topic, a bad name, and a missing --timestamp-ms.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, SimpleConsumer

from rocketbox_api.admin.v1 import broker_admin_pb2 as apb
from rocketbox_api.admin.v1 import broker_admin_pb2_grpc
from rocketbox_api.names import GROUP_LENGTH_MAX, TOPIC_LENGTH_MAX
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.grpc_service.test_admin import cli, cli_json, copies, message, producer, refused

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
# Long enough that nothing received in a test comes back by itself while the test looks at it.
HOLD_S = 60
# A receive's long poll: short, so that "nothing more comes" is quick to establish.
AWAIT_S = 1


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path / "broker",
        "--invisible-duration-min-ms",
        "1000",
        "--long-polling-timeout-ms",
        "2000",
        "--topic",
        "Orders:2",
        "--topic",
        "Other:1",
        "--group",
        "Billing:orderly:3",
    )
    try:
        yield b
    finally:
        b.stop()


@contextmanager
def consumer(endpoint: str, group: str, topic: str) -> Iterator[SimpleConsumer]:
    c = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()),
        group,
        {topic: FilterExpression("*")},
        await_duration=AWAIT_S,
    )
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()


def receive(c: SimpleConsumer, count: int, ack: bool, invisible_s: int = HOLD_S) -> list[Message]:
    """Exactly ``count`` messages (acking each if ``ack``), within the deadline."""
    got: list[Message] = []
    end = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < end:
        for m in c.receive(32, invisible_s):
            got.append(m)
            if ack:
                c.ack(m)
    assert len(got) == count, f"received {len(got)}, wanted {count}"
    return got


def nothing_more(c: SimpleConsumer) -> None:
    """No message is delivered within a long poll (after the test's own receives)."""
    assert c.receive(32, HOLD_S) == []


def send(endpoint: str, topic: str, count: int, prefix: str) -> list[str]:
    with producer(endpoint, (topic,)) as p:
        return [p.send(message(topic, f"{prefix}{i}".encode())).message_id for i in range(count)]


def describe(broker: BrokerProcess, group: str) -> dict[str, Any]:
    answer: dict[str, Any] = cli_json(broker, "group", "describe", group)
    return answer


def queues(answer: dict[str, Any], topic: str) -> list[dict[str, Any]]:
    [progress] = [t for t in answer["topics"] if t["topic"] == topic]
    found: list[dict[str, Any]] = progress["queues"]
    return found


def total(answer: dict[str, Any], topic: str, field: str) -> int:
    return sum(q[field] for q in queues(answer, topic))


def stored(broker: BrokerProcess, message_id: str) -> dict[str, Any]:
    [copy] = copies(broker, message_id)
    return copy


def store_time_ms(broker: BrokerProcess, message_id: str) -> int:
    return int(stored(broker, message_id)["store_timestamp_ms"])


def test_group_create_list_and_describe_a_fresh_group(broker: BrokerProcess) -> None:
    created = cli_json(broker, "group", "create", "Audit", "--retry-max-times", "0")
    assert created == {"name": "Audit", "orderly": False, "retry_max_times": 0, "broadcast": False}
    default = cli_json(broker, "group", "create", "Plain")
    assert default == {"name": "Plain", "orderly": False, "retry_max_times": 16, "broadcast": False}
    listed = cli_json(broker, "group", "list")["groups"]
    assert listed == [
        {"name": "Audit", "orderly": False, "retry_max_times": 0, "broadcast": False},
        {"name": "Billing", "orderly": True, "retry_max_times": 3, "broadcast": False},
        {"name": "Plain", "orderly": False, "retry_max_times": 16, "broadcast": False},
    ]
    assert describe(broker, "Billing") == {
        "name": "Billing",
        "orderly": True,
        "retry_max_times": 3,
        "broadcast": False,
        "members": [],
        "topics": [],
        "dlq_topic": "%DLQ%Billing",
        "dlq_message_count": 0,
        "broadcast_members": [],
    }
    text = cli(broker, "group", "describe", "Billing").stdout
    assert "group Billing: orderly, retry_max_times 3" in text, text
    assert "members: none connected" in text, text


def test_group_errors_name_the_code_and_the_field(broker: BrokerProcess) -> None:
    refused(cli(broker, "group", "create", "Billing"), "ALREADY_EXISTS", "Billing")
    refused(cli(broker, "group", "create", "bad name"), "INVALID_ARGUMENT", "group", "a-zA-Z0-9")
    refused(cli(broker, "group", "create", "G" * 121), "INVALID_ARGUMENT", "group", "120")
    refused(
        cli(broker, "group", "create", "Eager", "--retry-max-times", "65"),
        "INVALID_ARGUMENT",
        "retry_max_times",
        "0..64",
    )
    refused(cli(broker, "group", "describe", "Nobody"), "NOT_FOUND", "Nobody")
    refused(cli(broker, "group", "describe", "bad name"), "INVALID_ARGUMENT", "group")
    reset = ("--topic", "Orders", "--to", "first")
    refused(cli(broker, "group", "reset-offset", "Nobody", *reset), "NOT_FOUND", "Nobody")
    refused(cli(broker, "group", "reset-offset", "bad name", *reset), "INVALID_ARGUMENT", "group")
    refused(
        cli(broker, "group", "reset-offset", "Billing", "--topic", "Nowhere", "--to", "last"),
        "NOT_FOUND",
        "Nowhere",
    )
    refused(
        cli(broker, "group", "reset-offset", "Billing", "--topic", "a b", "--to", "last"),
        "INVALID_ARGUMENT",
        "topic",
    )
    missing = cli(
        broker, "group", "reset-offset", "Billing", "--topic", "Orders", "--to", "timestamp"
    )
    assert missing.returncode == 2, missing
    assert "--timestamp-ms" in missing.stderr
    # Nothing of the refused calls was created.
    assert [g["name"] for g in cli_json(broker, "group", "list")["groups"]] == ["Billing"]


LONG_NAME_CHARS = 100_000


def test_a_name_of_100000_characters_is_invalid_argument_not_an_answer_too_large(
    broker: BrokerProcess,
) -> None:
    name = "G" * LONG_NAME_CHARS
    with grpc.insecure_channel(broker.endpoint) as channel:  # gRPC's default limits
        stub = broker_admin_pb2_grpc.BrokerAdminStub(channel)
        calls = (
            ("group", GROUP_LENGTH_MAX, stub.CreateGroup, apb.CreateGroupRequest(group=name)),
            ("topic", TOPIC_LENGTH_MAX, stub.CreateTopic, apb.CreateTopicRequest(topic=name)),
        )
        for field, limit, method, request in calls:
            with pytest.raises(grpc.RpcError) as raised:
                method(request, timeout=DEADLINE_S)
            error = raised.value
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, error)
            details = error.details() or ""
            assert details.startswith(f"{field}: "), details
            assert f"{LONG_NAME_CHARS} characters" in details, details
            assert f"{limit} characters" in details, details
            assert len(details) < 200, details
    assert [g["name"] for g in cli_json(broker, "group", "list")["groups"]] == ["Billing"]


def test_describe_shows_members_lag_and_messages_in_flight(broker: BrokerProcess) -> None:
    sent = send(broker.endpoint, "Orders", 6, "order-")
    with consumer(broker.endpoint, "Workers", "Orders") as c:
        wait_until(
            lambda: (
                [m["client_type"] for m in describe(broker, "Workers")["members"]]
                == ["SIMPLE_CONSUMER"]
            ),
            DEADLINE_S,
            "the consumer to be a member of Workers",
        )
        got = receive(c, 6, ack=False)
        assert {m.message_id for m in got} == set(sent)
        held = describe(broker, "Workers")
        assert [q["queue_id"] for q in queues(held, "Orders")] == [0, 1]
        assert total(held, "Orders", "max_queue_offset") == 6
        assert total(held, "Orders", "consume_offset") == 0
        assert total(held, "Orders", "lag") == 6
        assert total(held, "Orders", "inflight_count") == 6
        for q in queues(held, "Orders"):
            assert q["lag"] == q["max_queue_offset"] - q["consume_offset"]
            assert q["inflight_count"] == q["max_queue_offset"]

        for m in got[:2]:
            c.ack(m)
        acked_some = describe(broker, "Workers")
        assert total(acked_some, "Orders", "inflight_count") == 4
        for m in got[2:]:
            c.ack(m)
        acked = describe(broker, "Workers")
        assert total(acked, "Orders", "consume_offset") == 6
        assert total(acked, "Orders", "lag") == 0
        assert total(acked, "Orders", "inflight_count") == 0

        send(broker.endpoint, "Orders", 2, "later-")
        backlog = describe(broker, "Workers")
        assert total(backlog, "Orders", "lag") == 2
        assert total(backlog, "Orders", "inflight_count") == 0
        [member] = backlog["members"]
        text = cli(broker, "group", "describe", "Workers").stdout
        assert f"{member['client_id']} (SIMPLE_CONSUMER)" in text, text
        assert "topic Orders: lag 2, in flight 0" in text, text
    wait_until(
        lambda: describe(broker, "Workers")["members"] == [],
        DEADLINE_S,
        "the consumer that shut down to leave Workers",
    )


def test_describe_counts_dead_lettered_messages(broker: BrokerProcess) -> None:
    assert cli_json(broker, "group", "create", "Careful", "--retry-max-times", "0")
    [poison] = send(broker.endpoint, "Other", 1, "poison-")
    with consumer(broker.endpoint, "Careful", "Other") as c:
        [first] = receive(c, 1, ack=False, invisible_s=1)
        assert (first.message_id, first.delivery_attempt) == (poison, 1)
        assert describe(broker, "Careful")["dlq_message_count"] == 0
        # No retry: once the invisible time is over, the next receive dead-letters the message
        # instead of delivering it again.
        end = time.monotonic() + DEADLINE_S
        while describe(broker, "Careful")["dlq_message_count"] == 0:
            assert time.monotonic() < end, "the message was not dead-lettered"
            assert c.receive(32, 1) == []
    after = describe(broker, "Careful")
    assert after["dlq_topic"] == "%DLQ%Careful"
    assert after["dlq_message_count"] == 1
    assert total(after, "Other", "lag") == 0
    assert total(after, "Other", "inflight_count") == 0

    def dead_lettered() -> bool:
        found = cli_json(broker, "message", "get", poison)["messages"]
        return [m["topic"] for m in found] == ["Other", "%DLQ%Careful"]

    wait_until(dead_lettered, DEADLINE_S, "the dead-lettered copy to be indexed")


def test_reset_to_first_brings_acked_messages_back(broker: BrokerProcess) -> None:
    sent = send(broker.endpoint, "Orders", 4, "order-")
    with consumer(broker.endpoint, "Replayers", "Orders") as c:
        receive(c, 4, ack=True)
        nothing_more(c)
        assert total(describe(broker, "Replayers"), "Orders", "lag") == 0

        reset = cli_json(
            broker, "group", "reset-offset", "Replayers", "--topic", "Orders", "--to", "first"
        )
        assert reset["topic"] == "Orders"
        assert [q["consume_offset"] for q in reset["queues"]] == [
            q["min_queue_offset"] for q in reset["queues"]
        ]
        assert sum(q["lag"] for q in reset["queues"]) == 4

        again = receive(c, 4, ack=True)
        assert {m.message_id for m in again} == set(sent)
        nothing_more(c)


def test_reset_to_last_skips_the_backlog(broker: BrokerProcess) -> None:
    send(broker.endpoint, "Orders", 5, "backlog-")
    reset = cli_json(
        broker, "group", "reset-offset", "Billing", "--topic", "Orders", "--to", "last"
    )
    assert [q["consume_offset"] for q in reset["queues"]] == [
        q["max_queue_offset"] for q in reset["queues"]
    ]
    assert sum(q["max_queue_offset"] for q in reset["queues"]) == 5
    assert sum(q["lag"] for q in reset["queues"]) == 0
    text = cli(broker, "group", "reset-offset", "Billing", "--topic", "Orders", "--to", "LAST")
    assert "group Billing reset to last" in text.stdout, text

    with consumer(broker.endpoint, "Billing", "Orders") as c:
        [new] = send(broker.endpoint, "Orders", 1, "new-")
        got = receive(c, 1, ack=True)
        assert [m.message_id for m in got] == [new]
        nothing_more(c)


def test_reset_to_a_timestamp_starts_at_the_first_message_stored_at_or_after_it(
    broker: BrokerProcess,
) -> None:
    early = send(broker.endpoint, "Orders", 4, "early-")
    # The later batch must be stored in a later millisecond than the early one: wait until the
    # clock (the broker's: same machine) is past the last early store time.
    last_early_ms = max(store_time_ms(broker, m) for m in early)
    wait_until(
        lambda: time.time_ns() // 1_000_000 > last_early_ms,
        DEADLINE_S,
        "the clock to pass the early batch's store time",
    )
    late = send(broker.endpoint, "Orders", 4, "late-")
    since_ms = store_time_ms(broker, late[0])
    stored_before = {m for m in early + late if store_time_ms(broker, m) < since_ms}
    assert stored_before == set(early)

    with consumer(broker.endpoint, "Rewinders", "Orders") as c:
        receive(c, 8, ack=True)
        nothing_more(c)
        reset = cli_json(
            broker,
            "group",
            "reset-offset",
            "Rewinders",
            "--topic",
            "Orders",
            "--to",
            "timestamp",
            "--timestamp-ms",
            str(since_ms),
        )
        # Per queue, the consume offset is the count of its messages stored before the time.
        early_queues = [stored(broker, m)["queue_id"] for m in early]
        assert [q["consume_offset"] for q in reset["queues"]] == [
            early_queues.count(queue_id) for queue_id in (0, 1)
        ]
        assert sum(q["lag"] for q in reset["queues"]) == len(late)
        again = receive(c, len(late), ack=True)
        assert {m.message_id for m in again} == set(late)
        nothing_more(c)
