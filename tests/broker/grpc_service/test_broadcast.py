"""Broadcast consumer groups (``--group NAME:broadcast``, ``rocketbox group create --broadcast``)
against a real ``rocketbox broker`` process, with the unmodified official Python clients.

Proves: two SimpleConsumers of a broadcast group each receive every message exactly once, while
a clustering group on the same topic still splits them; two PushConsumers of a broadcast group
each consume every message; a consumer stopped and a new client started in its place resumes
from the departed member's progress (only what came after its last ack); the members' progress
survives a broker restart (SIGTERM, then a new broker on the same data directory); a message
one member leaves unacked comes back to that member only; the admin shows the model and each
member's progress, and refuses to change an existing group's model; on the wire, a receive
without ``x-mq-client-id`` is CLIENT_ID_REQUIRED and a member's receipt handle acked by another
client is INVALID_RECEIPT_HANDLE.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.grpc_service.test_admin import cli, cli_json, refused
from tests.broker.grpc_service.test_consumer import broker_for, simple_consumer
from tests.broker.grpc_service.test_edges import CALL_DEADLINE_S
from tests.broker.grpc_service.test_producer import message, producer

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
# Long enough that nothing received comes back by itself while a test looks.
HOLD_S = 60
# The broker's shortest invisible time in these tests (--invisible-duration-min-ms 1000).
SHORT_INVISIBLE_S = 1


def send(endpoint: str, topic: str, count: int, prefix: str) -> list[str]:
    with producer(endpoint, (topic,)) as p:
        return [p.send(message(topic, f"{prefix}{i}".encode())).message_id for i in range(count)]


def receive(c: SimpleConsumer, count: int, ack: bool = True) -> list[Message]:
    """Exactly ``count`` messages (acking each if ``ack``), within the deadline."""
    got: list[Message] = []
    end = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < end:
        for m in c.receive(min(32, count - len(got)), HOLD_S):
            got.append(m)
            if ack:
                c.ack(m)
    assert len(got) == count, f"received {len(got)}, wanted {count}"
    return got


def nothing_more(c: SimpleConsumer) -> None:
    """No message is delivered within a long poll (after the test's own receives)."""
    assert c.receive(32, HOLD_S) == []


def ids(messages: list[Message]) -> list[str]:
    return [m.message_id for m in messages]


def describe(broker: BrokerProcess, group: str) -> dict[str, Any]:
    answer: dict[str, Any] = cli_json(broker, "group", "describe", group)
    return answer


def consumed(member: dict[str, Any], topic: str) -> int:
    """Messages done for the member in ``topic`` (the sum of its consume offsets)."""
    [progress] = [t for t in member["topics"] if t["topic"] == topic]
    return sum(q["consume_offset"] for q in progress["queues"])


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = broker_for(tmp_path, "--topic", "News:4", "--group", "Fans:broadcast")
    try:
        yield b
    finally:
        b.stop()


def test_every_member_receives_every_message_once_and_clustering_still_splits(
    broker: BrokerProcess,
) -> None:
    split: dict[str, list[str]] = {"x": [], "y": []}
    with (
        simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as a,
        simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as b,
        simple_consumer(broker.endpoint, "Pool", "News", await_s=1) as x,
        simple_consumer(broker.endpoint, "Pool", "News", await_s=1) as y,
    ):
        sent = send(broker.endpoint, "News", 40, "n")

        def drain(name: str, c: SimpleConsumer) -> None:
            end = time.monotonic() + DEADLINE_S
            while len(split["x"]) + len(split["y"]) < 40 and time.monotonic() < end:
                for m in c.receive(4, HOLD_S):
                    split[name].append(m.message_id)
                    c.ack(m)

        workers = [threading.Thread(target=drain, args=(n, c)) for n, c in (("x", x), ("y", y))]
        for w in workers:
            w.start()
        got_a = ids(receive(a, 40))
        got_b = ids(receive(b, 40))
        for w in workers:
            w.join(DEADLINE_S + 5)
        nothing_more(a)
        nothing_more(b)
    assert sorted(got_a) == sorted(sent), "member a: each message once"
    assert sorted(got_b) == sorted(sent), "member b: each message once"
    # The clustering group on the same topic: each message to one of its consumers.
    assert not set(split["x"]) & set(split["y"]), "a clustering group's message went to both"
    assert sorted(split["x"] + split["y"]) == sorted(sent)
    members = describe(broker, "Fans")["broadcast_members"]
    assert [m["member_id"] for m in members] == [1, 2]
    assert [consumed(m, "News") for m in members] == [40, 40]


def test_a_new_client_resumes_from_the_departed_members_progress(broker: BrokerProcess) -> None:
    first = send(broker.endpoint, "News", 10, "early")
    with simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as stays:
        with simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as leaves:
            assert sorted(ids(receive(leaves, 10))) == sorted(first)
        # ``leaves`` shut down (NotifyClientTermination): its member has left.
        later = send(broker.endpoint, "News", 7, "late")
        with simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as comes:
            # A new client id (a restart gives one): only what came after the last ack.
            assert sorted(ids(receive(comes, 7))) == sorted(later)
            nothing_more(comes)
            assert sorted(ids(receive(stays, 17))) == sorted(first + later)
            members = describe(broker, "Fans")["broadcast_members"]
    # Two members, not three: the newcomer continued the departed one.
    assert len(members) == 2
    assert [consumed(m, "News") for m in members] == [17, 17]
    assert not any(m["left"] for m in members)


def test_members_progress_survives_a_broker_restart(tmp_path: Path) -> None:
    broker = broker_for(tmp_path, "--topic", "News:4", "--group", "Fans:broadcast")
    try:
        first = send(broker.endpoint, "News", 8, "before")
        with simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as c:
            acked = ids(receive(c, 3))
    finally:
        broker.stop()  # SIGTERM: the progress and the members table are written at stop
    saved = json.loads((tmp_path / "config" / "consumer_offsets.json").read_text())
    # The member's progress in the groups' format, under "<group>@<member id>"; the table beside.
    assert sum(q["ack"] + len(q["done"]) for q in saved["Fans@1"]["News"].values()) == 3
    [left] = saved["@broadcast"]["Fans"]["members"]
    assert left["id"] == 1
    assert left["left_ms"] is not None
    broker = broker_for(tmp_path)
    try:
        later = send(broker.endpoint, "News", 5, "after")
        with simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as again:
            got = ids(receive(again, 10))
            nothing_more(again)
        [member] = describe(broker, "Fans")["broadcast_members"]
    finally:
        broker.stop()
    # The new client continued the member: what it had not acked, and what came since.
    assert sorted(got) == sorted(set(first) - set(acked) | set(later))
    assert member["member_id"] == 1
    assert consumed(member, "News") == 13


def test_an_unacked_message_comes_back_to_its_member_only(broker: BrokerProcess) -> None:
    with (
        simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as forgets,
        simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as acks,
    ):
        [sent] = send(broker.endpoint, "News", 1, "once")
        [m] = forgets.receive(1, SHORT_INVISIBLE_S)
        assert (m.message_id, m.delivery_attempt) == (sent, 1)
        assert ids(receive(acks, 1)) == [sent]
        again: list[Message] = []

        def came_back() -> bool:
            again.extend(forgets.receive(1, HOLD_S))
            return bool(again)

        wait_until(came_back, DEADLINE_S, "the unacked message back to its member")
        assert [(m.message_id, m.delivery_attempt) for m in again] == [(sent, 2)]
        forgets.ack(again[0])
        nothing_more(acks)
        nothing_more(forgets)


class Counter(MessageListener):  # type: ignore[misc]  # the official client ships no type information
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[str] = []

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.ids.append(message.message_id)
        return ConsumeResult.SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(self.ids)


def push_consumer(endpoint: str, listener: Counter) -> PushConsumer:
    c = PushConsumer(
        ClientConfiguration(endpoint, Credentials()),
        "Fans",
        listener,
        {"News": FilterExpression("*")},
    )
    c.startup()
    return c


def test_every_push_consumer_of_a_broadcast_group_consumes_every_message(
    broker: BrokerProcess,
) -> None:
    counters = [Counter(), Counter()]
    started: list[PushConsumer] = []
    try:
        for counter in counters:
            started.append(push_consumer(broker.endpoint, counter))
        sent = send(broker.endpoint, "News", 30, "p")
        wait_until(
            lambda: all(c.count() >= 30 for c in counters),
            DEADLINE_S,
            "30 messages consumed by each push consumer",
        )
        # Acks are sent after consume() returns: wait until both members' progress shows them,
        # then nothing more may come.
        wait_until(
            lambda: (
                [consumed(m, "News") for m in describe(broker, "Fans")["broadcast_members"]]
                == [30, 30]
            ),
            DEADLINE_S,
            "both members' acks",
        )
    finally:
        for c in started:
            c.shutdown()
    for counter in counters:
        assert sorted(counter.ids) == sorted(sent)


def test_admin_shows_the_model_and_refuses_to_change_it(broker: BrokerProcess) -> None:
    created = cli_json(broker, "group", "create", "Radio", "--broadcast")
    assert created == {"name": "Radio", "orderly": False, "retry_max_times": 16, "broadcast": True}
    listed = {g["name"]: g["broadcast"] for g in cli_json(broker, "group", "list")["groups"]}
    assert listed == {"Fans": True, "Radio": True}
    text = cli(broker, "group", "list").stdout
    assert "broadcasting" in text, text
    refused(cli(broker, "group", "create", "Fans"), "ALREADY_EXISTS", "Fans", "broadcasting")
    cli_json(broker, "group", "create", "Plain")
    refused(
        cli(broker, "group", "create", "Plain", "--broadcast"),
        "ALREADY_EXISTS",
        "clustering",
    )
    send(broker.endpoint, "News", 4, "r")
    with simple_consumer(broker.endpoint, "Fans", "News", await_s=1) as c:
        receive(c, 4)
        text = cli(broker, "group", "describe", "Fans").stdout
        assert "broadcast members (1):" in text, text
        assert "member 1: client " in text, text
        assert "(active" in text, text
        reset = cli_json(
            broker, "group", "reset-offset", "Fans", "--topic", "News", "--to", "first"
        )
        [member] = reset["broadcast_members"]
        assert consumed(member, "News") == 0
        # The reset member gets every message again.
        assert len(receive(c, 4)) == 4
    [member] = describe(broker, "Fans")["broadcast_members"]
    assert member["left"]


def wire_receive(
    stub: service_pb2_grpc.MessagingServiceStub, client_id: str | None
) -> list[spb.ReceiveMessageResponse]:
    """One raw ReceiveMessage for group Fans, as ``client_id`` (no x-mq-client-id when None)."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="Fans"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="News"), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=1,
        invisible_duration=Duration(seconds=HOLD_S),
        long_polling_timeout=Duration(seconds=1),
    )
    metadata = () if client_id is None else (("x-mq-client-id", client_id),)
    return list(stub.ReceiveMessage(request, metadata=metadata, timeout=CALL_DEADLINE_S))


def wire_ack(
    stub: service_pb2_grpc.MessagingServiceStub, client_id: str, m: pb.Message
) -> spb.AckMessageResponse:
    entry = spb.AckMessageEntry(
        message_id=m.system_properties.message_id,
        receipt_handle=m.system_properties.receipt_handle,
    )
    request = spb.AckMessageRequest(
        group=pb.Resource(name="Fans"), topic=pb.Resource(name="News"), entries=[entry]
    )
    reply: spb.AckMessageResponse = stub.AckMessage(
        request, metadata=(("x-mq-client-id", client_id),), timeout=CALL_DEADLINE_S
    )
    return reply


def test_a_member_is_its_client_id_and_its_handles_are_its_own(broker: BrokerProcess) -> None:
    [sent] = send(broker.endpoint, "News", 1, "w")
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        anonymous = wire_receive(stub, None)[0].status
        assert anonymous.code == Code.CLIENT_ID_REQUIRED, anonymous
        for word in ("x-mq-client-id", "'Fans'", "broadcast"):
            assert word in anonymous.message, anonymous
        [m] = [f.message for f in wire_receive(stub, "host-a@1@0@x") if f.HasField("message")]
        assert m.system_properties.message_id == sent
        other = wire_ack(stub, "host-b@2@0@y", m)
        assert other.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE, other
        assert "no member" in other.entries[0].status.message, other
        mine = wire_ack(stub, "host-a@1@0@x", m)
        assert mine.status.code == Code.OK, mine
