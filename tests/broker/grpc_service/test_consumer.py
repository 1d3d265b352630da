"""The broker's consumer side, driven by the unmodified official Python client's SimpleConsumer
and PushConsumer against a real ``rocketbox broker`` process.

Proves: receive and ack, and nothing acked comes back; a waiting long poll wakes when a message
arrives (it does not sit out its poll time); an unacked message comes back after its invisible
time with a higher attempt count, and after the group's maximum attempts goes to
``%DLQ%<group>``, readable like any topic; two consumers of one group split the messages, none
delivered to both; a FIFO group consumes every message group's messages in order (the seed
scenario: five orders, five steps each, sent interleaved); consume progress survives a broker
killed with SIGKILL and a consumer restart.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
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

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.grpc_service.test_producer import message, producer
from tests.prometheus import sample, scrape

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
# Half a 20 s long poll: a receive back before it was woken, not timed out.
WAKE_DEADLINE_S = 10.0
INVISIBLE_S = 2


@contextmanager
def simple_consumer(
    endpoint: str,
    group: str,
    topic: str,
    await_s: int = 3,
    request_timeout_s: int = 3,
    namespace: str = "",
    credentials: tuple[str, str] = ("", ""),
) -> Iterator[SimpleConsumer]:
    """``request_timeout_s``: the client's own (3 s by default), added to ``await_s`` to make a
    receive's deadline; ``credentials``: the access key and secret key it signs with."""
    c = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials(*credentials), namespace, request_timeout_s),
        group,
        {topic: FilterExpression("*")},
        await_duration=await_s,
    )
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()


def receive_all(c: SimpleConsumer, count: int, ack: bool = True) -> list[Message]:
    """Receive until ``count`` messages came (acking each), within the deadline."""
    got: list[Message] = []
    end = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < end:
        for m in c.receive(32, INVISIBLE_S):
            got.append(m)
            if ack:
                c.ack(m)
    assert len(got) >= count, f"received {len(got)} of {count}"
    return got


def consumer_offsets(data_dir: Path, group: str, topic: str) -> int:
    path = data_dir / "config" / "consumer_offsets.json"
    if not path.exists():
        return 0
    queues = json.loads(path.read_text()).get(group, {}).get(topic, {})
    return sum(q["ack"] + len(q["done"]) for q in queues.values())


def broker_for(tmp_path: Path, *args: str, metrics: bool = False) -> BrokerProcess:
    return BrokerProcess(
        tmp_path,
        "--invisible-duration-min-ms",
        "1000",
        "--long-polling-timeout-ms",
        "2000",
        *args,
        metrics=metrics,
    )


def test_receive_and_ack_and_nothing_acked_comes_back(tmp_path: Path) -> None:
    broker = broker_for(tmp_path, "--topic", "Work:4")
    try:
        with (
            simple_consumer(broker.endpoint, "Workers", "Work", await_s=1) as c,
            producer(broker.endpoint, ("Work",)) as p,
        ):
            sent = {
                p.send(message("Work", f"job {i}".encode(), tag="job")).message_id
                for i in range(20)
            }
            got = receive_all(c, 20)
            assert {m.message_id for m in got} == sent
            assert all(m.delivery_attempt == 1 for m in got)
            assert {m.tag for m in got} == {"job"}
            # sleep: past the invisible time, after which acked messages must stay gone
            time.sleep(INVISIBLE_S + 0.5)
            assert c.receive(32, INVISIBLE_S) == []
    finally:
        broker.stop()


def test_a_waiting_long_poll_wakes_when_a_message_arrives(tmp_path: Path) -> None:
    """The receive is seen waiting in the broker (its gauge) before the message is sent, and
    returns it well before its 20 s poll is up: it was woken (a receive whose poll runs out
    looks once more, so only the time tells a wake from a timeout; half the poll is the bound)."""
    broker = broker_for(tmp_path, "--topic", "Wake:1", metrics=True)
    try:
        with (
            simple_consumer(broker.endpoint, "Sleepers", "Wake", await_s=20) as c,
            producer(broker.endpoint, ("Wake",)) as p,
        ):
            result: list[Message] = []
            poller = threading.Thread(target=lambda: result.extend(c.receive(32, INVISIBLE_S)))
            poller.start()
            wait_until(
                lambda: long_polls_waiting(broker, "Wake", "Sleepers") == 1,
                DEADLINE_S,
                "the receive waiting in the broker",
            )
            p.send(message("Wake", b"wake up"))
            poller.join(WAKE_DEADLINE_S)
            assert not poller.is_alive(), f"not woken: still waiting {WAKE_DEADLINE_S} s after"
    finally:
        broker.stop()
    assert [m.body for m in result] == [b"wake up"]


def long_polls_waiting(broker: BrokerProcess, topic: str, group: str) -> float:
    return sample(
        scrape(broker.metrics_port), "rocketbox_broker_long_polls_waiting", topic=topic, group=group
    )


def test_unacked_messages_come_back_then_go_to_the_dead_letter_queue(tmp_path: Path) -> None:
    broker = broker_for(tmp_path, "--topic", "Flaky:1", "--group", "Careful:1")
    try:
        with (
            simple_consumer(broker.endpoint, "Careful", "Flaky") as c,
            producer(broker.endpoint, ("Flaky",)) as p,
        ):
            sent = p.send(message("Flaky", b"poison", tag="bad")).message_id
            first = receive_all(c, 1, ack=False)
            assert (first[0].message_id, first[0].delivery_attempt) == (sent, 1)
            second = receive_all(c, 1, ack=False)  # after the invisible time
            assert (second[0].message_id, second[0].delivery_attempt) == (sent, 2)
            # One retry allowed (2 attempts): the third delivery goes to %DLQ%Careful instead.
            # sleep: past the invisible time, when a third delivery would come here
            time.sleep(INVISIBLE_S + 0.5)
            assert c.receive(32, INVISIBLE_S) == []
        with simple_consumer(broker.endpoint, "Janitors", "%DLQ%Careful") as dlq:
            dead = receive_all(dlq, 1)
            assert dead[0].message_id == sent
            assert dead[0].body == b"poison"
    finally:
        broker.stop()


def test_two_consumers_of_a_group_split_the_messages(tmp_path: Path) -> None:
    broker = broker_for(tmp_path, "--topic", "Shared:4")
    seen: dict[str, list[str]] = {"a": [], "b": []}
    try:
        with (
            simple_consumer(broker.endpoint, "Pool", "Shared", await_s=1) as a,
            simple_consumer(broker.endpoint, "Pool", "Shared", await_s=1) as b,
            producer(broker.endpoint, ("Shared",)) as p,
        ):
            sent = {p.send(message("Shared", f"m{i}".encode())).message_id for i in range(60)}

            def drain(name: str, c: SimpleConsumer) -> None:
                end = time.monotonic() + DEADLINE_S
                while len(seen["a"]) + len(seen["b"]) < 60 and time.monotonic() < end:
                    for m in c.receive(8, INVISIBLE_S * 5):
                        seen[name].append(m.message_id)
                        c.ack(m)

            workers = [threading.Thread(target=drain, args=(n, c)) for n, c in (("a", a), ("b", b))]
            for w in workers:
                w.start()
            for w in workers:
                w.join(DEADLINE_S + 5)
    finally:
        broker.stop()
    assert not set(seen["a"]) & set(seen["b"]), "a message went to both consumers"
    assert set(seen["a"]) | set(seen["b"]) == sent
    assert len(seen["a"]) + len(seen["b"]) == 60


class Recorder(MessageListener):  # type: ignore[misc]  # the official client ships no type information
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.steps: dict[str, list[str]] = {}

    def consume(self, message: Message) -> ConsumeResult:
        order, step = message.body.decode().split()
        with self.lock:
            self.steps.setdefault(order, []).append(step)
        return ConsumeResult.SUCCESS

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.steps.values())


STEPS = ["created", "paid", "shipped", "received", "reviewed"]


def test_fifo_push_consumer_consumes_each_order_in_order(tmp_path: Path) -> None:
    broker = broker_for(tmp_path, "--topic", "OrderSteps:4:FIFO", "--group", "Fulfilment:orderly")
    recorder = Recorder()
    consumer = PushConsumer(
        ClientConfiguration(broker.endpoint, Credentials()),
        "Fulfilment",
        recorder,
        {"OrderSteps": FilterExpression("*")},
    )
    try:
        consumer.startup()
        with producer(broker.endpoint, ("OrderSteps",)) as p:
            for step in STEPS:  # interleaved: every order's step, then the next step
                for order in range(1, 6):
                    m = message("OrderSteps", f"order-{order} {step}".encode())
                    m.message_group = f"order-{order}"
                    p.send(m)
        wait_until(lambda: recorder.count() >= 25, DEADLINE_S, "25 steps consumed")
    finally:
        consumer.shutdown()
        broker.stop()
    assert sorted(recorder.steps) == [f"order-{n}" for n in range(1, 6)]
    for group, steps in recorder.steps.items():
        assert steps == STEPS, f"{group} consumed out of order: {steps}"


def test_progress_survives_a_broker_sigkill_and_a_consumer_restart(tmp_path: Path) -> None:
    broker = broker_for(tmp_path, "--topic", "Durable:2", "--group", "Keepers")
    try:
        with producer(broker.endpoint, ("Durable",)) as p:
            sent = [p.send(message("Durable", f"m{i}".encode())).message_id for i in range(10)]
        with simple_consumer(broker.endpoint, "Keepers", "Durable") as c:
            got = receive_all(c, 10, ack=False)
            acked = {m.message_id for m in got[:6]}
            for m in got[:6]:
                c.ack(m)
        wait_until(
            lambda: consumer_offsets(tmp_path, "Keepers", "Durable") == 6,
            DEADLINE_S,
            "the six acks persisted",
        )
    finally:
        broker.kill()
    broker = broker_for(tmp_path)
    try:
        with simple_consumer(broker.endpoint, "Keepers", "Durable", await_s=1) as again:
            rest = receive_all(again, 4)
            # sleep: past the invisible time, by which a redelivery (none may come) would show
            time.sleep(INVISIBLE_S + 0.5)
            rest += again.receive(32, INVISIBLE_S)
    finally:
        broker.stop()
    assert {m.message_id for m in rest} == set(sent) - acked
