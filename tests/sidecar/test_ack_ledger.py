"""The acknowledgement ledger holds the answers the sidecar sent, and only those:

- after a clean stop it holds exactly the STORED and SPOOLED answers the client received from
  Send, SendBatch and SendStream, with the states and receipts they carried, and no rejection;
  with the flush policy at 0 (the default) and at an interval alike;
- at 0 an answer the client received reaches the file while the sidecar runs, and survives the
  sidecar being SIGKILLed;
- a ledger that cannot be written (a full disk) changes no answer and fails no stop: the
  failure is logged, once per interval;
- a SendBatch the client cancelled before its answer was sent is not in it, though one of its
  messages was stored (its other one held in intake by a stopped outbox);
- AckLedger itself: one JSON line per answer, at once at 0; at an interval, nothing until the
  interval's write or ``close``; a namespaced sidecar's topics written as stored
  (NAMESPACE%TOPIC); a negative interval is refused; a ledger a crash left with a torn last
  line is reopened with that line ended, so the first new answer is a line of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from outbox.entry import OutboxEntry, OutboxLimits, OutboxMessage, SpoolCause
from outbox.factory import open_outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.clock import now_ms
from sidecar.intake import Spooled, Stored
from sidecar.ledger import AckLedger
from sidecar.producer import SendReceipt
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import metrics_port, sample, scrape
from tests.services import free_port, start_private_redis
from tests.sidecar.sidecar_process import (
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    send,
    stored_copies,
)
from tests.sidecar.test_coalescing import METRICS_ARGS, METRICS_LINE

pytestmark = pytest.mark.slow

LEDGER_DEADLINE_S = 10.0
HOUR_MS = 3_600_000


def ledger_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def recorded(path: Path) -> dict[str, str]:
    lines = ledger_lines(path)
    by_id = {line["message_id"]: line["state"] for line in lines}
    assert len(by_id) == len(lines), "an answer recorded twice"
    return by_id


def taken(results: list[api.SendResult]) -> dict[str, str]:
    """The STORED and SPOOLED answers among ``results``, as the ledger writes them."""
    return {
        r.message_id: outcome(r).upper() for r in results if outcome(r) in ("stored", "spooled")
    }


def send_every_way(sidecar: SidecarProcess) -> list[api.SendResult]:
    """Send, a SendBatch and a SendStream, each with a rejection among its answers."""
    bad = message("Orders", b"")  # an empty body: rejected
    results: list[api.SendResult] = []
    with sidecar.client() as stub:
        results.append(send(stub, message("Orders", b"one")))
        batch: api.SendBatchResponse = stub.SendBatch(
            api.SendBatchRequest(messages=[message("Orders", b"two"), bad, message("Fifo", b"3",
                                 message_group="g")]),
            timeout=CALL_DEADLINE_S,
        )  # fmt: skip
        results += batch.results
        requests = [
            api.SendStreamRequest(request_id=1, message=message("Orders", b"four")),
            api.SendStreamRequest(request_id=2, message=bad),
            api.SendStreamRequest(request_id=3),
            api.SendStreamRequest(request_id=4, message=message("Orders", b"five")),
        ]
        results += [r.result for r in stub.SendStream(iter(requests), timeout=CALL_DEADLINE_S)]
    assert sorted(outcome(r) for r in results) == ["rejected"] * 3 + ["stored"] * 5
    return results


@pytest.mark.parametrize("flush_interval_ms", [0, 50])
def test_after_a_clean_stop_the_ledger_holds_exactly_the_answers_sent(
    broker: BrokerProcess, tmp_path: Path, flush_interval_ms: int
) -> None:
    ledger = tmp_path / "acks.jsonl"
    sidecar = SidecarProcess(
        broker.endpoint, "memory://", f"--ack-ledger={ledger}",
        f"--ack-ledger-flush-interval-ms={flush_interval_ms}",
    )  # fmt: skip
    try:
        results = send_every_way(sidecar)
        broker.stop()
        with sidecar.client() as stub:
            spooled = send(stub, message("Orders", b"six"))
        assert outcome(spooled) == "spooled"
    finally:
        sidecar.stop()
    results.append(spooled)
    assert recorded(ledger) == taken(results)
    lines = {line["message_id"]: line for line in ledger_lines(ledger)}
    for r in results:
        if outcome(r) == "stored":
            assert lines[r.message_id]["queue_offset"] == r.stored.queue_offset
    assert lines[spooled.message_id]["cause"] == "UNAVAILABLE"


def test_at_once_a_received_answer_is_in_the_file_and_survives_a_sigkill(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    ledger = tmp_path / "acks.jsonl"
    sidecar = SidecarProcess(broker.endpoint, "memory://", f"--ack-ledger={ledger}")
    try:
        answers = taken(send_every_way(sidecar))
        # Written on the event loop once gRPC has sent the answer: the client may read it an
        # instant before the line is written, never long after.
        wait_until(lambda: recorded(ledger) == answers, LEDGER_DEADLINE_S, "the answers written")
    finally:
        sidecar.kill()
    assert sidecar.proc.returncode == -signal.SIGKILL
    assert recorded(ledger) == answers


def test_a_ledger_that_cannot_be_written_changes_no_answer_and_no_stop(
    broker: BrokerProcess,
) -> None:
    sidecar = SidecarProcess(broker.endpoint, "memory://", "--ack-ledger=/dev/full")
    try:
        send_every_way(sidecar)  # every answer as without a ledger
    finally:
        sidecar.stop()  # and exit 0
    # Three calls' writes failed, within one log interval: one line says so.
    failed = [line for line in sidecar.output().splitlines() if "ack ledger:" in line]
    assert len(failed) == 1, sidecar.output()
    assert "answers not written" in failed[0]


@pytest.fixture
def stoppable_redis_url(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A private redis-server's outbox URL and its pid (to SIGSTOP it); a long socket timeout,
    so that a write to the stopped server hangs rather than fails while the test looks."""
    port = free_port()
    server = start_private_redis(port, tmp_path)
    try:
        yield f"redis://127.0.0.1:{port}/0?prefix=ledger&socket_timeout=120", server.pid
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait()


def test_a_batch_cancelled_before_its_answer_was_sent_is_not_recorded(
    broker: BrokerProcess, tmp_path: Path, stoppable_redis_url: tuple[str, int]
) -> None:
    outbox_url, redis_pid = stoppable_redis_url
    # An entry of FIFO group g that is due in an hour: the sidecar fences g, so a new message of
    # g is spooled behind it, a write to the outbox.
    created_ms = now_ms()
    with open_outbox(outbox_url, OutboxLimits()) as outbox:
        outbox.put([OutboxEntry(
            message=OutboxMessage("Fifo", b"head", "head", message_group="g"),
            cause=SpoolCause.UNAVAILABLE, created_ms=created_ms,
            next_send_time_ms=created_ms + HOUR_MS, state_changed_ms=created_ms,
        )])  # fmt: skip
    ledger = tmp_path / "acks.jsonl"
    sidecar = SidecarProcess(broker.endpoint, outbox_url, f"--ack-ledger={ledger}", *METRICS_ARGS)
    try:
        port = metrics_port(sidecar.output(), METRICS_LINE)

        def inside() -> float:
            return sample(scrape(port), "rocketbox_sidecar_intake_in_flight")

        with sidecar.client() as stub:
            before = send(stub, message("Orders", b"before"))
            os.kill(redis_pid, signal.SIGSTOP)
            call = stub.SendBatch.future(
                api.SendBatchRequest(messages=[
                    message("Orders", b"stored", message_id="stored-never-answered"),
                    message("Fifo", b"fenced", message_id="fenced", message_group="g"),
                ]),
                timeout=CALL_DEADLINE_S,
            )  # fmt: skip
            # One message of the batch is stored; the other waits on the stopped outbox, and so
            # does the batch's answer.
            wait_until(
                lambda: bool(stored_copies(broker.endpoint, "stored-never-answered")),
                CALL_DEADLINE_S, "the batch's first message stored",
            )  # fmt: skip
            wait_until(lambda: inside() == 1, CALL_DEADLINE_S, "the fenced message inside")
            assert not call.done()
            call.cancel()
            with pytest.raises(grpc.FutureCancelledError):
                call.result()
            # The outbox resumes only once the sidecar saw the cancel (the cancelled handler let
            # its message go): resumed earlier, the batch could be answered before the cancel
            # arrived, and an answer crossing a cancel on the wire is recorded as sent.
            wait_until(lambda: inside() == 0, CALL_DEADLINE_S, "the cancel seen by the sidecar")
            os.kill(redis_pid, signal.SIGCONT)
    finally:
        os.kill(redis_pid, signal.SIGCONT)
        sidecar.stop()
    assert recorded(ledger) == {before.message_id: "STORED"}


# -- AckLedger itself ------------------------------------------------------------------------------
RECEIPT = SendReceipt("a", "broker-a", 1, 42, durable=True, attempts=1)


def test_the_ledger_writes_at_once_at_zero(tmp_path: Path) -> None:
    path = tmp_path / "acks.jsonl"
    ledger = AckLedger(path, flush_interval_ms=0)
    ledger.record(1_000, [("a", "Orders", Stored(RECEIPT))])
    assert ledger_lines(path) == [
        {"message_id": "a", "topic": "Orders", "time_ms": 1_000, "state": "STORED",
         "queue_id": 1, "queue_offset": 42, "durable": True},
    ]  # fmt: skip
    ledger.close()


def test_at_an_interval_the_ledger_writes_on_its_beat_and_at_close(tmp_path: Path) -> None:
    path = tmp_path / "acks.jsonl"
    ledger = AckLedger(path, flush_interval_ms=20)
    entry = OutboxEntry(
        message=OutboxMessage("Orders", b"b", "b"), cause=SpoolCause.THROTTLED, created_ms=1,
        next_send_time_ms=2,
    )  # fmt: skip

    async def beat() -> None:
        ledger.record(1_000, [("a", "Orders", Stored(RECEIPT))])
        assert ledger_lines(path) == []
        run = asyncio.create_task(ledger.run())
        for _ in range(int(LEDGER_DEADLINE_S / 0.01)):
            if ledger_lines(path):
                break
            await asyncio.sleep(0.01)
        ledger.record(1_001, [("b", "Orders", Spooled(entry))])
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(beat())
    assert [line["message_id"] for line in ledger_lines(path)] == ["a"]
    ledger.close()
    lines = ledger_lines(path)
    assert [(line["message_id"], line["state"]) for line in lines] == [
        ("a", "STORED"), ("b", "SPOOLED"),
    ]  # fmt: skip
    assert lines[1]["cause"] == "THROTTLED"


def test_a_namespaced_sidecar_writes_topics_as_the_broker_stores_them(tmp_path: Path) -> None:
    path = tmp_path / "acks.jsonl"
    ledger = AckLedger(path, flush_interval_ms=0, namespace="shop")
    ledger.record(1_000, [("a", "Orders", Stored(RECEIPT))])
    ledger.close()
    assert [line["topic"] for line in ledger_lines(path)] == ["shop%Orders"]


def test_a_negative_flush_interval_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="flush_interval_ms must be >= 0, got -1"):
        AckLedger(tmp_path / "acks.jsonl", flush_interval_ms=-1)


def test_a_torn_last_line_is_ended_before_new_answers(tmp_path: Path) -> None:
    path = tmp_path / "acks.jsonl"
    path.write_text('{"message_id":"a","topic":"Orders","state":"STORED","time_ms":1}\n{"mess')
    ledger = AckLedger(path, flush_interval_ms=0)
    ledger.record(1_000, [("b", "Orders", Stored(RECEIPT))])
    ledger.close()
    lines = path.read_text().splitlines()
    assert lines[1] == '{"mess'
    assert json.loads(lines[2])["message_id"] == "b"
    # A ledger that ends well is not touched.
    AckLedger(path, flush_interval_ms=0).close()
    assert len(path.read_text().splitlines()) == 3
