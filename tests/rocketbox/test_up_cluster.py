"""`rocketbox up --broker-groups 2 --slaves 1`: a local cluster of processes under one data
directory. An app sends through the sidecar; every broker is registered with the NameServer in
its role; each slave catches up with its master; the official client consumes everything; SIGINT
stops the whole cluster with exit 0 and leaves no process behind; the data directory holds each
broker's store where `rocketbox reconcile --data-dir` looks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from rocketbox.up_layout import up_broker_stores
from rocketbox_api.v1 import sidecar_pb2_grpc
from tests.broker.broker_process import SMALL_STORE_ARGS
from tests.broker.grpc_service.test_consumer import simple_consumer
from tests.rocketbox_process import REPO_ROOT, RocketboxProcess, wait_until
from tests.sidecar.sidecar_process import message, outcome, send

pytestmark = pytest.mark.slow

READY_LINE = re.compile(r"^sidecar listening on [^\s]+:(\d+) \(apps send here")
UP_LINE = re.compile(r"^cluster up; Ctrl-C stops it cleanly", re.MULTILINE)
SIDECAR_LINE = re.compile(r"^sidecar listening on [^\s]+:(\d+)", re.MULTILINE)
FRONT_LINE = re.compile(r"^sidecar RocketMQ front on 127\.0\.0\.1:(\d+) ", re.MULTILINE)
NAMESRV_LINE = re.compile(r"^namesrv listening on ([^\s]+:\d+)", re.MULTILINE)
MASTER_LINE = re.compile(r"^(broker-[a-z]-0): ASYNC_MASTER on ([^\s,]+), pid (\d+)", re.MULTILINE)
PID_LINE = re.compile(r"^broker-[a-z]-\d: \S+(?: on \S+)?, pid (\d+)", re.MULTILINE)
MESSAGES = 30
DEADLINE_S = 60.0
INVISIBLE_S = 15


class UpCluster(RocketboxProcess):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(
            "rocketbox up (cluster)",
            READY_LINE,
            ["up", "--data-dir", str(data_dir), "--broker-groups", "2", "--slaves", "1",
             "--broker-listen", "127.0.0.1:0", "--sidecar-listen", "127.0.0.1:0",
             "--namesrv-listen", "127.0.0.1:0", "--metrics-listen", "",
             "--rocketmq-listen", "127.0.0.1:0", *SMALL_STORE_ARGS],
        )  # fmt: skip
        wait_until(lambda: UP_LINE.search(self.output()), DEADLINE_S, "cluster up")
        out = self.output()
        [sidecar_port] = SIDECAR_LINE.findall(out)
        self.sidecar = f"127.0.0.1:{sidecar_port}"
        [self.namesrv] = NAMESRV_LINE.findall(out)
        self.masters = {name: endpoint for name, endpoint, _ in MASTER_LINE.findall(out)}
        self.broker_pids = [int(p) for p in PID_LINE.findall(out)]

    def interrupt(self) -> int:
        self.signal(signal.SIGINT)
        return self.wait_exit(120)


def cluster_rows(namesrv: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox", "cluster", "list", "--namesrv", namesrv, "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows: list[dict[str, object]] = json.loads(done.stdout)["brokers"]
    return rows


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_up_runs_a_local_cluster_and_stops_all_of_it(tmp_path: Path) -> None:
    up = UpCluster(tmp_path)
    try:
        assert sorted(up.masters) == ["broker-a-0", "broker-b-0"]
        assert FRONT_LINE.search(up.output()), "the cluster's sidecar serves the RocketMQ front"
        assert len(up.broker_pids) == 4
        with grpc.insecure_channel(up.sidecar) as channel:
            stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
            results = [
                send(stub, message("Orders", f"order {i}".encode())) for i in range(MESSAGES)
            ]
        assert {outcome(r) for r in results} == {"stored"}

        rows = cluster_rows(up.namesrv)
        assert sorted((str(r["group"]), str(r["broker_id"]), str(r["role"])) for r in rows) == [
            ("broker-a", "0", "ASYNC_MASTER"), ("broker-a", "1", "SLAVE"),
            ("broker-b", "0", "ASYNC_MASTER"), ("broker-b", "1", "SLAVE"),
        ]  # fmt: skip

        got: set[str] = set()
        with simple_consumer(up.masters["broker-a-0"], "UpClusterReaders", "Orders") as c:
            end = time.monotonic() + DEADLINE_S
            while len(got) < MESSAGES and time.monotonic() < end:
                # up's brokers keep the proxy's 10 s shortest invisible duration.
                for m in c.receive(32, INVISIBLE_S):
                    got.add(m.message_id)
                    c.ack(m)
        assert got == {r.message_id for r in results}
    finally:
        code = up.interrupt()
    assert code == 0, up.output()
    assert "rocketbox stopped cleanly" in up.output()
    wait_until(lambda: not any(alive(p) for p in up.broker_pids), DEADLINE_S, "no broker left")
    stores = up_broker_stores(tmp_path)
    assert [s.name for s in stores] == ["broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"]
