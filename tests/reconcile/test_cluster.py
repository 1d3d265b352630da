"""``rocketbox reconcile --master spark://…``: the same job, unchanged, on a Spark cluster.

A standalone Spark cluster of this machine's own: a master and one worker (two cores) started
from the pyspark distribution's ``spark-class`` on free ports of 127.0.0.1, stopped with SIGTERM
at the end (the worker takes its executors with it). The driver is the ``rocketbox reconcile``
process; the executors are the worker's, with their own Python workers (``PYSPARK_PYTHON``, as
an operator sets it for a cluster) and the job's code shipped to them.

Proves: on the cluster the planted scenario gives the same totals, per-topic and per-bucket
counts, scan counts and torn tail as tests/reconcile/test_reconcile.py asserts on local[2].
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from tests.reconcile.planted import counts, planted
from tests.reconcile.rocketbox_reconcile import reconcile
from tests.rocketbox_process import wait_until
from tests.services import free_port

START_DEADLINE_S = 90.0
STOP_DEADLINE_S = 60.0
SPARK_HOME = Path(pyspark.__file__).parent


class SparkDaemon:
    """A master or worker JVM (spark-class execs java: the pid is the JVM's)."""

    def __init__(self, log: Path, cls: str, *args: str, ready: str) -> None:
        self.log = log
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(log.parent)}  # fmt: skip
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        pattern = re.compile(ready)
        wait_until(
            lambda: bool(pattern.search(log.read_text())) or self.proc.poll() is not None,
            START_DEADLINE_S, f"{cls} to start",
        )  # fmt: skip
        assert self.proc.poll() is None, log.read_text()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_DEADLINE_S)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = SparkDaemon(
        tmp_path / "master.log", "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
        ready="I have been elected leader",
    )  # fmt: skip
    try:
        worker = SparkDaemon(
            tmp_path / "worker.log", "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", "2",
            "--memory", "2g", "--work-dir", str(tmp_path / "work"), url,
            ready="Successfully registered with master",
        )  # fmt: skip
        try:
            yield url
        finally:
            worker.stop()
    finally:
        master.stop()


def test_the_job_runs_unchanged_on_a_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    p = planted(tmp_path / "planted")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}

    run = reconcile(
        "--commitlog", str(p.store), "--outbox", str(p.outbox_jsonl), "--acks", str(p.acks),
        "--master", cluster, "--conf", "spark.executor.memory=1g", out=tmp_path / "out", env=env,
    )  # fmt: skip

    assert run.code == 1, run.stderr[-3000:]
    summary = run.summary
    assert summary["inputs"]["master"] == cluster
    assert summary["totals"] == counts(p.plants)
    assert {t["topic"]: t["lost"] for t in summary["per_topic"]} == {
        "Audit": 0, "Orders": 3, "Payments": 2,
    }  # fmt: skip
    assert [b["messages"] for b in summary["per_bucket"]] == [
        sum(1 for x in p.plants if x.bucket == b) for b in range(3)
    ]
    log = summary["commitlog"]
    assert (log["records"], log["kept_records"], log["parked_records"]) == (127, 123, 3)
    assert [s["where"] for s in log["stops"]] == ["torn tail"]
