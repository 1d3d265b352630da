"""A real sidecar whose broker (a real process) is stopped refuses at once what the broker would
refuse for ever, by the one table of rules both apply (rocketbox_api/message_rules.py).

Proves: Send with a delivery_time in 1971, or 40 days ago, is answered REJECTED
(INVALID_ARGUMENT naming delivery_time and the limit), not SPOOLED, though a good message sent
beside them is SPOOLED; so is each other case the sidecar and the broker disagreed on (a C1
control character in a tag, a property name only the broker reserved, a SCHEDULE_TOPIC topic),
in one SendBatch that answers each; and the outbox holds the good message alone. A topic that
fits alone but not with the sidecar's namespace before it (the broker's stored name) is REJECTED.
So is a topic RocketMQ keeps for itself by name (TBW102, BenchmarkTest), with the sidecar's
namespace or without: Send's status is INVALID_ARGUMENT naming the topic.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from outbox.factory import open_outbox
from rocketbox_api.message_rules import DAY_MS, DELIVERY_PAST_MS_MAX
from rocketbox_api.names import TOPIC_LENGTH_MAX
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.clock import now_ms
from tests.broker.broker_process import BrokerProcess
from tests.sidecar.sidecar_process import SidecarProcess, message, outcome, send, timestamp_ms

pytestmark = pytest.mark.slow

# 1971-01-01T00:00:00Z.
YEAR_1971_MS = 31_536_000_000


@pytest.fixture
def sidecar(broker: BrokerProcess, tmp_path: Path) -> SidecarProcess:
    """A sidecar spooling to RocksDB, its broker stopped."""
    sidecar = SidecarProcess(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}")
    broker.stop()
    return sidecar


@pytest.mark.parametrize(
    "deliver_ms",
    [YEAR_1971_MS, now_ms() - 40 * DAY_MS],
    ids=["1971", "40-days-ago"],
)
def test_a_delivery_time_far_past_is_rejected_not_spooled(
    sidecar: SidecarProcess, deliver_ms: int
) -> None:
    try:
        with sidecar.client() as stub:
            good = send(stub, message("Orders"))
            with pytest.raises(grpc.RpcError) as raised:
                send(stub, message("Orders", delivery_time=timestamp_ms(deliver_ms)))
        assert outcome(good) == "spooled", good
        error = raised.value
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        details = error.details() or ""
        assert details.startswith("delivery_time: "), details
        assert "in the past" in details, details
        assert str(DELIVERY_PAST_MS_MAX) in details, details
        status = rpc_status.from_call(error)  # type: ignore[arg-type]  # a grpc.RpcError raised by a call is also a grpc.Call
        assert status is not None, "no google.rpc status"
        bad_request = error_details_pb2.BadRequest()
        assert status.details[0].Unpack(bad_request)
        assert bad_request.field_violations[0].field == "delivery_time"
        sidecar.stop()
        assert spooled_ids(sidecar) == [good.message_id]
    finally:
        sidecar.kill()


def test_every_rule_the_two_disagreed_on_is_rejected_not_spooled(sidecar: SidecarProcess) -> None:
    cases = {
        "tag": message("Orders", tag="created\x85"),
        "user_properties": message("Orders", user_properties={"CORRELATION_ID": "c-1"}),
        "topic": message("SCHEDULE_TOPIC_XXXX"),
        "delivery_time": message("Orders", delivery_time=timestamp_ms(YEAR_1971_MS)),
    }
    try:
        with sidecar.client() as stub:
            batch = stub.SendBatch(
                api.SendBatchRequest(messages=[message("Orders"), *cases.values()])
            )
        good, *refused = batch.results
        assert outcome(good) == "spooled", good
        for field, result in zip(cases, refused, strict=True):
            assert outcome(result) == "rejected", (field, result)
            assert result.rejected.field == field, result
            assert result.rejected.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], result
        sidecar.stop()
        assert spooled_ids(sidecar) == [good.message_id]
    finally:
        sidecar.kill()


def test_a_topic_too_long_with_the_sidecar_s_namespace_is_rejected_not_spooled(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    # 127 characters is the limit of the topic as the broker stores it: NAMESPACE%TOPIC.
    namespace = "tenant-a"
    fits = "T" * (TOPIC_LENGTH_MAX - len(namespace) - 1)
    sidecar = SidecarProcess(
        broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", f"--namespace={namespace}"
    )
    broker.stop()
    try:
        with sidecar.client() as stub:
            batch = stub.SendBatch(
                api.SendBatchRequest(messages=[message(fits), message(fits + "U")])
            )
        good, refused = batch.results
        assert outcome(good) == "spooled", good
        assert outcome(refused) == "rejected", refused
        assert refused.rejected.field == "topic", refused
        assert f"limit: {TOPIC_LENGTH_MAX}" in refused.rejected.reason, refused
        sidecar.stop()
        assert spooled_ids(sidecar) == [good.message_id]
    finally:
        sidecar.kill()


@pytest.mark.parametrize("namespace", ["", "shop"], ids=["no-namespace", "namespace"])
def test_a_system_topic_by_name_is_rejected_not_spooled(
    broker: BrokerProcess, tmp_path: Path, namespace: str
) -> None:
    args = (f"--namespace={namespace}",) if namespace else ()
    sidecar = SidecarProcess(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", *args)
    broker.stop()
    system = ("TBW102", "BenchmarkTest", "CHECKPOINT_TOPIC")
    try:
        with sidecar.client() as stub:
            batch = stub.SendBatch(
                api.SendBatchRequest(messages=[message("Orders"), *map(message, system)])
            )
            with pytest.raises(grpc.RpcError) as raised:
                send(stub, message("TBW102"))
        good, *refused = batch.results
        assert outcome(good) == "spooled", good
        for topic, result in zip(system, refused, strict=True):
            assert outcome(result) == "rejected", (topic, result)
            assert result.rejected.field == "topic", result
            assert "is a system topic" in result.rejected.reason, result
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, raised.value
        assert (raised.value.details() or "").startswith("topic: "), raised.value
        sidecar.stop()
        assert spooled_ids(sidecar) == [good.message_id]
    finally:
        sidecar.kill()


def spooled_ids(sidecar: SidecarProcess) -> list[str]:
    with open_outbox(sidecar.outbox_url) as outbox:
        return [e.message_id for e in outbox.scan_all()]
