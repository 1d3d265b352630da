"""``rocketbox reconcile --master spark://…``: the same job, unchanged, on a Spark cluster.

A standalone Spark cluster of this machine's own, shared by this module's tests: a master and
one worker (two cores) started from the pyspark distribution's ``spark-class`` on free ports of
127.0.0.1, stopped with SIGTERM at the end (the worker takes its executors with it). The driver
is the ``rocketbox reconcile`` process; the executors are the worker's, with their own Python
workers (``PYSPARK_PYTHON``, as an operator sets it for a cluster) and the job's code shipped to
them. The worker runs in a mount namespace of its own where one directory, ``driver-only``, is
an empty tmpfs: what the driver keeps there, the executors cannot see, as on a machine of their
own without the driver's volume.

Proves: on the cluster the planted scenario gives the same totals, per-topic and per-bucket
counts, scan counts and torn tail as tests/reconcile/test_reconcile.py asserts on local[2]; a
job the executors cannot run (their Python lacks pyarrow, or starts no Python at all; the inputs
are the driver's alone) exits 4 with one line naming the cause, no traceback; a Python task's
failure is named by its exception (on the tests' local session).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from reconcile.errors import JobError
from reconcile.session import translate_errors
from tests.reconcile.planted import Planted, counts, planted
from tests.reconcile.rocketbox_reconcile import Reconciled, reconcile
from tests.rocketbox_process import wait_until
from tests.services import free_port

pytestmark = pytest.mark.slow

START_DEADLINE_S = 90.0
STOP_DEADLINE_S = 60.0
VENV_DEADLINE_S = 60.0
SPARK_HOME = Path(pyspark.__file__).parent


class SparkDaemon:
    """A master or worker JVM (spark-class execs java: the pid is the JVM's)."""

    def __init__(
        self, log: Path, cls: str, *args: str, ready: str, wrapper: tuple[str, ...] = ()
    ) -> None:
        self.log = log
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(log.parent)}  # fmt: skip
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [*wrapper, str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
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


@dataclass(frozen=True)
class Cluster:
    url: str
    driver_only: Path  # what the executors cannot see
    work: Path  # the worker's: a directory per application and executor, with its logs


def hidden_from(directory: Path) -> tuple[str, ...]:
    """A command prefix: the command runs (execs, keeping its pid) in a mount namespace of its
    own with an empty tmpfs over ``directory``. An unprivileged user maps itself to root in a
    user namespace of its own to mount it."""
    user = () if os.geteuid() == 0 else ("--user", "--map-root-user")
    mount = 'mount -t tmpfs rocketbox-hidden "$0" && exec "$@"'
    return ("unshare", *user, "--mount", "--propagation", "private", "sh", "-c", mount,
            str(directory))  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    driver_only = tmp / "driver-only"
    driver_only.mkdir()
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = SparkDaemon(
        tmp / "master.log", "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
        ready="I have been elected leader",
    )  # fmt: skip
    try:
        worker = SparkDaemon(
            tmp / "worker.log", "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", "2",
            "--memory", "2g", "--work-dir", str(tmp / "work"), url,
            ready="Successfully registered with master", wrapper=hidden_from(driver_only),
        )  # fmt: skip
        try:
            yield Cluster(url, driver_only, tmp / "work")
        finally:
            worker.stop()
    finally:
        master.stop()


def on_cluster(cluster: Cluster, p: Planted, out: Path, python: str, *conf: str) -> Reconciled:
    env = {**os.environ, "PYSPARK_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}
    return reconcile(
        "--commitlog", str(p.store), "--outbox", str(p.outbox_jsonl), "--acks", str(p.acks),
        "--master", cluster.url, "--conf", "spark.executor.memory=1g",
        *(arg for setting in conf for arg in ("--conf", setting)), out=out, env=env,
    )  # fmt: skip


def job_error(run: Reconciled) -> str:
    """The one line a job the executors cannot run ends with; no traceback before it."""
    assert run.code == JobError.exit_code, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("reconcile: "), run.stderr[-3000:]
    return line


def test_the_job_runs_unchanged_on_a_standalone_cluster(cluster: Cluster, tmp_path: Path) -> None:
    p = planted(tmp_path / "planted")
    driver_port = free_port()

    # The driver's address and ports as the chart's CronJob sets them (helm/rocketbox).
    run = on_cluster(
        cluster, p, tmp_path / "out", sys.executable, "spark.driver.host=127.0.0.1",
        f"spark.driver.port={driver_port}", f"spark.driver.blockManager.port={free_port()}",
    )  # fmt: skip

    assert run.code == 1, run.stderr[-3000:]
    # The executors were sent to the driver at that port.
    launched = "".join(p.read_text() for p in cluster.work.glob("app-*/*/stderr"))
    assert f"spark://CoarseGrainedScheduler@127.0.0.1:{driver_port}" in launched
    summary = run.summary
    assert summary["inputs"]["master"] == cluster.url
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


@pytest.mark.parametrize(
    ("python", "cause"),
    [
        # A venv made without packages: Python starts, the job's imports do not.
        ("venv/bin/python", r"the executors' Python on \S+ \(\S+/venv/bin/python\) cannot "
         r"import pyarrow, numpy, zlib_ng: set PYSPARK_PYTHON to a Python with "),
        # No Python at that path: the executors start no Python worker, and Spark's own failure
        # is what the line names.
        ("no-python/bin/python", r"the Spark job failed: a task on 127\.0\.0\.1 executor \d+ "
         r"failed 4 times: java\.io\.IOException: Cannot run program \"\S+/no-python/bin/python"),
    ],
    ids=["without-pyarrow", "no-python"],
)  # fmt: skip
def test_executors_whose_python_cannot_run_the_job_exit_4_naming_it(
    cluster: Cluster, tmp_path: Path, python: str, cause: str
) -> None:
    if python.startswith("venv/"):
        # Without pip: the bare interpreter, nothing installed.
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
            check=True, timeout=VENV_DEADLINE_S,
        )  # fmt: skip
    p = planted(tmp_path / "planted")

    run = on_cluster(cluster, p, tmp_path / "out", str(tmp_path / python))

    assert re.fullmatch(f"reconcile: {cause}.*", job_error(run)), run.stderr[-3000:]


def test_inputs_only_the_driver_sees_exit_4_naming_them(cluster: Cluster, tmp_path: Path) -> None:
    p = planted(cluster.driver_only / tmp_path.name)

    run = on_cluster(cluster, p, tmp_path / "out", sys.executable)

    assert job_error(run) == (
        f"reconcile: the executors on {socket.gethostname()} cannot see {p.store / 'commitlog'}, "
        f"{p.outbox_jsonl}, {p.acks}: every worker must see the inputs and --out at the same "
        "paths as the driver (shared storage)"
    )


def test_a_python_tasks_failure_is_named_by_its_exception(spark: SparkSession) -> None:
    """What the check before the job cannot foresee (a file gone since): the last line of the
    task's traceback, not Spark's "An exception was thrown from the Python worker"."""

    def task(_: Iterable[int]) -> Iterator[int]:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/gone/00000000")

    with pytest.raises(JobError) as raised, translate_errors():
        spark.sparkContext.parallelize(range(2), 2).mapPartitions(task).collect()

    assert str(raised.value) == (
        "the Spark job failed: a Python task raised FileNotFoundError: [Errno 2] No such file or "
        "directory: '/gone/00000000'"
    )
