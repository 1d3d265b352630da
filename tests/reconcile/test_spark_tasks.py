"""The Spark engine's task functions (reconcile/spark_classify.py), called as a worker calls them.

Proves that the map task and the bucket task each take what is alive as they start out of the
collector's reach (``gc.freeze``): PySpark's reused worker runs a full collection after every
task, which cost a large share of the workers' CPU while every module and cache of the worker
was in it. And that a local session's tasks take small memory pages: a map task's shuffle sorter
took a page of 32 MiB for a few small values, and the JVM's collector spent CPU on them
(session.py).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from reconcile import spark_classify
from reconcile.commitlog_source import stats_accumulator
from reconcile.config import DRILL_DOWN_IDS_MAX_DEFAULT
from reconcile.outcomes import BUCKET_MS_DEFAULT
from reconcile.segment_scan import SCAN_BATCH_RECORDS_MAX

pytestmark = pytest.mark.slow


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's heap as the collector sees it by default, before and after."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def job(tmp_path: Path) -> spark_classify.Classification:
    for name in ("messages", "acks", "exchange"):
        (tmp_path / name).mkdir()
    return spark_classify.Classification(
        messages_dir=str(tmp_path / "messages"),
        acks_dir=str(tmp_path / "acks"),
        exchange_dir=str(tmp_path / "exchange"),
        buckets=2,
        bucket_ms=BUCKET_MS_DEFAULT,
        fold_copies=False,
        ledgers=False,
        ids_max=DRILL_DOWN_IDS_MAX_DEFAULT,
        batch_records_max=SCAN_BATCH_RECORDS_MAX,
    )


@pytest.mark.usefixtures("unfrozen")
def test_a_map_task_and_a_bucket_task_freeze_what_lives_as_they_start(
    spark: SparkSession, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox.jsonl"
    outbox.write_text("")
    stats = spark_classify.InputStats(*(stats_accumulator(spark) for _ in range(3)))
    classification = job(tmp_path)
    assert gc.get_freeze_count() == 0

    mapped = list(
        spark_classify._map_unit(classification, stats, (spark_classify.KIND_OUTBOX, str(outbox)))
    )

    assert mapped == []  # an empty export: no rows for any bucket
    assert gc.get_freeze_count() > 0
    gc.unfreeze()

    found = list(spark_classify._classify_bucket(classification, 0, iter([])))

    assert [f[0] for f in found] == [0]  # no message in the bucket
    assert gc.get_freeze_count() > 0


def test_a_local_session_gives_its_tasks_pages_of_one_mib(spark: SparkSession) -> None:
    # Spark's memory manager takes the setting, when there is one, as every task's page size
    # (MemoryManager.pageSizeBytes); unset, it derives 32 MiB from this session's heap and cores.
    page_size = spark.sparkContext.getConf().get("spark.buffer.pageSize")

    assert page_size == "1m"
