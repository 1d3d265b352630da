"""The sidecar in front of a SYNC_MASTER whose slave is not there: the broker stores each message
and answers HA_NOT_AVAILABLE (RocketMQ's SLAVE_NOT_AVAILABLE); the sidecar answers the app
STORED with durable=false after one attempt, and never resends it: the broker holds one copy,
and the outbox holds nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.prometheus import sample, scrape
from tests.rocketbox_process import REPO_ROOT
from tests.sidecar.sidecar_process import SidecarProcess, message, outcome, send

pytestmark = pytest.mark.slow

TOPIC = "Work"
MESSAGES = 5


def test_a_sync_master_without_its_slave_is_answered_stored_not_durable_and_never_resent(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(
        tmp_path / "broker-a-0",
        "--broker-name=broker-a", "--broker-role=SYNC_MASTER", "--ha-listen=127.0.0.1:0",
        f"--topic={TOPIC}:2:NORMAL",
        metrics=True,
    )  # fmt: skip
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"
    try:
        sidecar = SidecarProcess(broker.endpoint, outbox_url)
        try:
            with sidecar.client() as stub:
                results = [send(stub, message(TOPIC, f"job {i}".encode())) for i in range(MESSAGES)]
        finally:
            sidecar.stop()
        assert [outcome(r) for r in results] == ["stored"] * MESSAGES
        assert all(not r.stored.durable and r.stored.attempts == 1 for r in results), results
        # One put per message, each answered SLAVE_NOT_AVAILABLE: none was sent again.
        samples = scrape(broker.metrics_port)
        weak = sample(
            samples, "rocketbox_broker_put_messages_total", topic=TOPIC,
            status="SLAVE_NOT_AVAILABLE",
        )  # fmt: skip
        assert weak == MESSAGES
        assert sample(samples, "rocketbox_broker_put_messages_total", topic=TOPIC,
                      status="PUT_OK") == 0  # fmt: skip
    finally:
        broker.stop()
    stats = subprocess.run(
        [sys.executable, "-m", "rocketbox", "outbox", "stats", "--outbox", outbox_url, "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(stats.stdout)["totals"]["pending"] == 0, stats.stdout
