"""The sidecar's log during an outage says what changed, once, not a line per message or poll:

- a short broker outage is exactly three lines: broker unreachable (WARNING, with the cause),
  broker back draining N entries, drained; no line names a message;
- an outbox on a Redis or MySQL that cannot be reached: the sidecar starts NOT READY (its banner
  says so and why, gRPC health answers NOT_SERVING), says so in one line without a traceback,
  repeats it at most every ``--state-log-interval-ms`` with the failures counted in between,
  refuses FIFO messages while it cannot know their groups' entries, and says in one line when
  Redis is back (and takes FIFO messages again).
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from tests.broker.broker_process import BrokerProcess
from tests.grpc_health import HealthStub
from tests.rocketbox_process import wait_until
from tests.sidecar.sidecar_process import (
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    restart,
    send,
    wait_stored,
)

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
SPOOLED_COUNT = 5
# Longer than any test: a lasting state is said once (the repeat test sets its own).
NO_REPEAT_ARGS = ("--state-log-interval-ms=600000",)
REPEAT_INTERVAL_MS = 1_000
DRAINING = re.compile(r"broker back: draining (\d+) outbox entries")
STILL_UNREACHABLE = re.compile(r"still unreachable: (\d+) failed outbox calls since the last line")


def count(lines: list[str], text: str) -> int:
    return sum(text in line for line in lines)


@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
def test_a_broker_outage_is_three_lines(broker: BrokerProcess, tmp_path: Path, signal: str) -> None:
    sidecar = SidecarProcess(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", *NO_REPEAT_ARGS)
    try:
        with sidecar.client() as stub:
            assert outcome(send(stub, message("Orders", b"before"))) == "stored"
            broker.stop() if signal == "SIGTERM" else broker.kill()
            results = [send(stub, message("Orders", f"{i}".encode())) for i in range(SPOOLED_COUNT)]
        assert [outcome(r) for r in results] == ["spooled"] * SPOOLED_COUNT
        broker = restart(broker)
        for r in results:
            wait_stored(broker.endpoint, r.message_id)
        wait_until(lambda: count(sidecar.lines, "drained:") >= 1, DEADLINE_S, "the drained line")
        lines = sidecar.lines
        assert count(lines, "broker unreachable") == 1, sidecar.output()
        assert count(lines, "WARNING sidecar.health_log") == 1, sidecar.output()
        draining = [m for line in lines if (m := DRAINING.search(line))]
        assert len(draining) == 1, sidecar.output()
        # What was PENDING when it was looked at plus what was delivered before: a delivery
        # whose write lands between the two may be missed, never counted twice.
        assert 1 <= int(draining[0][1]) <= SPOOLED_COUNT
        assert count(lines, "drained:") == 1, sidecar.output()
        order = [i for i, line in enumerate(lines) if "sidecar.health_log" in line][-3:]
        assert "unreachable" in lines[order[0]]
        assert DRAINING.search(lines[order[1]])
        assert "drained:" in lines[order[2]]
        for r in results:  # no line per message
            assert r.message_id not in sidecar.output()
    finally:
        sidecar.stop()
        broker.kill()


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def redis_server(port: int, data_dir: Path) -> Iterator[None]:
    data_dir.mkdir()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(data_dir)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=DEADLINE_S)


def health(endpoint: str) -> int:
    with grpc.insecure_channel(endpoint) as channel:
        request = health_pb2.HealthCheckRequest()
        return HealthStub(channel).Check(request, timeout=CALL_DEADLINE_S).status


def says_unreachable_once(sidecar: SidecarProcess, port: int) -> None:
    """The start banner says NOT READY and why, health agrees, FIFO messages are refused, and
    the log says it once, then in rate-limited repeats, with no traceback and no password."""
    banner = next(line for line in sidecar.lines if line.startswith("sidecar listening on"))
    assert "NOT READY (OUTBOX_UNAVAILABLE" in banner
    assert f"127.0.0.1:{port}" in banner
    assert health(sidecar.endpoint) == health_pb2.HealthCheckResponse.NOT_SERVING
    with sidecar.client() as stub, pytest.raises(grpc.RpcError) as fifo:
        send(stub, message("Fifo", b"first", message_group="g"))
    assert fifo.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "FIFO groups" in (fifo.value.details() or "")

    def repeats() -> list[int]:
        return [int(m[1]) for line in sidecar.lines if (m := STILL_UNREACHABLE.search(line))]

    wait_until(lambda: len(repeats()) >= 2, DEADLINE_S, "two repeat lines")
    output = sidecar.output()
    assert count(sidecar.lines, "outbox unreachable (") == 1, output
    assert "Start the outbox's server or correct --outbox" in output
    assert "secret" not in output
    assert "Traceback" not in output
    assert "failed:" not in output  # no line of the resend pool's own per poll
    # The resend pool polls every 50 ms, readiness every second: the lines are fewer than the
    # failures they count.
    assert sum(repeats()) > len(repeats())


def test_an_unreachable_mysql_outbox_is_one_line_then_rate_limited_repeats(
    broker: BrokerProcess,
) -> None:
    port = free_port()
    url = f"mysql+pymysql://root:secret@127.0.0.1:{port}/test?table=statelines"
    sidecar = SidecarProcess(broker.endpoint, url, f"--state-log-interval-ms={REPEAT_INTERVAL_MS}")
    try:
        says_unreachable_once(sidecar, port)
    finally:
        sidecar.stop()


def test_an_unreachable_redis_outbox_is_one_line_then_rate_limited_repeats(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    port = free_port()
    url = f"redis://:secret@127.0.0.1:{port}/0?prefix=statelines"
    sidecar = SidecarProcess(broker.endpoint, url, f"--state-log-interval-ms={REPEAT_INTERVAL_MS}")
    try:
        says_unreachable_once(sidecar, port)
        with redis_server(port, tmp_path / "redis"):
            wait_until(
                lambda: count(sidecar.lines, "reachable again: the sidecar is READY") == 1,
                DEADLINE_S, "the outbox back",
            )  # fmt: skip
            assert health(sidecar.endpoint) == health_pb2.HealthCheckResponse.SERVING
            wait_until(lambda: _fifo_accepted(sidecar), DEADLINE_S, "FIFO messages taken again")
            sidecar.stop()
    finally:
        if sidecar.running():
            sidecar.kill()


def _fifo_accepted(sidecar: SidecarProcess) -> bool:
    with sidecar.client() as stub:
        try:
            return outcome(send(stub, message("Fifo", b"first", message_group="g"))) == "stored"
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            return False
