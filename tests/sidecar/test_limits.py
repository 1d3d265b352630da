"""The sidecar's limits and its discoverability:

- an outbox at ``outbox_entries_max`` answers RESOURCE_EXHAUSTED with a retry-after, and what
  it already held is kept and delivered;
- an entry that keeps failing is buried (DEAD, last error kept) once its delivery budget (the
  message's own ``delivery_timeout``) has run out, not retried for ever, and can be requeued;
- a SendBatch over its entry limit is refused naming the field and the limit;
- gRPC reflection lists the service, so tools need no .proto file.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from grpc_status import rpc_status

from outbox.entry import EntryState
from outbox.factory import open_outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.clock import now_ms
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.sidecar.sidecar_process import (
    SidecarProcess,
    message,
    outcome,
    restart,
    send,
    stored_copies,
)

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0


def test_a_full_outbox_answers_resource_exhausted_and_keeps_what_it_has(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    port = broker.port
    broker.stop()
    url = f"rocksdb://{tmp_path / 'outbox'}"
    sidecar = SidecarProcess(f"127.0.0.1:{port}", url, "--outbox-entries-max=3")
    try:
        with sidecar.client() as stub:
            kept = [send(stub, message("Orders", f"{i}".encode())) for i in range(3)]
            assert [outcome(r) for r in kept] == ["spooled"] * 3
            with pytest.raises(grpc.RpcError) as raised:
                send(stub, message("Orders", b"one too many"))
        error = raised.value
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "outbox is full" in (error.details() or "")
        status = rpc_status.from_call(error)  # type: ignore[arg-type]  # a grpc.RpcError raised by a call is also a grpc.Call
        assert status is not None
        retry = error_details_pb2.RetryInfo()
        assert any(d.Unpack(retry) for d in status.details)
        assert retry.retry_delay.ToMilliseconds() > 0
        back = restart(broker)
        try:
            wait_until(
                lambda: all(stored_copies(back.endpoint, r.message_id) for r in kept),
                DEADLINE_S, "the three spooled messages delivered",
            )  # fmt: skip
        finally:
            back.kill()
    finally:
        sidecar.stop()


def test_an_entry_that_keeps_failing_is_buried_then_can_be_requeued(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    port = broker.port
    broker.stop()
    url = f"rocksdb://{tmp_path / 'outbox'}"
    sidecar = SidecarProcess(
        f"127.0.0.1:{port}", url, "--backoff-initial-ms=20", "--backoff-max-ms=50",
        "--probe-interval-max-ms=50",
    )  # fmt: skip
    try:
        timed = message("Orders")
        timed.delivery_timeout.FromMilliseconds(1_000)
        with sidecar.client() as stub:
            result = send(stub, timed)
        assert outcome(result) == "spooled", result
        wait_until(
            lambda: "buried" in sidecar.output(), DEADLINE_S, "the entry buried after its 1 s"
        )
    finally:
        sidecar.stop()
    with open_outbox(url) as outbox:
        entry = outbox.get(result.message_id)
        assert entry is not None
        assert entry.state is EntryState.DEAD
        assert entry.attempts >= 1, "the resend that found the budget spent counts"
        assert "not delivered within its budget of 1 s" in entry.last_error
        assert outbox.requeue([result.message_id], now_ms()) == 1
    back = restart(broker)
    again = SidecarProcess(back.endpoint, url)
    try:
        wait_until(
            lambda: stored_copies(back.endpoint, result.message_id), DEADLINE_S,
            "the requeued entry delivered",
        )  # fmt: skip
    finally:
        again.stop()
        back.kill()


def test_a_batch_over_its_limit_is_refused_naming_the_field(broker: BrokerProcess) -> None:
    sidecar = SidecarProcess(broker.endpoint, "memory://")
    try:
        with sidecar.client() as stub, pytest.raises(grpc.RpcError) as raised:
            stub.SendBatch(api.SendBatchRequest(messages=[message("Orders")] * 1_001))
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert raised.value.details() == "messages: has 1001 messages; the limit is 1000"
    finally:
        sidecar.stop()


def test_reflection_describes_the_service(broker: BrokerProcess) -> None:
    sidecar = SidecarProcess(broker.endpoint, "memory://")
    try:
        with grpc.insecure_channel(sidecar.endpoint) as channel:
            database = ProtoReflectionDescriptorDatabase(channel)
            services = set(database.get_services())
            assert {"rocketbox.v1.SidecarService", "grpc.health.v1.Health"} <= services
            pool = descriptor_pool.DescriptorPool(database)
            service = pool.FindServiceByName("rocketbox.v1.SidecarService")
            assert {m.name for m in service.methods} == {"Send", "SendBatch", "SendStream"}
    finally:
        sidecar.stop()
