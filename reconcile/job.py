"""The reconciliation job: check the inputs, pick the engine, put the summary together.

``run`` is the one entry (the command line, the bench and the tests call it). The engines
(config.py says which runs when) each return a ``Found`` that summary_document.py turns into the
summary; report.py writes it out. PySpark is imported only when the Spark engine runs, so a run
in process starts no JVM and loads no Spark code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reconcile.arrow_memory import system_memory_pool
from reconcile.commitlog_sources import CommitlogSource, read_sources
from reconcile.config import ENGINE_AUTO, ENGINE_IN_PROCESS, ENGINE_SPARK, JobConfig
from reconcile.in_process.engine import TooManyRecordsError
from reconcile.in_process.engine import reconcile as reconcile_in_process
from reconcile.incremental import reconcile_incremental
from reconcile.input_formats import check_ledgers, export_kind
from reconcile.summary_document import Found, summary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG = logging.getLogger(__name__)
# Where a run reports what it is doing (segments scanned, rows joined), or nowhere.
Progress = Callable[[str], None]


def run(
    config: JobConfig, spark: SparkSession | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """Reconcile; returns the summary (report.py writes it). The engine is the config's choice;
    should Spark run, it runs in ``spark`` (tests share one session), else in a session started
    and stopped for this run."""
    check_inputs(config)
    started = time.monotonic()
    config.out_dir.mkdir(parents=True, exist_ok=True)
    sources = read_sources(config.commitlogs)
    with system_memory_pool():
        found = _reconcile_here(config, sources, progress)
    if found is None:
        found = _reconcile_with_spark(config, sources, spark, progress)
    return summary(config, sources, found, started)


def _reconcile_here(
    config: JobConfig, sources: list[CommitlogSource], progress: Progress | None
) -> Found | None:
    """The run in this process (incremental, or the in-process engine), or None: Spark's."""
    if config.checkpoint is not None:
        return reconcile_incremental(config, sources, progress)
    if config.engine == ENGINE_IN_PROCESS:
        return reconcile_in_process(config, sources, None, progress)
    if config.engine == ENGINE_AUTO and config.spark.local:
        try:
            return reconcile_in_process(config, sources, config.in_process_records_max, progress)
        except TooManyRecordsError as e:
            LOG.info("reconcile: %s: the Spark engine runs instead", e)
            if progress is not None:
                progress(f"{e}: starting Spark")
    return None


def check_inputs(config: JobConfig) -> None:
    """Fail before any engine starts when an input is missing (InputError, exit 3)."""
    read_sources(config.commitlogs)
    export_kind(config.outbox)
    check_ledgers(config.ledgers)


def _reconcile_with_spark(
    config: JobConfig,
    sources: list[CommitlogSource],
    spark: SparkSession | None,
    progress: Progress | None,
) -> Found:
    # PySpark (and its JVM) only when Spark runs: a run in process never imports it.
    from reconcile import spark_engine  # noqa: PLC0415 - PySpark loads only for the Spark engine
    from reconcile.session import (  # noqa: PLC0415 - PySpark loads only for the Spark engine
        quiet_pyspark,
        spark_session,
        translate_errors,
    )
    from reconcile.spark_progress import (  # noqa: PLC0415 - PySpark loads only for the Spark engine
        reporting,
    )

    assert config.engine in (ENGINE_AUTO, ENGINE_SPARK)
    # A session of its own translates its errors before it stops (session.py); this, the errors
    # of a session given, which outlives the run.
    with translate_errors(), quiet_pyspark():
        if spark is not None:
            with reporting(spark, progress):
                return spark_engine.reconcile(spark, config, sources)
        with spark_session(config.spark) as own, reporting(own, progress):
            return spark_engine.reconcile(own, config, sources)
