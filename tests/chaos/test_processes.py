"""chaos/processes.py, the broker and sidecar processes the chaos suite signals and restarts:

- a broker started on free ports is ready with its port and metrics port; SIGSTOP makes it
  silent and SIGCONT brings it back; after SIGKILL it restarts on the same ports, and a client
  channel opened before the kill reaches the new process;
- a restart whose port is still taken is retried until the port is free;
- ``stop`` ends a SIGSTOPped process cleanly (SIGTERM with SIGCONT), and so does leaving the
  ``with`` block;
- a sidecar killed mid-life comes back on its port over its RocksDB outbox and answers sends;
  ``--sidecar-id`` and ``--ack-ledger`` are passed only when given;
- a process that exits before its ready line is a ProcessError carrying its output; a signal to
  a process that is gone is refused.
"""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from chaos.processes import (
    BROKER_READY_LINE,
    BrokerProcess,
    ProcessError,
    RocketboxProcess,
    SidecarProcess,
    wait_until,
)
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from tests.grpc_health import HealthStub

pytestmark = pytest.mark.slow

CALL_DEADLINE_S = 30.0
# Long enough for a live broker on this machine to answer a health check; a stopped one never does.
SILENCE_DEADLINE_S = 1.0
BROKER_ARGS = ("--auto-create-topic",)


def health(channel: grpc.Channel, timeout_s: float, wait_for_ready: bool = False) -> int:
    response: health_pb2.HealthCheckResponse = HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(), timeout=timeout_s, wait_for_ready=wait_for_ready
    )
    return int(response.status)


def ledger_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_broker_is_stopped_continued_killed_and_restarted_on_its_ports(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "store", extra_args=BROKER_ARGS) as broker:
        port, metrics_port = broker.port, broker.metrics_port
        assert port > 0
        assert metrics_port > 0
        with grpc.insecure_channel(broker.endpoint) as channel:
            assert health(channel, CALL_DEADLINE_S) == health_pb2.HealthCheckResponse.SERVING

            broker.signal(signal.SIGSTOP)
            with pytest.raises(grpc.RpcError) as silent:
                health(channel, SILENCE_DEADLINE_S)
            assert silent.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            broker.signal(signal.SIGCONT)
            assert health(channel, CALL_DEADLINE_S) == health_pb2.HealthCheckResponse.SERVING

            broker.signal(signal.SIGKILL)
            assert broker.wait_exit(CALL_DEADLINE_S) == -signal.SIGKILL
            assert not broker.running()
            broker.restart()
            assert (broker.port, broker.metrics_port) == (port, metrics_port)
            # The channel of the first process, which knows only the address, finds the second.
            status = health(channel, CALL_DEADLINE_S, wait_for_ready=True)
            assert status == health_pb2.HealthCheckResponse.SERVING
    assert broker.proc.returncode == 0, broker.output()
    # Both lives' output is kept: two ready lines.
    assert len(BROKER_READY_LINE.findall(broker.output())) == 2


def test_a_restart_whose_port_is_still_taken_waits_for_it(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "store") as broker:
        broker.kill()
        squatter = socket.socket()
        squatter.bind(("127.0.0.1", broker.port))
        squatter.listen()
        restarted = threading.Thread(target=broker.restart)
        try:
            restarted.start()
            wait_until(
                lambda: "is in use (another rocketbox?)" in broker.output(),
                CALL_DEADLINE_S,
                "a restart that found its port taken",
            )
        finally:
            squatter.close()
        restarted.join(CALL_DEADLINE_S)
        assert broker.running(), broker.output()
        with grpc.insecure_channel(broker.endpoint) as channel:
            assert health(channel, CALL_DEADLINE_S) == health_pb2.HealthCheckResponse.SERVING


def test_stop_ends_a_sigstopped_process_cleanly(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store").start()
    try:
        broker.signal(signal.SIGSTOP)
    finally:
        code = broker.stop()
    assert code == 0, broker.output()
    assert "Ctrl-C stops cleanly" in broker.output()
    with pytest.raises(ProcessError, match="not running"):
        broker.signal(signal.SIGTERM)


def test_a_killed_sidecar_comes_back_on_its_port_over_its_outbox(tmp_path: Path) -> None:
    ledger = tmp_path / "acks.jsonl"
    with (
        BrokerProcess(tmp_path / "store", extra_args=BROKER_ARGS) as broker,
        SidecarProcess([broker.endpoint], f"rocksdb://{tmp_path / 'outbox'}", ack_ledger=ledger)
        as sidecar,
        grpc.insecure_channel(sidecar.endpoint) as channel,
    ):  # fmt: skip
        stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
        request = api.SendRequest(message=api.Message(topic="Orders", body=b"one"))
        first: api.SendResponse = stub.Send(request, timeout=CALL_DEADLINE_S)
        assert first.result.WhichOneof("outcome") == "stored"
        wait_until(lambda: ledger_lines(ledger) == 1, CALL_DEADLINE_S, "the first answer recorded")
        port, metrics_port = sidecar.port, sidecar.metrics_port
        sidecar.signal(signal.SIGKILL)
        assert sidecar.wait_exit(CALL_DEADLINE_S) == -signal.SIGKILL
        sidecar.restart()
        assert (sidecar.port, sidecar.metrics_port) == (port, metrics_port)
        second: api.SendResponse = stub.Send(request, timeout=CALL_DEADLINE_S, wait_for_ready=True)
        assert second.result.WhichOneof("outcome") == "stored"
        # The second life appends to the first one's ledger.
        wait_until(lambda: ledger_lines(ledger) == 2, CALL_DEADLINE_S, "the second answer recorded")
    assert sidecar.proc.returncode == 0, sidecar.output()


def test_sidecar_options_are_passed_only_when_given() -> None:
    plain = SidecarProcess(["127.0.0.1:1"], "memory://").command_args(0, 0)
    assert "--sidecar-id" not in plain
    assert "--ack-ledger" not in plain
    named = SidecarProcess(
        ["127.0.0.1:1", "127.0.0.1:2"], "memory://", Path("/tmp/acks"), "sidecar-7",
        ("--lease-ms=1000",),
    ).command_args(5000, 5001)  # fmt: skip
    assert named[named.index("--sidecar-id") + 1] == "sidecar-7"
    assert named[named.index("--ack-ledger") + 1] == "/tmp/acks"
    assert [named[i + 1] for i, a in enumerate(named) if a == "--broker"] == [
        "127.0.0.1:1",
        "127.0.0.1:2",
    ]
    assert named[named.index("--listen") + 1] == "127.0.0.1:5000"
    assert named[named.index("--metrics-listen") + 1] == "127.0.0.1:5001"
    assert named[-1] == "--lease-ms=1000", "extra arguments come last, so that they override"
    with pytest.raises(ValueError, match="broker_addresses"):
        SidecarProcess("127.0.0.1:1", "memory://")


def test_a_process_that_exits_before_its_ready_line_is_an_error_with_its_output() -> None:
    broken = RocketboxProcess("broker", BROKER_READY_LINE, ["broker", "--no-such-option"])
    with pytest.raises(ProcessError, match="before it was ready") as failed:
        broken.start()
    assert "--no-such-option" in str(failed.value)
    assert not broken.running()
