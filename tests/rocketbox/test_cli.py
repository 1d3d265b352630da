"""`rocketbox up` as a real process: it recovers the broker's store, serves until SIGTERM, then
stops cleanly (exit 0, no abort marker left, so the next start is a clean recovery). Its
RocketMQ front is named on its own line, and ``--rocketmq-listen off`` has none."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.broker_process import SMALL_STORE_ARGS

pytestmark = pytest.mark.slow

START_DEADLINE_S = 30.0
READY_LINE = "Ctrl-C stops cleanly"
FRONT_LINE = "sidecar RocketMQ front on 127.0.0.1:"


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _stop_every_process_started() -> Iterator[None]:
    """Whatever a test asserts, no process it started outlives it."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=START_DEADLINE_S)


def start_up(data_dir: Path, rocketmq_listen: str = "127.0.0.1:0") -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rocketbox",
            "up",
            "--data-dir",
            str(data_dir),
            "--broker-listen",
            "127.0.0.1:0",
            "--sidecar-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--rocketmq-listen",
            rocketmq_listen,
            *SMALL_STORE_ARGS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    STARTED.append(proc)
    return proc


def wait_ready(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if READY_LINE in line:
            return lines
    proc.kill()
    proc.wait()
    raise AssertionError(f"rocketbox up never became ready: {''.join(lines)}")


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=START_DEADLINE_S)
    return out


def test_up_runs_the_store_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    proc = start_up(tmp_path)
    lines = wait_ready(proc)
    assert any("clean recovery" in line for line in lines)
    assert [line for line in lines if line.startswith(FRONT_LINE)], lines
    store_root = tmp_path / "broker"
    assert (store_root / "abort").exists(), "running: an abnormal exit would be detected"
    out = stop(proc)
    assert proc.returncode == 0, out
    assert "rocketbox stopped cleanly" in out
    assert not (store_root / "abort").exists()
    assert (store_root / "checkpoint").exists()


def test_up_after_a_sigkill_reports_an_abnormal_recovery(tmp_path: Path) -> None:
    proc = start_up(tmp_path)
    wait_ready(proc)
    proc.kill()
    proc.communicate(timeout=START_DEADLINE_S)
    proc = start_up(tmp_path, rocketmq_listen="off")
    lines = wait_ready(proc)
    assert any("abnormal recovery" in line for line in lines), lines
    assert not [line for line in lines if line.startswith(FRONT_LINE)], lines
    stop(proc)
    assert proc.returncode == 0


def test_a_second_up_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    first = start_up(tmp_path)
    wait_ready(first)
    try:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "rocketbox",
                "up",
                "--data-dir",
                str(tmp_path),
                "--broker-listen",
                "127.0.0.1:0",
                "--sidecar-listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--rocketmq-listen",
                "off",
            ],
            capture_output=True,
            text=True,
            timeout=START_DEADLINE_S,
            check=False,
        )
        assert second.returncode != 0
        assert "in use by another process" in second.stderr
    finally:
        stop(first)
