"""The official Node client's SimpleConsumer, unchanged, in a broadcast consumer group of a real
``rocketbox broker`` (``--group NAME:broadcast``).

Proves: two Node consumers running at once each receive every message exactly once (the clients
differ only by their ``x-mq-client-id``); a Node consumer started after them (a new process, so a
new client id) continues a departed member's progress: it receives exactly the messages sent
since, none of those already acked.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.node.test_node_client import node_executable
from tests.node.test_node_consumer import COUNT, assert_each_once, receive, send_all

pytestmark = pytest.mark.slow

TOPIC = "NodeNews"
GROUP = "NodeFans"
# Each consumer keeps receiving this long after its COUNT came: a duplicate would show, and the
# other consumer is surely a member (running) before this one leaves.
LISTEN_MS = 4_000


def test_node_consumers_of_a_broadcast_group_each_receive_everything(tmp_path: Path) -> None:
    node = node_executable()
    broker = BrokerProcess(
        tmp_path,
        "--invisible-duration-min-ms",
        "1000",
        "--long-polling-timeout-ms",
        "2000",
        "--topic",
        f"{TOPIC}:4",
        "--group",
        f"{GROUP}:broadcast",
    )
    try:
        sent = send_all(broker.endpoint, TOPIC)
        options = ("--await-ms=1000", f"--listen-ms={LISTEN_MS}")
        with ThreadPoolExecutor(2) as pool:
            runs = [
                pool.submit(receive, node, broker, TOPIC, GROUP, COUNT, *options) for _ in range(2)
            ]
            for run in runs:
                assert_each_once(run.result(), sent, attempt=1)

        later = send_all(broker.endpoint, TOPIC)
        restarted = receive(node, broker, TOPIC, GROUP, COUNT, *options)
        assert_each_once(restarted, later, attempt=1)
    except BaseException as e:
        broker.kill()
        e.add_note(f"broker output:\n{broker.output()}")  # shown by pytest with the failure
        raise
    broker.stop()
