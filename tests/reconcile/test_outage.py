"""The reconciliation of a real outage: a broker process stopped and restarted mid-run, with a
sidecar process in front of it keeping an acknowledgement ledger and a RocksDB outbox.

Messages are sent through the sidecar before the outage (STORED), during it (SPOOLED, cause
UNAVAILABLE), and after the broker is back on its old port and store while the outbox drains
(STORED, and FIFO messages fenced behind their group's spooled ones). Once every spooled message
is in the broker, the sidecar and the broker stop cleanly and ``rocketbox reconcile`` reads the
broker's commitlog, the outbox by its URL and the sidecar's ledger.

Proves: exit 0 and nothing lost; every message sent is ``ok`` (stored, acknowledged), none is
duplicated, recovered, unexpected, pending or dead; the spooled ones are the outbox's DELIVERED
entries and have a time from first failure to delivery; the commitlog scan ends cleanly;
``--json`` prints the summary it writes; report.html renders in headless Chromium.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.reconcile.chromium import dump_dom, read_png, screenshot
from tests.reconcile.rocketbox_reconcile import reconcile
from tests.sidecar.sidecar_process import (
    BROKER_ARGS,
    SidecarProcess,
    message,
    outcome,
    restart,
    send,
    stored_copies,
)

pytestmark = pytest.mark.slow

DELIVERY_DEADLINE_S = 60.0
BEFORE, DURING, AFTER = 40, 30, 40


@dataclass
class Sent:
    """What the sidecar answered, by phase, and each message's id and topic in sending order."""

    ids: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    answers: dict[str, list[str]] = field(default_factory=dict)


def send_phase(sidecar: SidecarProcess, sent: Sent, phase: str, count: int) -> None:
    with sidecar.client() as stub:
        for i in range(count):
            # Every fourth message is FIFO, in three groups: fenced behind spooled ones.
            fifo = {"message_group": f"g{i % 3}"} if i % 4 == 0 else {}
            topic = "Fifo" if fifo else "Orders"
            r = send(stub, message(topic, f"{phase} {i}".encode() * 20, **fifo))
            sent.answers.setdefault(phase, []).append(outcome(r))
            sent.ids.append(r.message_id)
            sent.topics.append(topic)


def test_an_outage_through_the_sidecar_loses_nothing(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", *BROKER_ARGS)
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"
    ledger = tmp_path / "acks.jsonl"
    sidecar = SidecarProcess(broker.endpoint, outbox_url, f"--ack-ledger={ledger}")
    back: BrokerProcess | None = None
    sent = Sent()
    ids, topics, answers = sent.ids, sent.topics, sent.answers

    def send_some(phase: str, count: int) -> None:
        send_phase(sidecar, sent, phase, count)

    try:
        send_some("before", BEFORE)
        broker.stop()
        send_some("during", DURING)
        back = restart(broker)
        send_some("after", AFTER)
        assert set(answers["before"]) == {"stored"}
        assert set(answers["during"]) == {"spooled"}
        assert set(answers["after"]) <= {"stored", "spooled"}  # FIFO fence while draining
        endpoint = back.endpoint
        wait_until(
            lambda: all(len(stored_copies(endpoint, i)) >= 1 for i in ids),
            DELIVERY_DEADLINE_S, "every message in the broker",
        )  # fmt: skip
        sidecar.stop()
        back.stop()
    finally:
        sidecar.kill()
        if back is not None:
            back.kill()
        broker.kill()

    run = reconcile(
        "--commitlog", str(tmp_path / "broker"), "--outbox", outbox_url, "--acks", str(ledger),
        "--master", "local[2]", "--json", out=tmp_path / "out",
    )  # fmt: skip

    assert run.code == 0, run.stderr[-3000:]
    summary = run.summary
    assert json.loads(run.stdout) == summary
    spooled = sum(a.count("spooled") for a in answers.values())
    sent_count = BEFORE + DURING + AFTER
    assert summary["verdict"] == "NOTHING_LOST"
    totals = summary["totals"]
    assert totals["messages"] == totals["ok"] == sent_count
    assert {k: totals[k] for k in ("lost", "duplicated", "recovered", "unexpected", "pending",
                                   "dead", "unchecked")} == dict.fromkeys(
        ("lost", "duplicated", "recovered", "unexpected", "pending", "dead", "unchecked"), 0
    )  # fmt: skip
    assert summary["ledgers"]["lines"] == sent_count
    assert summary["ledgers"]["spooled"] == spooled
    assert summary["outbox"]["delivered"] == spooled
    assert summary["delivery_latency"]["messages"] == spooled
    assert summary["commitlog"]["stops"] == []
    assert summary["commitlog"]["kept_records"] == sent_count
    assert {t["topic"]: t["ok"] for t in summary["per_topic"]} == {
        "Fifo": topics.count("Fifo"),
        "Orders": topics.count("Orders"),
    }

    page = run.out / "report.html"
    png = tmp_path / "report.png"
    screenshot(page, png, tmp_path / "profile")
    assert dump_dom(page, tmp_path / "profile").count('class="main-svg"') >= 8
    assert len({tuple(p) for p in read_png(png)[::8, ::8, :3].reshape(-1, 3).tolist()}) > 50
