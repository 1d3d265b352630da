"""The official Node client (rocketmq-client-nodejs 1.0.8, pinned in package.json) sends all four
kinds of message to a real ``rocketbox broker``: NORMAL, FIFO, DELAY and a committed
TRANSACTION. Each message id the client reports must then be in the store, in its topic, with
the properties the client set; the delayed one only once its delivery time has passed.

``make test`` installs the Node packages (``npm ci`` in tests/node). A machine without ``node``
fails this test: it never skips.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from broker.store.codec.message import (
    PROPERTY_SHARDING_KEY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
    MessageExt,
)
from broker.store.message_store import DefaultMessageStore
from broker.timer_message import PROGRESS_FILE_NAME, SCHEDULE_TOPIC
from tests.broker.broker_process import BrokerProcess, small_store_config, wait_until
from tests.node.node_script import run_node_script

pytestmark = pytest.mark.slow

NODE_DIR = Path(__file__).resolve().parent
SCRIPT = NODE_DIR / "send_all_kinds.mjs"
CLIENT_PACKAGE = NODE_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json"
CLIENT_VERSION = "1.0.8"
TOPIC = "NodeTopic"
DELAY_MS = 3_000
# The script has its own 60 s deadline; this one only guards against the script's failing to.
SCRIPT_DEADLINE_S = 90.0
# The timer delivers within ~1 s of the due time and records it within ~1 s more.
DELIVERY_DEADLINE_S = DELAY_MS / 1000 + 20.0
KINDS = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")


def node_executable() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "`node` is not on PATH: the Node client test needs Node.js >= 18 and npm "
            "(then `make test` installs tests/node's packages)"
        )
    if not CLIENT_PACKAGE.exists():
        pytest.fail(
            f"{CLIENT_PACKAGE.parent} is missing: run `make test`, or "
            "`cd tests/node && npm ci`, to install the Node client"
        )
    version = json.loads(CLIENT_PACKAGE.read_text())["version"]
    assert version == CLIENT_VERSION, (
        f"installed rocketmq-client-nodejs {version}, pinned {CLIENT_VERSION}"
    )
    return node


def run_script(node: str, broker: BrokerProcess) -> dict[str, dict[str, Any]]:
    """Run send_all_kinds.mjs against the broker; its JSON lines by kind."""
    stdout, report = run_node_script(
        [node, str(SCRIPT), broker.endpoint, TOPIC, str(DELAY_MS)], SCRIPT_DEADLINE_S
    )
    sent = {}
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
            sent[record["kind"]] = record
        except (ValueError, KeyError, TypeError):
            pytest.fail(f"not a result line: {line!r}\n{report}")
    assert sorted(sent) == sorted(KINDS), report
    return sent


def timer_watermark(data_dir: Path) -> int:
    """How many schedule entries the broker's timer has recorded as delivered (in order)."""
    path = data_dir / "config" / PROGRESS_FILE_NAME
    if not path.exists():
        return 0
    return int(json.loads(path.read_text())["watermark"])


def only_copy(store: DefaultMessageStore, message_id: str, topic: str) -> MessageExt:
    copies = store.query_message_by_id(message_id, topic)
    assert len(copies) == 1, f"{message_id}: {len(copies)} copies in {topic}, expected 1"
    return copies[0]


def test_node_client_sends_all_four_kinds(tmp_path: Path) -> None:
    node = node_executable()
    broker = BrokerProcess(tmp_path, "--topic", f"{TOPIC}:4:MIXED")
    try:
        sent = run_script(node, broker)
        # The delayed message is only in its topic once the timer has delivered it: the one
        # schedule entry (offset 0) is delivered when the watermark passes it.
        wait_until(
            lambda: timer_watermark(tmp_path) >= 1,
            DELIVERY_DEADLINE_S,
            f"the timer to deliver the DELAY message {sent['DELAY']['messageId']}",
        )
    except BaseException as e:
        broker.kill()
        e.add_note(f"broker output:\n{broker.output()}")  # shown by pytest with the failure
        raise
    broker.stop()

    store = DefaultMessageStore(small_store_config(tmp_path))
    store.start()
    try:
        normal = only_copy(store, sent["NORMAL"]["messageId"], TOPIC)
        assert normal.tags == "TagNormal"
        assert normal.keys == ["node-normal-key-1", "node-normal-key-2"]
        assert normal.user_properties == {"origin": "node"}
        assert normal.body == b"node normal message"
        assert normal.queue_offset == sent["NORMAL"]["offset"]
        assert PROPERTY_SHARDING_KEY not in normal.properties

        fifo = only_copy(store, sent["FIFO"]["messageId"], TOPIC)
        assert fifo.tags == "TagFifo"
        assert fifo.keys == ["node-fifo-key"]
        assert fifo.properties[PROPERTY_SHARDING_KEY] == "node-group-1"
        assert fifo.body == b"node fifo message"
        assert fifo.queue_offset == sent["FIFO"]["offset"]

        delay_id = sent["DELAY"]["messageId"]
        deliver_ms = int(sent["DELAY"]["deliveryTimestampMs"])
        scheduled = only_copy(store, delay_id, SCHEDULE_TOPIC)
        assert int(scheduled.properties[PROPERTY_TIMER_DELIVER_MS]) == deliver_ms
        assert scheduled.store_timestamp_ms < deliver_ms, "stored at once, not at its time"
        delivered = only_copy(store, delay_id, TOPIC)
        assert delivered.store_timestamp_ms >= deliver_ms, "delivered before its time"
        assert delivered.tags == "TagDelay"
        assert delivered.keys == ["node-delay-key"]
        assert delivered.body == b"node delay message"

        committed = only_copy(store, sent["TRANSACTION"]["messageId"], TOPIC)
        assert committed.tags == "TagTransaction"
        assert committed.keys == ["node-transaction-key"]
        assert committed.body == b"node transaction message"
        assert PROPERTY_TRANSACTION_PREPARED not in committed.properties
    finally:
        store.shutdown()
