"""A long broker outage, time-compressed, through real processes: a sidecar on a RocksDB outbox,
its broker SIGKILLed before the sends and restarted after an outage of many back-offs.

It proves:
- every message sent during the outage is answered SPOOLED, none is buried however long the
  outage lasts within its budget (the back-off is 10-50 ms: an outage of more than a hundred
  back-offs), and every one is stored exactly once when the broker returns;
- an outage costs about one outbox write per probe, not one per entry per back-off: every failed
  resend in the outage was a probe, one at a time (the sidecar's own counters).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from outbox import EntryState, open_outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import metrics_port, sample, scrape
from tests.sidecar.sidecar_process import (
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    restart,
    stored_copies,
)

pytestmark = pytest.mark.slow

TOPIC = "Orders"
SPOOLED = 100
# Probes the outage lasts at least: each one a back-off of at most 50 ms, so over a hundred
# back-offs, when every entry used to be resent on each.
PROBES_MIN = 120
DEADLINE_S = 60.0
METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")
SIDECAR_ARGS = (
    "--backoff-initial-ms=10",
    "--backoff-max-ms=50",
    "--probe-interval-max-ms=50",
    "--metrics-listen=127.0.0.1:0",
)


def counters(sidecar: SidecarProcess) -> tuple[float, float, float]:
    """The sidecar's probes, rescheduled and buried resends so far."""
    samples = scrape(metrics_port(sidecar.output(), METRICS_LINE))
    return (
        sample(samples, "rocketbox_sidecar_broker_probes_total"),
        sample(samples, "rocketbox_sidecar_resends_total", outcome="RESCHEDULED"),
        sample(samples, "rocketbox_sidecar_resends_total", outcome="BURIED"),
    )


def test_a_long_outage_buries_nothing_and_every_message_is_stored_once(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    broker.kill()
    url = f"rocksdb://{tmp_path / 'outbox'}"
    sidecar = SidecarProcess(broker.endpoint, url, *SIDECAR_ARGS)
    try:
        with sidecar.client() as stub:
            batch = [message(TOPIC, f"m{n}".encode()) for n in range(SPOOLED)]
            response: api.SendBatchResponse = stub.SendBatch(
                api.SendBatchRequest(messages=batch), timeout=CALL_DEADLINE_S
            )
        assert {outcome(r) for r in response.results} == {"spooled"}
        ids = [r.message_id for r in response.results]
        wait_until(
            lambda: counters(sidecar)[0] >= PROBES_MIN, DEADLINE_S,
            f"{PROBES_MIN} probes of the dead broker",
        )  # fmt: skip
        probes, rescheduled, buried = counters(sidecar)
        assert buried == 0
        # Each failed resend was a probe (the one out when the counters were read may have
        # failed since): one entry a probe interval, the others untouched.
        assert rescheduled <= probes
        back = restart(broker)
        try:
            wait_until(
                lambda: all(stored_copies(back.endpoint, i) for i in ids), DEADLINE_S,
                "every spooled message stored",
            )  # fmt: skip
            copies = {i: len(stored_copies(back.endpoint, i)) for i in ids}
            assert set(copies.values()) == {1}, "a message stored more than once"
        finally:
            back.kill()
        assert counters(sidecar)[2] == 0, "an entry buried"
    finally:
        sidecar.stop()
    with open_outbox(url) as outbox:
        states = {e.message_id: e.state for e in outbox.scan_all()}
    assert set(states) == set(ids)
    assert set(states.values()) == {EntryState.DELIVERED}
