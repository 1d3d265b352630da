"""An app written against the official Node client (rocketmq-client-nodejs 1.0.8, pinned in
package.json) changes one thing, its endpoint, from the broker's to the sidecar's RocketMQ front
(``--rocketmq-listen``), and everything it did still works, through the outbox:

- all four send kinds (NORMAL, FIFO, DELAY, a committed TRANSACTION): each message id the client
  reports is in the broker exactly once, with what the client set;
- a transaction the app leaves open is resolved by the broker's check-back, which reaches the
  app's checker through the front's Telemetry stream;
- a SimpleConsumer receives and acks each message once; a PushConsumer of an orderly group
  consumes each message group in send order;
- with the broker down, the Producer's ``send`` returns OK (the message is spooled: offset -1,
  not known yet); once the broker is back every such message is consumed exactly once.

``make test`` installs the Node packages (``npm ci`` in tests/node). A machine without ``node``
fails these tests: they never skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.node.node_script import run_node_script
from tests.node.test_node_client import node_executable
from tests.rocketbox_process import wait_until
from tests.sidecar.sidecar_process import SidecarProcess, restart, stored_copies, wait_stored

pytestmark = pytest.mark.slow

NODE_DIR = Path(__file__).resolve().parent
MIXED_TOPIC = "FrontMixed"
FIFO_TOPIC = "FrontFifo"
ORDERLY_GROUP = "FrontOrderly"
# The broker checks a transaction left open after 1 s, every 0.5 s.
BROKER_ARGS = (
    "--auto-create-topic",
    "--topic", f"{MIXED_TOPIC}:4:MIXED",
    "--topic", f"{FIFO_TOPIC}:4:FIFO",
    "--group", f"{ORDERLY_GROUP}:orderly",
    "--transaction-timeout-ms", "1000",
    "--transaction-check-interval-ms", "500",
    "--invisible-duration-min-ms", "1000",
    "--long-polling-timeout-ms", "2000",
)  # fmt: skip
FRONT_ARGS = ("--rocketmq-listen", "127.0.0.1:0")
DELAY_MS = 2_000
NODE_DEADLINE_MS = 60_000
# Each script has its own deadline; this one only guards against the script's failing to.
SCRIPT_DEADLINE_S = 90.0
DELIVERY_DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def node() -> str:
    return node_executable()


@pytest.fixture(scope="module")
def front(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, SidecarProcess]]:
    data = tmp_path_factory.mktemp("front")
    with BrokerProcess(data / "broker", *BROKER_ARGS) as broker:
        outbox = f"rocksdb://{data / 'outbox'}"
        with SidecarProcess(broker.endpoint, outbox, *FRONT_ARGS) as sidecar:
            yield broker, sidecar


def script(node: str, name: str, *args: str) -> list[dict[str, Any]]:
    """Run a tests/node script; its JSON lines."""
    stdout, report = run_node_script(
        [node, str(NODE_DIR / name), *args, f"--deadline-ms={NODE_DEADLINE_MS}"],
        SCRIPT_DEADLINE_S,
    )
    lines = []
    for line in stdout.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a result line: {line!r}\n{report}")
    return lines


def only_copy(broker: BrokerProcess, message_id: str, topic: str) -> Any:
    copies = [c for c in wait_stored(broker.endpoint, message_id) if c.topic == topic]
    assert len(copies) == 1, f"{message_id}: {len(copies)} copies in {topic}, expected 1"
    return copies[0]


def test_all_four_send_kinds_through_the_front(
    node: str, front: tuple[BrokerProcess, SidecarProcess]
) -> None:
    broker, sidecar = front
    stdout, report = run_node_script(
        [node, str(NODE_DIR / "send_all_kinds.mjs"), sidecar.rocketmq_endpoint, MIXED_TOPIC,
         str(DELAY_MS)],
        SCRIPT_DEADLINE_S,
    )  # fmt: skip
    sent = {r["kind"]: r for r in map(json.loads, stdout.splitlines())}
    assert sorted(sent) == ["DELAY", "FIFO", "NORMAL", "TRANSACTION"], report

    normal = only_copy(broker, sent["NORMAL"]["messageId"], MIXED_TOPIC)
    assert normal.tag == "TagNormal"
    assert list(normal.keys) == ["node-normal-key-1", "node-normal-key-2"]
    assert dict(normal.user_properties) == {"origin": "node"}
    assert normal.body == b"node normal message"
    assert normal.queue_offset == int(sent["NORMAL"]["offset"])

    fifo = only_copy(broker, sent["FIFO"]["messageId"], MIXED_TOPIC)
    assert fifo.message_group == "node-group-1"
    assert fifo.queue_offset == int(sent["FIFO"]["offset"])

    committed = only_copy(broker, sent["TRANSACTION"]["messageId"], MIXED_TOPIC)
    assert committed.tag == "TagTransaction"
    assert committed.body == b"node transaction message"

    # The delayed message reaches its topic at its time, not before.
    delay_id = sent["DELAY"]["messageId"]
    deliver_ms = int(sent["DELAY"]["deliveryTimestampMs"])
    wait_until(
        lambda: any(c.topic == MIXED_TOPIC for c in stored_copies(broker.endpoint, delay_id)),
        DELAY_MS / 1000 + DELIVERY_DEADLINE_S,
        f"the DELAY message {delay_id} delivered to {MIXED_TOPIC}",
    )
    delivered = only_copy(broker, delay_id, MIXED_TOPIC)
    assert delivered.store_timestamp_ms >= deliver_ms, "delivered before its time"
    assert delivered.body == b"node delay message"


def test_an_open_transaction_is_resolved_by_the_check_back_through_the_front(
    node: str, front: tuple[BrokerProcess, SidecarProcess]
) -> None:
    broker, sidecar = front
    lines = script(node, "orphan_transaction.mjs", sidecar.rocketmq_endpoint, MIXED_TOPIC, "COMMIT")
    half, checked = lines
    assert checked == {"checked": half["half"], "resolution": "COMMIT"}
    # The checker's COMMIT went back through the front: the message is in its topic, once.
    copy = only_copy(broker, half["half"], MIXED_TOPIC)
    assert copy.body == b"node orphan transaction message"


def test_a_simple_consumer_through_the_front_receives_each_message_once(
    node: str, front: tuple[BrokerProcess, SidecarProcess]
) -> None:
    _, sidecar = front
    topic = "FrontSimple"
    sent = script(node, "send_count.mjs", sidecar.rocketmq_endpoint, topic, "6")
    got = script(
        node, "receive_ack.mjs", sidecar.rocketmq_endpoint, topic, "FrontSimpleGroup", "6",
        "--invisible-ms=10000", "--listen-ms=1500",
    )  # fmt: skip
    assert sorted(m["messageId"] for m in got) == sorted(m["messageId"] for m in sent)
    assert {m["messageId"]: m["body"] for m in got} == {m["messageId"]: m["body"] for m in sent}


def test_a_push_consumer_of_an_orderly_group_consumes_each_message_group_in_order(
    node: str, front: tuple[BrokerProcess, SidecarProcess]
) -> None:
    _, sidecar = front
    endpoint = sidecar.rocketmq_endpoint
    sent = {g: script(node, "send_count.mjs", endpoint, FIFO_TOPIC, "5", f"--group={g}")
            for g in ("order-a", "order-b")}  # fmt: skip
    got = script(
        node, "push_consume.mjs", endpoint, FIFO_TOPIC, ORDERLY_GROUP, "10", "--listen-ms=1500"
    )
    for group, messages in sent.items():
        consumed = [m["messageId"] for m in got if m["messageGroup"] == group]
        assert consumed == [m["messageId"] for m in messages], f"{group}: {got}"


def test_with_the_broker_down_sends_are_ok_and_each_is_consumed_once_after(
    node: str, tmp_path: Path
) -> None:
    broker = BrokerProcess(tmp_path / "broker", *BROKER_ARGS)
    sidecar: SidecarProcess | None = None
    try:
        sidecar = SidecarProcess(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", *FRONT_ARGS)
        endpoint = sidecar.rocketmq_endpoint
        topic = "FrontOutage"
        # One send while the broker is up: the front knows the topic's route.
        before = script(node, "send_count.mjs", endpoint, topic, "1")
        assert before[0]["offset"] >= 0
        broker.stop()
        during = script(node, "send_count.mjs", endpoint, topic, "5")
        assert [m["offset"] for m in during] == [-1] * 5, "spooled: the offset is not known yet"
        fifo = script(node, "send_count.mjs", endpoint, FIFO_TOPIC, "4", "--group=outage")
        assert all(m["offset"] == -1 for m in fifo)
        broker = restart(broker)
        got = script(
            node, "receive_ack.mjs", endpoint, topic, "FrontOutageGroup", "6", "--listen-ms=2000"
        )
        assert sorted(m["messageId"] for m in got) == sorted(
            m["messageId"] for m in before + during
        ), "each message consumed exactly once"
        ordered = script(
            node, "push_consume.mjs", endpoint, FIFO_TOPIC, "FrontOutageOrderly", "4",
            "--listen-ms=1500",
        )  # fmt: skip
        in_group = [m["messageId"] for m in ordered if m["messageGroup"] == "outage"]
        assert in_group == [m["messageId"] for m in fifo]
    finally:
        if sidecar is not None:
            sidecar.stop()
        broker.stop()
