"""The Spark session of the reconciliation, and the one place Spark's exceptions are translated.

Locally (``local[*]``, ``local[N]``) the session is sized for one machine: 4 shuffle partitions
per core, a 2 GiB driver (it is also the only executor) whose JIT compiles only what is hot and
whose memory pages are small, Python workers running this interpreter (which has pyarrow and this
package), Spark's temporary files in a directory removed afterwards.
Everywhere: no UI, no progress bars, Spark's logs at ERROR from the JVM's first line, times in
UTC, the sort-based shuffle writer always. On a cluster (any other master) the job ships
``reconcile/``, ``broker/store/codec/`` and ``outbox/``'s top-level modules to the executors,
which may not have rocketbox installed; they need a Python with pyarrow, numpy and zlib-ng
(``PYSPARK_PYTHON``) and the job's paths on a volume they share with the driver (the tasks write
their outputs, and hand each other rows by bucket, under ``--out``: bucket_files.py);
spark_preflight.py asks them before the job runs.

``spark_session`` stops the session and ends its JVM when its block ends: ``SparkSession.stop``
alone leaves the JVM running until the process exits.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from reconcile.config import LOCAL_MASTER, SparkSettings
from reconcile.errors import JobError, ReconcileError

# Shuffle partitions per local core: enough to spread a skewed id range, few enough that AQE
# has little to coalesce.
SHUFFLE_PARTITIONS_PER_CORE = 4
# A local driver is also the only executor: the shuffle and the hash aggregation live in it.
LOCAL_DRIVER_MEMORY = "2g"
JVM_STOP_DEADLINE_S = 30.0
_DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# A local driver's JIT compiles methods only when called ten times as often as by default. The
# JVM here mostly schedules tasks and moves opaque bytes: by default it compiled Spark's control
# code again in every job of a session, its compiler thread using more CPU than its task threads
# (docs/benchmarks.md); the hot loops of an SQL aggregation (the latency figures) still get the
# optimising compiler, as fast as by default.
_LOCAL_JIT_OPTIONS = "-XX:CompileThresholdScaling=10"
# A local driver's memory pages (Tungsten's: a shuffle's sort buffer, an aggregation's hash map)
# are 1 MiB, not the 32 MiB Spark derives from a 2 GiB heap on 2 cores. Every map task of the
# classification opens a shuffle sorter for its few small values, and each took a page: a 32 MiB
# array on the heap a task, which G1 allocates as a humongous object and which, summed over a
# job's tasks, started a concurrent marking cycle after cycle, costing the JVM CPU in most
# sessions' first job (docs/benchmarks.md). The few SQL aggregations (the latency figures) take
# more pages as they need them.
_LOCAL_PAGE_SIZE = "1m"
# Never the shuffle writer that opens a file and a serializer for every reduce partition in each
# map task: the classification's map tasks each write a small value for every bucket, and
# creating those serializers (a Kryo each) was most of the JVM's task threads' CPU
# (docs/benchmarks.md). The sort-based writer serializes into one buffer.
_SHUFFLE_BYPASS_MERGE_THRESHOLD = "0"
# Spark's own logging at ERROR from the first line (the default prints INFO and WARN; PySpark
# sets the root logger to the level of the class that starts the JVM, hence those too).
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
"""
# Spark's text for a stage that failed after its retries: where the last attempt ran, and why.
_STAGE_FAILURE = re.compile(
    r"Job aborted due to stage failure: Task \S+ in stage \S+ failed (?P<attempts>\d+) times?, "
    r"most recent failure: Lost task \S+ in stage \S+ \(TID \d+\) \((?P<where>[^)]*)\): "
    r"(?P<cause>[^\n]*)"
)
# PySpark 4.3 warns that it does not fully support pandas 3 whenever an Arrow function is
# declared; the job passes Arrow batches only and never a pandas object.
_PANDAS_WARNING = "PySpark does not yet fully support pandas"


def local_cores(master: str) -> int:
    match = LOCAL_MASTER.match(master)
    assert match, f"not a local master: {master}"
    threads = match.group(2)
    if threads is None:
        return 1
    return (os.cpu_count() or 1) if threads == "*" else int(threads)


@contextmanager
def quiet_pyspark() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
        yield


@contextmanager
def spark_session(config: SparkSettings) -> Iterator[SparkSession]:
    """A session for ``config``, stopped (and its JVM ended) when the block ends."""
    with tempfile.TemporaryDirectory(prefix="rocketbox-spark-") as tmp:
        log4j = Path(tmp) / "log4j2.properties"
        log4j.write_text(_LOG4J2, encoding="utf-8")
        builder = SparkSession.builder.master(config.master).appName(config.app_name)
        quiet_logs = f"-Dlog4j2.configurationFile=file:{log4j}"
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.shuffle.sort.bypassMergeThreshold": _SHUFFLE_BYPASS_MERGE_THRESHOLD,
            _DRIVER_JAVA_OPTIONS: quiet_logs,
        }
        if config.local:
            cores = local_cores(config.master)
            settings["spark.sql.shuffle.partitions"] = str(
                config.shuffle_partitions or SHUFFLE_PARTITIONS_PER_CORE * cores
            )
            settings["spark.driver.memory"] = LOCAL_DRIVER_MEMORY
            settings["spark.local.dir"] = str(Path(tmp) / "spark-local")
            settings[_DRIVER_JAVA_OPTIONS] += f" {_LOCAL_JIT_OPTIONS}"
            settings["spark.buffer.pageSize"] = _LOCAL_PAGE_SIZE
            # Python workers run this interpreter, which has pyarrow and this package.
            os.environ["PYSPARK_PYTHON"] = sys.executable
        elif config.shuffle_partitions:
            settings["spark.sql.shuffle.partitions"] = str(config.shuffle_partitions)
        settings.update(dict(config.conf))
        if quiet_logs not in settings[_DRIVER_JAVA_OPTIONS]:
            # The caller's JVM options (a GC, a heap dump path) and still quiet logs.
            settings[_DRIVER_JAVA_OPTIONS] += f" {quiet_logs}"
        for key, value in settings.items():
            builder = builder.config(key, value)
        # py4j logs every connection it closes at INFO.
        logging.getLogger("py4j").setLevel(logging.WARNING)
        try:
            with quiet_pyspark():
                spark = builder.getOrCreate()
        except (PySparkException, Py4JError, RuntimeError) as e:
            raise JobError(f"cannot start Spark (master {config.master}): {e}") from e
        try:
            # Translated while the JVM lives: a captured exception asks it for its own text.
            with translate_errors():
                spark.sparkContext.setLogLevel("ERROR")
                if not config.local:
                    _ship_code(spark, Path(tmp))
                yield spark
        finally:
            spark.stop()
            shutdown_jvm()


def shutdown_jvm() -> None:
    """End the Spark JVM this process started. ``SparkSession.stop`` leaves it running until the
    process exits; a test suite that runs jobs in-process must not leave one behind."""
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        # The gateway JVM exits when its stdin closes (PythonGatewayServer).
        proc.stdin.close()
        proc.wait(JVM_STOP_DEADLINE_S)
    SparkContext._gateway = None
    SparkContext._jvm = None


def _ship_code(spark: SparkSession, tmp: Path) -> None:
    """Executors of a cluster may not have rocketbox installed: ship what the tasks import.

    The ledger tasks (ledgers.py) read with in_process/inputs.py, whose formats module takes the
    export's schema from ``outbox/export.py``: the outbox's top-level modules go too (the
    standard library and pyarrow only), not its backends.
    """
    root = Path(__file__).resolve().parents[1]
    archive = tmp / "rocketbox-reconcile.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for package in ("reconcile", "reconcile/in_process", "broker/store/codec", "outbox"):
            for path in sorted((root / package).glob("*.py")):
                z.write(path, path.relative_to(root))
        z.write(root / "broker" / "__init__.py", "broker/__init__.py")
        z.write(root / "broker/store/__init__.py", "broker/store/__init__.py")
    spark.sparkContext.addPyFile(str(archive))


@contextmanager
def translate_errors() -> Iterator[None]:
    """Spark's and Py4J's exceptions become JobError, here and only here. A captured exception
    asks the JVM for its text: translate inside the session's block, before it stops."""
    try:
        yield
    except ReconcileError:
        raise
    except (PySparkException, Py4JError) as e:
        raise JobError(f"the Spark job failed: {_cause(e)}") from e


def _cause(e: Exception) -> str:
    """One line naming what failed: a Python task's exception, the cause of a stage that failed
    (after Spark's retries), else the first line of Spark's text."""
    try:
        text = str(e).strip()
        parameters = e.getMessageParameters() if isinstance(e, PySparkException) else None
    except Exception:
        # A stopped JVM cannot tell; the type still names something.
        return type(e).__name__
    if parameters and parameters.get("traceback", "").strip():
        return f"a Python task raised {parameters['traceback'].strip().splitlines()[-1]}"
    stage = _STAGE_FAILURE.search(text)
    if stage:
        times = "once" if stage["attempts"] == "1" else f"{stage['attempts']} times"
        return f"a task on {stage['where']} failed {times}: {stage['cause']}"
    return text.splitlines()[0] if text else type(e).__name__
