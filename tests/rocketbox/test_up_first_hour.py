"""`rocketbox up` as a new user meets it.

- Its one metrics endpoint carries the outbox's gauges (entries by state, bytes, the oldest
  pending entry's age), though the sidecar has no endpoint of its own there.
- A taken port is refused in one line naming the option and the address, exit 2, by `broker`,
  `sidecar` and `up` alike, for the gRPC, the metrics and the RocketMQ front's listeners (a
  front's port taken after that check is named alike: tests/sidecar/test_start_order.py); a
  data directory held by
  another process is refused naming its pid before any port is looked at.
- A fresh `up` holds little disk: 64 MiB commitlog segments, not RocketMQ's 1 GiB.
- `up` keeps an ack ledger under its data directory, and `rocketbox reconcile` runs on that data
  beside the running process (its RocksDB outbox opened read-only): nothing lost, nothing
  unexpected.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from chaos.processes import BROKER_READY_LINE, SIDECAR_READY_LINE
from rocketbox_api.v1 import sidecar_pb2_grpc
from tests.broker.broker_process import SMALL_STORE_ARGS, BrokerProcess
from tests.prometheus import metrics_port, sample, scrape
from tests.reconcile.rocketbox_reconcile import reconcile
from tests.rocketbox_process import REPO_ROOT, RocketboxProcess, wait_until
from tests.sidecar.sidecar_process import (
    SidecarProcess,
    message,
    outcome,
    send,
    set_flow_control,
)

pytestmark = pytest.mark.slow

METRICS_LINE = re.compile(r"^metrics on http://[^\s]+:(\d+)/metrics", re.MULTILINE)
# The outbox gauges are refreshed every 5 s (the sidecar's default --outbox-stats-interval-ms).
GAUGE_DEADLINE_S = 30.0
REFUSAL_DEADLINE_S = 60.0
SPILLED_N = 3
STORED_N = 4
MIB = 1024 * 1024
TOPICS_N = 4
# What a fresh `up` that has seen TOPICS_N topics may hold: two 64 MiB commitlog segments (the
# one written, the next prepared ahead), the RocksDB outbox's 128 MiB full-disk reserve
# (outbox/disk_reserve.py), an 8 MiB index file, 8 consume queue files of 586 KiB per topic,
# and RocksDB's own few MiB. RocketMQ's sizes held gigabytes (and 47 MiB more per topic).
FRESH_UP_DISK_BYTES_MAX = (2 * 64 + 128 + 8 + TOPICS_N * 5 + 16) * MIB


class Up(RocketboxProcess):
    """``rocketbox up`` on free ports, data under ``data_dir``."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        super().__init__(
            "rocketbox up",
            SIDECAR_READY_LINE,
            ["up", "--data-dir", str(data_dir), "--broker-listen", "127.0.0.1:0",
             "--sidecar-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--rocketmq-listen", "127.0.0.1:0", *args],
        )  # fmt: skip
        wait_until(lambda: BROKER_READY_LINE.search(self.output()), 30.0, "up's broker line")
        [broker_port] = BROKER_READY_LINE.findall(self.output())
        self.broker_endpoint = f"127.0.0.1:{broker_port}"
        self.metrics_port = metrics_port(self.output(), METRICS_LINE)

    def send(self, topic: str, count: int) -> list[str]:
        """``count`` messages through the sidecar; their outcomes."""
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
            return [
                outcome(send(stub, message(topic, f"{topic} {i}".encode()))) for i in range(count)
            ]


def rocketbox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocketbox", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=REFUSAL_DEADLINE_S,
        check=False,
    )


def test_up_serves_the_outbox_gauges_on_its_one_endpoint(tmp_path: Path) -> None:
    up = Up(tmp_path, *SMALL_STORE_ARGS)
    try:
        set_flow_control(up.broker_endpoint, True)
        assert up.send("Orders", SPILLED_N) == ["spooled"] * SPILLED_N

        def gauges() -> tuple[float, float, float]:
            s = scrape(up.metrics_port)
            return (
                sample(s, "rocketbox_outbox_entries", state="PENDING"),
                sample(s, "rocketbox_outbox_bytes"),
                sample(s, "rocketbox_outbox_oldest_pending_age_seconds"),
            )

        wait_until(
            lambda: gauges()[0] == SPILLED_N and gauges()[1] > 0 and gauges()[2] > 0,
            GAUGE_DEADLINE_S,
            "the outbox gauges on up's metrics endpoint",
        )
        set_flow_control(up.broker_endpoint, False)
    finally:
        up.stop()


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


# (command, the option under test, the command's arguments with every listener on a free port)
TAKEN_PORT_CASES = [
    ("broker", "--listen"),
    ("broker", "--metrics-listen"),
    ("sidecar", "--listen"),
    ("sidecar", "--metrics-listen"),
    ("sidecar", "--rocketmq-listen"),
    ("up", "--broker-listen"),
    ("up", "--sidecar-listen"),
    ("up", "--metrics-listen"),
    ("up", "--rocketmq-listen"),
]


def listeners_of(command: str) -> list[str]:
    return {
        "broker": ["--listen", "--metrics-listen"],
        "sidecar": ["--listen", "--metrics-listen", "--rocketmq-listen"],
        "up": ["--broker-listen", "--sidecar-listen", "--metrics-listen", "--rocketmq-listen"],
    }[command]


@pytest.mark.parametrize(("command", "option"), TAKEN_PORT_CASES)
def test_a_taken_port_is_one_line_naming_the_option_and_address_exit_2(
    tmp_path: Path, squatter: int, command: str, option: str
) -> None:
    if command == "sidecar":
        args = ["sidecar", "--broker", "127.0.0.1:1", "--outbox", f"rocksdb://{tmp_path}/outbox"]
    else:
        args = [command, "--data-dir", str(tmp_path / "data"), *SMALL_STORE_ARGS]
    for name in listeners_of(command):
        port = squatter if name == option else 0
        args += [name, f"127.0.0.1:{port}"]
    line = _one_line(rocketbox(*args))
    assert line == (
        f"Error: {option} 127.0.0.1:{squatter} is in use (another rocketbox?); stop it or "
        "choose another port"
    )


def test_a_fresh_up_is_small_and_a_second_on_its_directory_is_told_who_holds_it(
    tmp_path: Path,
) -> None:
    up = Up(tmp_path)  # up's own store geometry, not the tests' small one
    try:
        for topic in range(TOPICS_N):
            assert up.send(f"Topic{topic}", 1) == ["stored"]
        used = sum(p.stat().st_blocks * 512 for p in tmp_path.rglob("*") if p.is_file())
        assert used <= FRESH_UP_DISK_BYTES_MAX, f"a fresh up holds {used / MIB:.0f} MiB"
        assert "commitlog segments of 64 MiB (--segment-size-mib" in up.output()
        # Its broker's port is taken too: the directory's lock is what the second one hears of.
        broker_port = up.broker_endpoint.rsplit(":", 1)[1]
        second = rocketbox(
            "up", "--data-dir", str(tmp_path), "--broker-listen", f"127.0.0.1:{broker_port}",
            "--sidecar-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            "--rocketmq-listen", "127.0.0.1:0",
        )  # fmt: skip
        line = _one_line(second)
        assert line == (
            f"Error: {(tmp_path / 'broker').resolve()} is in use by another process "
            f"(pid {up.proc.pid}, another rocketbox?); stop it or choose another --data-dir"
        )
    finally:
        up.stop()


def test_a_held_broker_or_outbox_directory_is_one_line_naming_its_holder(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker")
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"
    sidecar = SidecarProcess(broker.endpoint, outbox_url)
    try:
        second_broker = rocketbox(
            "broker", "--data-dir", str(tmp_path / "broker"),
            "--listen", f"127.0.0.1:{broker.port}",
            *SMALL_STORE_ARGS,
        )  # fmt: skip
        assert _one_line(second_broker) == (
            f"Error: {(tmp_path / 'broker').resolve()} is in use by another process "
            f"(pid {broker.proc.pid}, another rocketbox?); stop it or choose another --data-dir"
        )
        second_sidecar = rocketbox(
            "sidecar", "--broker", broker.endpoint, "--outbox", outbox_url,
            "--listen", f"127.0.0.1:{sidecar.port}",
        )  # fmt: skip
        assert _one_line(second_sidecar) == (
            f"Error: {tmp_path / 'outbox'} is in use by another process "
            f"(pid {sidecar.proc.pid}, another rocketbox?); stop it or choose another --outbox"
        )
    finally:
        sidecar.stop()
        broker.stop()


def test_reconcile_runs_on_up_data_beside_the_running_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    up = Up(data, *SMALL_STORE_ARGS)
    try:
        ledger = data / "acks.jsonl"
        assert f"ack ledger {ledger.resolve()}" in up.output()
        assert up.send("Orders", STORED_N) == ["stored"] * STORED_N
        set_flow_control(up.broker_endpoint, True)
        assert up.send("Orders", SPILLED_N) == ["spooled"] * SPILLED_N
        lines = STORED_N + SPILLED_N
        wait_until(lambda: len(ledger.read_text().splitlines()) == lines, 10.0, "up's ack ledger")
        # --data-dir: the broker store, the RocksDB outbox (opened read-only beside the running
        # up) and the ack ledger that up keeps under it.
        done = reconcile("--data-dir", str(data), "--master", "local[1]", out=tmp_path / "report")
        assert done.code == 0, (done.stdout, done.stderr)
        assert "NOTHING LOST" in done.stdout
        totals = done.summary["totals"]
        assert (totals["lost"], totals["unexpected"]) == (0, 0), totals
        assert (totals["ok"], totals["pending"]) == (STORED_N, SPILLED_N), totals
        set_flow_control(up.broker_endpoint, False)
    finally:
        up.stop()
