"""Admission control and the in-memory FIFO fence (real processes):

- at ``--intake-in-flight-max`` messages inside the sidecar, one more is refused at once with
  RESOURCE_EXHAUSTED and a retry-after naming the limit (Send's status; a Rejection per entry of
  SendBatch), while those inside are still answered, each exactly once;
- the FIFO fence is backed by the outbox: a sidecar started over an outbox holding a group's
  entries spools the group's next message behind them, and once the group is delivered the
  fence is lifted and the group is sent directly again, every message in send order.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import cast

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from rocketbox_api.v1 import sidecar_pb2 as api
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import metrics_port, sample, scrape
from tests.sidecar.sidecar_process import (
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    restart,
    send,
    stored_copies,
)
from tests.sidecar.test_coalescing import METRICS_ARGS, METRICS_LINE

pytestmark = pytest.mark.slow

IN_FLIGHT_MAX = 4
# Long enough that the held sends are surely inside while the test looks; each ends spooled.
HELD_SEND_TIMEOUT_MS = 3_000
DELIVERY_DEADLINE_S = 60.0


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """An endpoint that accepts TCP connections and never answers: sends to it hang until
    their deadline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def test_one_message_over_the_limit_is_refused_at_once(silent_broker: str) -> None:
    sidecar = SidecarProcess(
        silent_broker, "memory://", *METRICS_ARGS, f"--intake-in-flight-max={IN_FLIGHT_MAX}",
        f"--send-msg-timeout-ms={HELD_SEND_TIMEOUT_MS}", "--retry-times-when-send-failed=0",
    )  # fmt: skip
    try:
        port = metrics_port(sidecar.output(), METRICS_LINE)
        with sidecar.client() as stub:
            held: list[Future[api.SendResponse]] = [
                stub.Send.future(
                    api.SendRequest(message=message("Orders", f"held {i}".encode())),
                    timeout=CALL_DEADLINE_S,
                )
                for i in range(IN_FLIGHT_MAX)
            ]
            wait_until(
                lambda: sample(scrape(port), "rocketbox_sidecar_intake_in_flight") == IN_FLIGHT_MAX,
                CALL_DEADLINE_S, f"{IN_FLIGHT_MAX} messages inside the sidecar",
            )  # fmt: skip
            with pytest.raises(grpc.RpcError) as refused:
                send(stub, message("Orders", b"one too many"))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "intake_in_flight_max" in (refused.value.details() or "")
            assert retry_after_ms(refused.value) > 0
            batch = stub.SendBatch(
                api.SendBatchRequest(messages=[message("Orders", b"b1"), message("Orders", b"b2")]),
                timeout=CALL_DEADLINE_S,
            )
            for r in batch.results:
                assert outcome(r) == "rejected"
                assert r.rejected.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
                assert r.rejected.retry_after.ToMilliseconds() > 0
            # Those inside were answered: spooled once the silent broker's deadline passed.
            for f in held:
                assert outcome(f.result(timeout=CALL_DEADLINE_S).result) == "spooled"
            assert outcome(send(stub, message("Orders", b"admitted again"))) == "spooled"
        samples = scrape(port)
        assert sample(samples, "rocketbox_sidecar_intake_in_flight") == 0
        refusals = sample(
            samples, "rocketbox_sidecar_sends_total", state="REJECTED", cause="RESOURCE_EXHAUSTED"
        )
        assert refusals == 3
        spools = sample(
            samples, "rocketbox_sidecar_sends_total", state="SPOOLED", cause="AMBIGUOUS"
        )
        spools += sample(
            samples, "rocketbox_sidecar_sends_total", state="SPOOLED", cause="UNAVAILABLE"
        )
        assert spools == IN_FLIGHT_MAX + 1
    finally:
        sidecar.stop()


def retry_after_ms(error: grpc.RpcError) -> int:
    """The google.rpc.RetryInfo delay in a call's rich status."""
    # types-grpcio types the items as objects with .key and .value; a call's are (key, value) pairs.
    metadata = cast("tuple[tuple[str, bytes], ...]", error.trailing_metadata() or ())
    for key, value in metadata:
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.RetryInfo()
                if detail.Unpack(info):
                    return int(info.retry_delay.ToMilliseconds())
    return 0


def test_the_fifo_fence_comes_back_from_the_outbox_and_lifts_after_delivery(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"
    ids: list[str] = []
    outcomes: list[str] = []

    def send_one(sidecar: SidecarProcess) -> api.SendResult:
        with sidecar.client() as stub:
            r = send(stub, message("Fifo", f"step {len(ids)}".encode(), message_group="g"))
        ids.append(r.message_id)
        outcomes.append(outcome(r))
        return r

    broker.stop()
    first = SidecarProcess(broker.endpoint, outbox_url)
    try:
        assert send_one(first).spooled.cause == api.SPOOL_CAUSE_UNAVAILABLE
        assert send_one(first).spooled.cause == api.SPOOL_CAUSE_FIFO_FENCE
    finally:
        first.stop()
    second = SidecarProcess(broker.endpoint, outbox_url)
    back: BrokerProcess | None = None
    try:
        # The broker is still down, but the cause is the fence read back from the outbox.
        assert send_one(second).spooled.cause == api.SPOOL_CAUSE_FIFO_FENCE
        back = restart(broker)
        endpoint = back.endpoint
        wait_until(
            lambda: all(stored_copies(endpoint, i) for i in ids), DELIVERY_DEADLINE_S,
            "the group's three spooled messages delivered",
        )  # fmt: skip
        # Delivered, the group is unfenced: a new message goes straight to the broker (one
        # sent while the fence is being lifted is spooled behind, in order, and that is fine).
        wait_until(
            lambda: send_one(second).HasField("stored"), DELIVERY_DEADLINE_S,
            "a message of the delivered group stored directly",
        )  # fmt: skip
        wait_until(
            lambda: all(stored_copies(endpoint, i) for i in ids), DELIVERY_DEADLINE_S,
            "every message of the group stored",
        )  # fmt: skip
        copies = [stored_copies(endpoint, i) for i in ids]
        assert all(len(c) == 1 for c in copies), "each message stored once"
        assert len({c[0].queue_id for c in copies}) == 1, "one group, one queue"
        offsets = [c[0].queue_offset for c in copies]
        assert offsets == sorted(offsets), f"stored out of send order: {offsets}"
        assert outcomes[:3] == ["spooled"] * 3
        assert outcomes[-1] == "stored"
    finally:
        second.stop()
        if back is not None:
            back.kill()
