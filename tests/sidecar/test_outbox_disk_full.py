"""A full outbox disk stops new spools, not the delivery of what the outbox holds, with a real
broker, a real sidecar and its RocksDB outbox on a real 16 MiB filesystem that is filled from
outside:

- a new spool is refused UNAVAILABLE, saying the outbox has no room;
- readiness is NOT_SERVING, and its reason says so: rocketbox_sidecar_ready{reason=
  "OUTBOX_NO_SPACE"} and rocketbox_outbox_no_space are 1;
- with the broker taking messages again, every entry the outbox held is delivered, each stored
  exactly once (copies counted in the commitlog), while the disk stays full;
- once the filler is gone, readiness is back and spools are taken again.
"""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from rocketbox_api.v1 import sidecar_pb2 as api
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.grpc_health import HealthStub
from tests.outbox.small_fs import small_disk
from tests.prometheus import Samples, metrics_port, sample, scrape
from tests.sidecar.sidecar_process import (
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    send,
    set_flow_control,
)
from tests.sidecar.test_restart_drain import commitlog_copies, stored_in_topic

TOPIC = "Orders"
DISK_BYTES = 16 * 1024 * 1024
RESERVE_BYTES = 4 * 1024 * 1024
WRITE_BUFFER_BYTES = 1024 * 1024
HELD = 200
BODY_BYTES = 1_024
DEADLINE_S = 30.0
METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")
SIDECAR_ARGS = (
    "--metrics-listen=127.0.0.1:0",
    "--outbox-stats-interval-ms=100",
    # Throttled resends are rescheduled, and each reschedule rewrites its entry: not too often,
    # while the disk is full.
    "--backoff-initial-ms=1000",
    "--backoff-max-ms=3000",
)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health(sidecar: SidecarProcess) -> int:
    with grpc.insecure_channel(sidecar.endpoint) as channel:
        stub = HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=CALL_DEADLINE_S)
        return int(response.status)


def metrics(sidecar: SidecarProcess) -> Samples:
    return scrape(metrics_port(sidecar.output(), METRICS_LINE))


def says_no_space(sidecar: SidecarProcess) -> bool:
    """Readiness down for want of space, by health, reason and gauge alike."""
    samples = metrics(sidecar)
    return (
        health(sidecar) == NOT_SERVING
        and sample(samples, "rocketbox_sidecar_ready", reason="OUTBOX_NO_SPACE") == 1
        and sample(samples, "rocketbox_sidecar_ready", reason="READY") == 0
        and sample(samples, "rocketbox_outbox_no_space") == 1
    )


def says_ready(sidecar: SidecarProcess) -> bool:
    samples = metrics(sidecar)
    return (
        health(sidecar) == SERVING
        and sample(samples, "rocketbox_sidecar_ready", reason="READY") == 1
        and sample(samples, "rocketbox_outbox_no_space") == 0
    )


@pytest.mark.slow
def test_a_full_outbox_disk_refuses_spools_and_still_delivers_what_it_holds(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    with small_disk(tmp_path / "fs", DISK_BYTES) as disk:
        url = f"rocksdb://{disk.mount_dir / 'outbox'}?reserve_bytes={RESERVE_BYTES}"
        url += f"&write_buffer_bytes={WRITE_BUFFER_BYTES}"  # a reopen must fit in the reserve
        set_flow_control(broker.endpoint, True)
        sidecar = SidecarProcess(broker.endpoint, url, *SIDECAR_ARGS)
        try:
            assert says_ready(sidecar)
            with sidecar.client() as stub:
                batch = [message(TOPIC, bytes(BODY_BYTES)) for _ in range(HELD)]
                response: api.SendBatchResponse = stub.SendBatch(
                    api.SendBatchRequest(messages=batch), timeout=CALL_DEADLINE_S
                )
            assert {outcome(r) for r in response.results} == {"spooled"}
            held = [r.message_id for r in response.results]

            disk.fill()
            wait_until(lambda: says_no_space(sidecar), DEADLINE_S, "readiness to say no space")
            assert "has no space (" in sidecar.output()
            assert "NOT READY" in sidecar.output()
            with sidecar.client() as stub, pytest.raises(grpc.RpcError) as refused:
                send(stub, message(TOPIC, b"one more"))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "no room for new entries" in (refused.value.details() or "")

            # The broker takes messages again; the disk stays full.
            set_flow_control(broker.endpoint, False)
            wait_until(
                lambda: stored_in_topic(broker.endpoint) >= HELD
                and sample(metrics(sidecar), "rocketbox_outbox_entries", state="DELIVERED")
                == HELD,
                DEADLINE_S, "the held entries delivered while the disk is full",
            )  # fmt: skip
            assert disk.filler.exists()
            assert disk.free_bytes() < 2 * RESERVE_BYTES
            assert says_no_space(sidecar)
            assert sample(metrics(sidecar), "rocketbox_outbox_entries", state="PENDING") == 0

            disk.free()
            wait_until(lambda: says_ready(sidecar), DEADLINE_S, "readiness back with room")
            set_flow_control(broker.endpoint, True)
            with sidecar.client() as stub:
                assert outcome(send(stub, message(TOPIC, b"spooled again"))) == "spooled"
            sidecar.stop()
        finally:
            sidecar.kill()
        broker.stop()
        copies = commitlog_copies(broker)
        assert {i: copies[i] for i in held if copies[i] != 1} == {}
        assert sum(copies.values()) == HELD, "nothing else was stored"
