"""The consumer side through the sidecar's RocketMQ front: the unmodified official Python clients
pointed at the front, a real broker behind it.

Proves: a SimpleConsumer receives, acks, and changes a message's invisible duration (the message
comes back after it, with a higher attempt, and nothing acked comes back); a FIFO PushConsumer
consumes every order's steps in order (its Telemetry passed through: the broker's FIFO flag
reached it); a FIFO push consumer whose listener keeps failing dead-letters the message with
ForwardMessageToDeadLetterQueue, and the dead letter is read through the front too; a namespaced
consumer works through the front and the broker sees the app's own client id, not the
sidecar's; every forwarded call is counted by method and code.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import (
    ConsumeResult,
    FilterExpression,
    Message,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)

from rocketbox.admin_client import AdminClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_consumer import receive_all
from tests.broker.grpc_service.test_producer import producer
from tests.cluster.processes import running_cluster
from tests.cluster.test_cluster import query_route as route_queues
from tests.prometheus import sample, scrape
from tests.rocketbox_process import wait_until
from tests.sidecar.rocketmq_front.front_process import (
    BROKER_FRONT_ARGS,
    DEADLINE_S,
    INVISIBLE_S,
    FrontSidecar,
    broker_and_front,
    config,
    message,
    simple_consumer,
)

pytestmark = pytest.mark.slow

STEPS = ["created", "paid", "shipped", "received", "reviewed"]
ORDERS = 4


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, FrontSidecar]]:
    with broker_and_front(
        tmp_path_factory.mktemp("front"),
        "--topic", "OrderSteps:4:FIFO", "--group", "Fulfilment:orderly",
        "--topic", "Poisoned:1:FIFO", "--group", "Careful:orderly:1",
    ) as processes:  # fmt: skip
        yield processes


def forwarded(sidecar: FrontSidecar, method: str, code: str = "OK") -> float:
    return sample(
        scrape(sidecar.metrics_port),
        "rocketbox_sidecar_front_forwarded_total",
        method=method,
        code=code,
    )


def test_simple_consumer_receives_acks_and_changes_invisible_duration(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    _, sidecar = front
    endpoint = sidecar.front_endpoint
    with simple_consumer(endpoint, "Workers", "Work") as c, producer(endpoint, ("Work",)) as p:
        sent = {p.send(message("Work", f"job {i}".encode())).message_id for i in range(10)}
        got = receive_all(c, 10, ack=False)
        assert {m.message_id for m in got} == sent
        assert all(m.delivery_attempt == 1 for m in got)
        later, acked = got[0], got[1:]
        for m in acked:
            c.ack(m)
        c.change_invisible_duration(later, 1)  # back in a second, not after INVISIBLE_S
        again = receive_all(c, 1, ack=False)
        assert [(m.message_id, m.delivery_attempt) for m in again] == [(later.message_id, 2)]
        c.ack(again[0])
        # sleep: past the invisible time, after which an acked message would come back
        time.sleep(INVISIBLE_S + 0.5)
        assert c.receive(32, INVISIBLE_S) == []
    assert forwarded(sidecar, "AckMessage") >= 10
    assert forwarded(sidecar, "ChangeInvisibleDuration") >= 1
    assert forwarded(sidecar, "ReceiveMessage") >= 2


class Recorder(MessageListener):  # type: ignore[misc]  # the official client ships no type information
    def __init__(self, answer: ConsumeResult = ConsumeResult.SUCCESS) -> None:
        self.answer = answer
        self.lock = threading.Lock()
        self.steps: dict[str, list[str]] = {}
        self.seen: list[str] = []

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.seen.append(message.message_id)
            if self.answer == ConsumeResult.SUCCESS:
                order, step = message.body.decode().split()
                self.steps.setdefault(order, []).append(step)
        return self.answer

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.steps.values())


def push_consumer(endpoint: str, group: str, topic: str, listener: Recorder) -> PushConsumer:
    consumer = PushConsumer(config(endpoint), group, listener, {topic: FilterExpression("*")})
    consumer.startup()  # waits for the Settings reply: the broker's, through the front
    return consumer


def test_fifo_push_consumer_consumes_each_order_in_order(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    _, sidecar = front
    endpoint = sidecar.front_endpoint
    recorder = Recorder()
    consumer = push_consumer(endpoint, "Fulfilment", "OrderSteps", recorder)
    try:
        with producer(endpoint, ("OrderSteps",)) as p:
            for step in STEPS:  # interleaved: every order's step, then the next step
                for order in range(ORDERS):
                    p.send(message("OrderSteps", f"order-{order} {step}".encode(), f"o{order}"))
        wait_until(
            lambda: recorder.count() >= ORDERS * len(STEPS), DEADLINE_S, "every step consumed"
        )
    finally:
        consumer.shutdown()
    assert sorted(recorder.steps) == [f"order-{n}" for n in range(ORDERS)]
    for name, steps in recorder.steps.items():
        assert steps == STEPS, f"{name} consumed out of order: {steps}"
    assert forwarded(sidecar, "QueryAssignment") >= 1


def test_a_fifo_message_failing_past_its_attempts_is_dead_lettered(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    """Group Careful allows 2 attempts: the FIFO push consumer tries twice locally, then
    forwards the message to %DLQ%Careful itself."""
    _, sidecar = front
    endpoint = sidecar.front_endpoint
    failing = Recorder(ConsumeResult.FAILURE)
    consumer = push_consumer(endpoint, "Careful", "Poisoned", failing)
    try:
        with producer(endpoint, ("Poisoned",)) as p:
            poison = p.send(message("Poisoned", b"order-x poison", "x")).message_id
        wait_until(
            lambda: forwarded(sidecar, "ForwardMessageToDeadLetterQueue") >= 1,
            DEADLINE_S,
            "the message forwarded to the dead-letter queue",
        )
    finally:
        consumer.shutdown()
    assert failing.seen == [poison, poison]
    with simple_consumer(endpoint, "Janitors", "%DLQ%Careful") as dlq:
        dead = receive_all(dlq, 1)
    assert [(m.message_id, m.body) for m in dead] == [(poison, b"order-x poison")]


def test_a_namespaced_consumer_is_seen_by_the_broker_as_the_app(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    broker, sidecar = front
    endpoint = sidecar.front_endpoint
    with (
        simple_consumer(endpoint, "Tenants", "Scoped", namespace="tenant-a") as c,
        # Straight to the broker: the front sends under the sidecar's own --namespace only.
        producer(broker.endpoint, ("Scoped",), namespace="tenant-a") as p,
    ):
        sent = p.send(message("Scoped", b"for tenant a")).message_id
        got = receive_all(c, 1)
        assert [m.message_id for m in got] == [sent]
        # The broker keeps a namespaced group under its stored name, NAMESPACE%NAME.
        with AdminClient(broker.endpoint) as admin:
            wait_until(
                lambda: (
                    [m.client_id for m in admin.describe_group("tenant-a%Tenants").members]
                    == [c.client_id]
                ),
                DEADLINE_S,
                "the app's client id among the group's members",
            )


CLUSTER_TOPIC = "ClusterTopic"
CLUSTER_MESSAGES = 20
CLUSTER_SENDS_MAX = 200
LONG_INVISIBLE_S = 60


def send_to_both_groups(endpoint: str) -> set[str]:
    """Message ids sent straight to the cluster until each group holds some: the client spreads
    sends over the route's queues, but a send it retries elsewhere (a loaded machine) may not."""
    sent: set[str] = set()
    groups: Counter[str] = Counter()
    with producer(endpoint, (CLUSTER_TOPIC,)) as p:
        while len(sent) < CLUSTER_MESSAGES or len(groups) < 2:
            assert len(sent) < CLUSTER_SENDS_MAX, f"sends by group after {len(sent)}: {groups}"
            receipt = p.send(message(CLUSTER_TOPIC, b"m%d" % len(sent)))
            sent.add(receipt.message_id)
            # A queue's str is "<broker name>.<topic>.<queue id>".
            groups[str(receipt.message_queue).split(".", 1)[0]] += 1
    return sent


def receive_each(c: SimpleConsumer, ids: set[str]) -> list[Message]:
    """Each of ``ids`` once, unacked: invisible long enough that none comes back meanwhile (on a
    loaded machine, INVISIBLE_S would let one group's messages return before the other's came)."""
    got: dict[str, Message] = {}
    end = time.monotonic() + DEADLINE_S
    while set(got) != ids and time.monotonic() < end:
        for m in c.receive(32, LONG_INVISIBLE_S):
            got.setdefault(m.message_id, m)
    assert set(got) == ids, f"received {len(got)} of {len(ids)}"
    return list(got.values())


def test_in_a_cluster_receives_and_handles_go_to_the_group_that_holds_the_message(
    tmp_path: Path,
) -> None:
    """Two broker groups behind the front's one access point (broker-a): a consumer's receives
    reach both groups, and its acks and invisible-time changes go back to the group that gave
    the handle (broker-b's handles carry its name), so nothing acked comes back."""
    args = [f"--topic={CLUSTER_TOPIC}:2", *BROKER_FRONT_ARGS]
    with running_cluster(tmp_path, master_args=args) as cluster:
        a = cluster.broker("broker-a")
        wait_until(
            lambda: len({q.broker.name for q in route_queues(a.endpoint)}) == 2,
            DEADLINE_S,
            "both groups in the topic's route",
        )
        sent = send_to_both_groups(a.endpoint)
        sidecar = FrontSidecar(a.endpoint, f"rocksdb://{tmp_path / 'outbox'}")
        try:
            endpoint = sidecar.front_endpoint
            with simple_consumer(endpoint, "ClusterGroup", CLUSTER_TOPIC) as c:
                got = receive_each(c, sent)
                from_b = [m for m in got if m.receipt_handle.startswith("broker-b|")]
                assert from_b, "no message of broker-b's group"
                assert len(from_b) < len(got), "no message of broker-a's group"
                later = from_b[0]
                for m in got:
                    if m is not later:
                        c.ack(m)
                c.change_invisible_duration(later, 1)
                again = receive_all(c, 1, ack=False)
                assert [(m.message_id, m.delivery_attempt) for m in again] == [
                    (later.message_id, 2)
                ]
                c.ack(again[0])
                # A message acked at the wrong group would come back after its invisible time.
                # sleep: past the invisible time, when such a message would be back
                time.sleep(INVISIBLE_S + 0.5)
                assert c.receive(32, INVISIBLE_S) == []
        finally:
            sidecar.stop()
    assert {m.message_id for m in got} == sent
