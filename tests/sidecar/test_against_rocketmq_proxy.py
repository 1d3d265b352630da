"""The sidecar in front of a RocketMQ 5 proxy: the stand-in of tests/rocketmq_proxy/, a process
that serves the public ``apache.rocketmq.v2`` RPCs alone (no rocketbox BrokerAdmin) and picks
each message's queue itself, over two brokers.

- A STORED answer is what the proxy answered, never what the sidecar addressed: the proxy's
  queue offset, no queue id (-1: the answer names none) and no broker (the endpoint fronts two):
  from Send, SendBatch and SendStream, from the RocketMQ front (its entry carries the proxy's
  offset), and in the acknowledgement ledger.
- An outbox entry that may already be stored (its send timed out at a proxy that hung) is resent
  without the index check the proxy does not offer: each such resend is counted in
  ``rocketbox_sidecar_resends_unchecked_total``, one WARNING line says what it means, and the
  message is delivered, its tombstone carrying the proxy's offset and no queue id.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import Code

from outbox.entry import EntryState
from outbox.factory import open_outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.producer import BROKER_NAME_UNKNOWN, QUEUE_ID_UNKNOWN
from tests.prometheus import metrics_port, sample, scrape
from tests.rocketbox_process import wait_until
from tests.rocketmq_proxy import rocketmq_proxy
from tests.sidecar.rocketmq_front.front_send_process import raw_message, raw_send, raw_stub
from tests.sidecar.sidecar_process import (
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    send,
)

pytestmark = pytest.mark.slow

TOPIC = "Orders"
METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")
UNCHECKED = "rocketbox_sidecar_resends_unchecked_total"
# The WARNING's words (sidecar/unchecked_resends.py).
UNCHECKED_LINE = "resent without checking the broker's index"
FRONT_MESSAGE_ID = "01" + "F" * 32
# Shorter than the default 3 s: the sends to the hung proxy end sooner.
SEND_TIMEOUT_ARGS = ("--send-msg-timeout-ms=1000",)


def test_a_stored_answer_is_what_the_proxy_answered(tmp_path: Path) -> None:
    ledger = tmp_path / "acks.jsonl"
    with rocketmq_proxy(tmp_path / "proxy", topics=[TOPIC]) as proxy:
        sidecar = SidecarProcess(
            proxy.endpoint, "memory://", "--ack-ledger", str(ledger),
            "--rocketmq-listen", "127.0.0.1:0",
        )  # fmt: skip
        try:
            with sidecar.client() as stub:
                results = [send(stub, message(TOPIC, f"unary {i}".encode())) for i in range(4)]
                batch = [message(TOPIC, f"batch {i}".encode()) for i in range(4)]
                results += stub.SendBatch(
                    api.SendBatchRequest(messages=batch), timeout=CALL_DEADLINE_S
                ).results
                stream = [
                    api.SendStreamRequest(request_id=i, message=message(TOPIC, b"stream"))
                    for i in range(4)
                ]
                results += [
                    r.result for r in stub.SendStream(iter(stream), timeout=CALL_DEADLINE_S)
                ]
            with raw_stub(sidecar.rocketmq_endpoint) as front:
                [entry] = raw_send(front, raw_message(TOPIC, FRONT_MESSAGE_ID)).entries
        finally:
            sidecar.stop()
        held = {m.message_id: m for m in proxy.stored(TOPIC)}
    assert [outcome(r) for r in results] == ["stored"] * 12
    for r in results:
        assert (r.stored.broker_name, r.stored.queue_id, r.stored.queue_offset) == (
            BROKER_NAME_UNKNOWN, QUEUE_ID_UNKNOWN, held[r.message_id].queue_offset,
        ), r  # fmt: skip
    assert len({(m.broker_name, m.queue_id) for m in held.values()}) > 1, "the proxy's choice"
    assert entry.status.code == Code.OK, entry
    assert (entry.message_id, entry.offset) == (
        FRONT_MESSAGE_ID, held[FRONT_MESSAGE_ID].queue_offset,
    )  # fmt: skip
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert {line["message_id"] for line in lines} == held.keys()
    for line in lines:
        assert (line["state"], line["queue_id"], line["queue_offset"]) == (
            "STORED", QUEUE_ID_UNKNOWN, held[line["message_id"]].queue_offset,
        ), line  # fmt: skip


def test_a_maybe_stored_entry_is_resent_unchecked_counted_and_said_once(tmp_path: Path) -> None:
    url = f"rocksdb://{tmp_path / 'outbox'}"
    with rocketmq_proxy(tmp_path / "proxy", topics=[TOPIC]) as proxy:
        sidecar = SidecarProcess(
            proxy.endpoint, url, "--metrics-listen=127.0.0.1:0", *SEND_TIMEOUT_ARGS
        )
        try:
            port = metrics_port(sidecar.output(), METRICS_LINE)
            with sidecar.client() as stub:
                # The route and the connection are up: the hung proxy then takes the request.
                assert outcome(send(stub, message(TOPIC, b"before"))) == "stored"
                proxy.pause()
                try:
                    hung = stub.SendBatch(
                        api.SendBatchRequest(messages=[message(TOPIC, b"hung")] * 2),
                        timeout=CALL_DEADLINE_S,
                    ).results
                finally:
                    proxy.resume()
            assert [(outcome(r), r.spooled.cause, r.spooled.maybe_stored) for r in hung] == [
                ("spooled", api.SPOOL_CAUSE_AMBIGUOUS, True)
            ] * 2
            ids = {r.message_id for r in hung}
            wait_until(
                lambda: (
                    sample(scrape(port), "rocketbox_sidecar_resends_total", outcome="DELIVERED")
                    == 2
                ),
                CALL_DEADLINE_S,
                "both entries delivered",
            )
            assert sample(scrape(port), UNCHECKED) == 2, "each resend counted"
        finally:
            sidecar.stop()
        copies = [m for m in proxy.stored(TOPIC) if m.message_id in ids]
    warnings = [line for line in sidecar.lines if UNCHECKED_LINE in line]
    assert len(warnings) == 1, sidecar.output()
    assert proxy.endpoint in warnings[0], warnings[0]
    assert "may be delivered twice" in warnings[0], warnings[0]
    assert "--lookup-namesrv, unset" in warnings[0], "what would check them"
    # The hung request may have been stored too once the proxy resumed: at least once.
    assert {m.message_id for m in copies} == ids
    with open_outbox(url) as outbox:
        for message_id in ids:
            tombstone = outbox.get(message_id)
            assert tombstone is not None
            assert tombstone.state is EntryState.DELIVERED
            assert tombstone.receipt is not None
            assert tombstone.receipt.queue_id == QUEUE_ID_UNKNOWN
            offsets = {m.queue_offset for m in copies if m.message_id == message_id}
            assert tombstone.receipt.queue_offset in offsets
