"""Progress lines while the Spark engine runs: its active stages' tasks, every few seconds.

A thread polls the session's status tracker (no listener in the JVM, nothing on the job's own
path) and reports each active stage as ``stage 3 (parquet at …): 5 of 8 tasks``, when it
changed since the last line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

# Seconds between two polls of the status tracker.
PROGRESS_INTERVAL_S = 2.0
# Characters of a stage's name kept (Spark names a stage by its call site, which can be long).
STAGE_NAME_CHARS_MAX = 40


@contextmanager
def reporting(spark: SparkSession, progress: Callable[[str], None] | None) -> Iterator[None]:
    if progress is None:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(
        target=_poll, args=(spark, progress, stop), name="reconcile-progress", daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _poll(spark: SparkSession, progress: Callable[[str], None], stop: threading.Event) -> None:
    tracker = spark.sparkContext.statusTracker()
    last = ""
    while not stop.wait(PROGRESS_INTERVAL_S):
        stages = [tracker.getStageInfo(i) for i in sorted(tracker.getActiveStageIds())]
        line = "; ".join(
            f"stage {s.stageId} ({s.name[:STAGE_NAME_CHARS_MAX]}): "
            f"{s.numCompletedTasks} of {s.numTasks} tasks"
            for s in stages
            if s is not None
        )
        if line and line != last:
            progress(f"Spark: {line}")
            last = line
