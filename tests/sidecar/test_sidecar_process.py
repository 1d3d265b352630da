"""The sidecar as a process over a durable outbox:

- SIGKILLed with entries in a RocksDB outbox, restarted: they are delivered;
- SIGTERM while a send hangs on a broker that never answers: the call still gets its answer
  (SPOOLED when its time is up), the sidecar exits 0, and a later sidecar delivers the entry;
- an ambiguous entry the broker already holds is found in the broker's index and not resent;
- readiness follows the outbox: NOT_SERVING while its Redis is down, and a send that cannot be
  spooled is answered UNAVAILABLE, never silence;
- the acknowledgement ledger records what each app was told.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from outbox.entry import OutboxEntry, OutboxMessage, SpoolCause
from outbox.factory import open_outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.channels import Endpoint
from sidecar.clock import now_ms
from sidecar.producer import Producer, ProducerConfig
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.grpc_health import HealthStub
from tests.services import free_port, start_private_redis
from tests.sidecar.sidecar_process import (
    SidecarProcess,
    message,
    outcome,
    restart,
    send,
    stored_copies,
)

pytestmark = pytest.mark.slow

DELIVERY_DEADLINE_S = 30.0


def rocksdb_url(tmp_path: Path) -> str:
    return f"rocksdb://{tmp_path / 'outbox'}"


def test_a_sigkilled_sidecar_delivers_its_rocksdb_entries_after_restart(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    port = broker.port
    broker.stop()
    sidecar = SidecarProcess(f"127.0.0.1:{port}", rocksdb_url(tmp_path))
    with sidecar.client() as stub:
        results = [send(stub, message("Orders", f"k{i}".encode())) for i in range(50)]
    sidecar.kill()
    assert {outcome(r) for r in results} == {"spooled"}
    ids = [r.message_id for r in results]
    back = restart(broker)
    restarted = SidecarProcess(back.endpoint, rocksdb_url(tmp_path))
    try:
        wait_until(
            lambda: all(len(stored_copies(back.endpoint, i)) == 1 for i in ids),
            DELIVERY_DEADLINE_S, "the spooled entries delivered by the restarted sidecar",
        )  # fmt: skip
    finally:
        restarted.stop()
        back.stop()


class Blackhole:
    """A listener that accepts connections and never answers: a hung broker."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def test_sigterm_answers_the_send_in_flight_and_a_later_sidecar_delivers_it(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    hung = Blackhole()
    sidecar = SidecarProcess(
        f"127.0.0.1:{hung.port}", rocksdb_url(tmp_path), "--send-msg-timeout-ms=3000"
    )
    answers: list[api.SendResult] = []
    try:
        with sidecar.client() as stub:
            sender = threading.Thread(
                target=lambda: answers.append(send(stub, message("Orders", b"in flight")))
            )
            sender.start()
            wait_until(lambda: hung.accepted, DELIVERY_DEADLINE_S, "the send to reach the broker")
            sidecar.stop()  # SIGTERM; asserts exit 0
            sender.join(DELIVERY_DEADLINE_S)
    finally:
        hung.close()
    [answer] = answers
    assert outcome(answer) == "spooled", answer
    # The hung broker never answered the route query: the message itself never left.
    assert answer.spooled.cause == api.SPOOL_CAUSE_UNAVAILABLE
    assert "DEADLINE_EXCEEDED" in answer.spooled.detail
    assert "sidecar stopped cleanly" in sidecar.output()
    later = SidecarProcess(broker.endpoint, rocksdb_url(tmp_path))
    try:
        wait_until(
            lambda: len(stored_copies(broker.endpoint, answer.message_id)) == 1,
            DELIVERY_DEADLINE_S, "the spooled entry delivered by the next sidecar",
        )  # fmt: skip
    finally:
        later.stop()


def test_an_ambiguous_entry_already_stored_is_not_sent_again(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    m = OutboxMessage(topic="Orders", body=b"once", message_id="AMBIGUOUS000000000000000000000001")

    async def send_directly() -> None:
        producer = Producer(ProducerConfig(access_points=(Endpoint("127.0.0.1", broker.port),)))
        try:
            await producer.send(m)
        finally:
            await producer.close()

    asyncio.run(send_directly())
    with open_outbox(rocksdb_url(tmp_path)) as outbox:
        outbox.put([
            OutboxEntry(m, SpoolCause.AMBIGUOUS, created_ms=now_ms(), next_send_time_ms=0,
                        maybe_stored=True, last_error="AMBIGUOUS: DEADLINE_EXCEEDED")
        ])  # fmt: skip
    sidecar = SidecarProcess(broker.endpoint, rocksdb_url(tmp_path))
    try:
        wait_until(
            lambda: "was already stored; not resent" in sidecar.output(),
            DELIVERY_DEADLINE_S, "the pool to find the entry in the broker's index",
        )  # fmt: skip
    finally:
        sidecar.stop()
    assert len(stored_copies(broker.endpoint, m.message_id)) == 1
    with open_outbox(rocksdb_url(tmp_path)) as outbox:
        entry = outbox.get(m.message_id)
    assert entry is not None
    assert entry.receipt is not None, "marked delivered with the broker's receipt"


def health(endpoint: str) -> int:
    with grpc.insecure_channel(endpoint) as channel:
        stub = HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        return int(response.status)


def test_readiness_follows_the_outbox_and_nothing_is_dropped_silently(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    port = free_port()
    server = start_private_redis(port, tmp_path)
    sidecar = SidecarProcess(broker.endpoint, f"redis://127.0.0.1:{port}/0?prefix=ready")
    try:
        assert health(sidecar.endpoint) == health_pb2.HealthCheckResponse.SERVING
        server.kill()
        server.wait()
        wait_until(
            lambda: health(sidecar.endpoint) == health_pb2.HealthCheckResponse.NOT_SERVING,
            DELIVERY_DEADLINE_S, "readiness to drop with the outbox",
        )  # fmt: skip
        broker.stop()
        with sidecar.client() as stub, pytest.raises(grpc.RpcError) as raised:
            send(stub, message("Orders"))
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "outbox" in (raised.value.details() or "")
        server = start_private_redis(port, tmp_path)
        wait_until(
            lambda: health(sidecar.endpoint) == health_pb2.HealthCheckResponse.SERVING,
            DELIVERY_DEADLINE_S, "readiness back with the outbox",
        )  # fmt: skip
        with sidecar.client() as stub:
            assert outcome(send(stub, message("Orders"))) == "spooled"
    finally:
        sidecar.kill()
        server.kill()
        server.wait()


def test_the_ack_ledger_records_what_each_app_was_told(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    ledger = tmp_path / "acks.jsonl"
    sidecar = SidecarProcess(broker.endpoint, "memory://", f"--ack-ledger={ledger}")
    with sidecar.client() as stub:
        stored = send(stub, message("Orders"))
        broker.stop()
        spooled = send(stub, message("Orders"))
    sidecar.stop()
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(line["message_id"], line["state"]) for line in lines] == [
        (stored.message_id, "STORED"),
        (spooled.message_id, "SPOOLED"),
    ]
    assert lines[0]["queue_offset"] == stored.stored.queue_offset
    assert lines[1]["cause"] == "UNAVAILABLE"
