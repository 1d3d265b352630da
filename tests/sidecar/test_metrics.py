"""The sidecar's Prometheus endpoint counts what it did: every answer by state and cause, the
resend pool's deliveries, and the outbox's depth under the outbox's label (a RocksDB outbox's:
its directory, qualified by the sidecar); scraped over HTTP from a real process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocketbox_api.v1 import sidecar_pb2 as api
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import Samples, metrics_port, sample, scrape, series
from tests.sidecar.sidecar_process import SidecarProcess, message, outcome, restart, send

pytestmark = pytest.mark.slow

METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")
DEADLINE_S = 30.0


def sends(samples: Samples, state: str, cause: str) -> float:
    return sample(samples, "rocketbox_sidecar_sends_total", state=state, cause=cause)


def test_counters_move_by_what_was_sent(broker: BrokerProcess, tmp_path: Path) -> None:
    sidecar = SidecarProcess(
        broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", "--metrics-listen=127.0.0.1:0",
        "--outbox-stats-interval-ms=50", "--backoff-initial-ms=2000", "--backoff-max-ms=2000",
        "--sidecar-id=metrics-test",
    )  # fmt: skip
    port = metrics_port(sidecar.output(), METRICS_LINE)
    back: BrokerProcess | None = None
    try:
        with sidecar.client() as stub:
            assert {outcome(send(stub, message("Orders"))) for _ in range(3)} == {"stored"}
            batch = stub.SendBatch(api.SendBatchRequest(messages=[message("Orders", b"")]))
            assert outcome(batch.results[0]) == "rejected"
            broker.stop()
            assert {outcome(send(stub, message("Orders"))) for _ in range(2)} == {"spooled"}
        samples = scrape(port)
        assert sends(samples, "STORED", "") == 3
        assert sends(samples, "REJECTED", "INVALID_ARGUMENT") == 1
        assert sends(samples, "SPOOLED", "UNAVAILABLE") == 2
        assert samples[("rocketbox_outbox_put_seconds_count", ())] == 2
        wait_until(
            lambda: sample(scrape(port), "rocketbox_outbox_entries", state="PENDING") == 2,
            DEADLINE_S, "the outbox gauge to show the two pending entries",
        )  # fmt: skip
        labels = {dict(k[1])["outbox"] for k in series(scrape(port), "rocketbox_outbox_entries")}
        assert labels == {f"rocksdb://{tmp_path / 'outbox'} on metrics-test"}
        back = restart(broker)
        delivered = ("rocketbox_sidecar_resends_total", (("outcome", "DELIVERED"),))
        wait_until(
            lambda: scrape(port).get(delivered) == 2,
            DEADLINE_S, "the pool's two deliveries counted",
        )  # fmt: skip
        wait_until(
            lambda: sample(scrape(port), "rocketbox_outbox_entries", state="DELIVERED") == 2,
            DEADLINE_S, "the outbox gauge to show two tombstones",
        )  # fmt: skip
    finally:
        sidecar.stop()
        if back is not None:
            back.kill()
