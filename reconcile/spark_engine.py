"""The Spark engine: the reconciliation as Spark jobs, for any size, locally or on a cluster.

    segments of every commitlog (driver lists names)
        ─► scan tasks (one per segment, mapInArrow) ───────────────────────────┐
    ledgers (JSON lines, parsed once to inputs/acks) ──────────────────────────┼─► classify
    outbox export (JSON lines or Parquet) ──────────────────────────────────────┘   (one shuffle)
        ─► details/messages (Parquet, one row per message id with its outcome; written by Spark)
        ─► aggregates read back from it (summary.py) ─► Found (summary_document.py)

Nothing per message reaches the driver: it collects the inputs' statistics, the segments' scan
counts (an accumulator), the aggregates (at most ``summary_rows_max`` + 1 rows per list; the full
table is ``details/counts``) and drill-down samples of at most ``drill_down_ids_max`` ids per
finding. session.py says how it runs locally and on a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from reconcile import summary as figures
from reconcile.classify import classify, counts_by_topic_and_bucket
from reconcile.commitlog_source import scan_commitlog, stats_accumulator
from reconcile.commitlog_sources import CommitlogSource
from reconcile.config import ENGINE_SPARK, JobConfig
from reconcile.figures import no_ledger, summarise_ledger
from reconcile.ledgers import ledger_stats, normalise_ledgers
from reconcile.outbox_source import outbox_stats, read_outbox
from reconcile.segment_scan import SegmentStats
from reconcile.summary_document import SCOPE_TOPICS_MAX, Found, Phases, split_scope

_BYPASS_PARTIAL_AGGREGATION = "spark.sql.execution.bypassPartialAggregation"


def reconcile(spark: SparkSession, config: JobConfig, sources: list[CommitlogSource]) -> Found:
    phase = Phases()
    details = config.out_dir / "details"
    segments = [segment for source in sources for segment in source.segments]
    # Only a second log can hold a slave's copy: one log keeps the cheaper count of copies.
    fold_copies = len(sources) > 1
    scan_stats = stats_accumulator(spark)
    records = scan_commitlog(spark, segments, scan_stats, config.scan_batch_records_max)

    acks, ledger, scope = _read_ledgers(spark, config, phase)
    outbox = read_outbox(spark, config.outbox)
    with phase("outbox_stats"):
        outbox_summary = figures.one_row(outbox_stats(outbox))

    messages = classify(records, acks, outbox, scope, config.bucket_ms, fold_copies)
    messages_path = details / "messages"
    with phase("scan_classify_write"), _bypass_partial_aggregation(spark):
        # Not partitioned by outcome: that would sort every row; readers filter on it instead.
        messages.write.mode("overwrite").parquet(str(messages_path))
    # Every later figure is read back from the written table: the scan ran once, above.
    classified = spark.read.parquet(str(messages_path))

    counts_path = details / "counts"
    limit = config.summary_rows_max
    with phase("counts"):
        counts_by_topic_and_bucket(classified).write.mode("overwrite").parquet(str(counts_path))
        counts = spark.read.parquet(str(counts_path))
        total = figures.level_rows(counts, 3, [], 1)
        per_topic = figures.level_rows(counts, 1, ["topic"], limit)
        per_bucket = figures.level_rows(counts, 2, ["bucket_start_ms"], limit)
        per_topic_bucket = figures.level_rows(counts, 0, ["bucket_start_ms", "topic"], limit)
    with phase("latency"):
        latency = figures.latency_summary(classified, limit)
    with phase("drill_down"):
        drill_down = figures.drill_down(
            classified, acks if ledger["malformed"] else None, config.drill_down_ids_max
        )
    slave_copies = None
    if fold_copies:
        with phase("slave_copies"):
            slave_copies = figures.slave_copies(classified)
    return Found(
        engine=ENGINE_SPARK,
        where={"master": spark.sparkContext.master},
        segments=[SegmentStats(**v) for _, v in sorted(scan_stats.value.items())],
        ledger=ledger,
        scope=scope,
        outbox=outbox_summary,
        total=total[0] if total else {},
        per_topic=per_topic,
        per_bucket=per_bucket,
        per_topic_bucket=per_topic_bucket,
        latency=latency,
        drill_down=drill_down,
        details={"messages": str(messages_path), "counts": str(counts_path)},
        slave_copies=slave_copies,
        phases=phase,
    )


def _read_ledgers(
    spark: SparkSession, config: JobConfig, phase: Phases
) -> tuple[DataFrame | None, dict[str, Any], list[str]]:
    """The ledgers parsed once (None without ledgers), their statistics, and the scope."""
    if not config.ledgers:
        return None, *split_scope(no_ledger())
    with phase("ledger_parse"):
        acks = normalise_ledgers(spark, config.ledgers, config.out_dir / "inputs" / "acks")
    with phase("ledger_stats"):
        # A row per (topic, state, …): more than the scope's limit means too many topics.
        rows = ledger_stats(acks).limit(4 * (SCOPE_TOPICS_MAX + 1)).collect()
        ledger, scope = split_scope(summarise_ledger([r.asDict() for r in rows]))
    return acks, ledger, scope


@contextmanager
def _bypass_partial_aggregation(spark: SparkSession) -> Iterator[None]:
    """Every message id is a group of its own: a partial aggregation before the shuffle would
    only copy the rows once more. Only for the grouping by id: every other aggregate of the job
    has few groups, and needs it."""
    spark.conf.set(_BYPASS_PARTIAL_AGGREGATION, "true")
    try:
        yield
    finally:
        spark.conf.set(_BYPASS_PARTIAL_AGGREGATION, "false")
