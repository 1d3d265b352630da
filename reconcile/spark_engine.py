"""The Spark engine: the reconciliation as Spark jobs, for any size, locally or on a cluster.

    segments of every commitlog (driver lists names, cuts them in parts)
        ─► scan tasks (one per part of a segment, mapInArrow) ──────────────────┐
    ledgers (JSON lines, Arrow's reader in tasks, parsed once to inputs/acks) ─┼─► classify
    outbox export (JSON lines or Parquet) ──────────────────────────────────────┘   (one shuffle)
        ─► details/messages (Parquet, one row per message id with its outcome; written by Spark)
        ─► aggregates read back from it (summary.py, a few jobs) ─► Found (summary_document.py)

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
from reconcile.commitlog_source import scan_commitlog, segment_stats, stats_accumulator
from reconcile.commitlog_sources import CommitlogSource
from reconcile.config import ENGINE_SPARK, JobConfig
from reconcile.figures import no_ledger, summarise_ledger
from reconcile.ledgers import ledger_stats, normalise_ledgers
from reconcile.outbox_source import outbox_stats, read_outbox
from reconcile.outcomes import COUNT_NAMES
from reconcile.segment_scan import SegmentStats
from reconcile.summary_document import SCOPE_TOPICS_MAX, Found, Phases, split_scope

_BYPASS_PARTIAL_AGGREGATION = "spark.sql.execution.bypassPartialAggregation"
# details/counts: the cube's keys, its level and the counts (as the in-process engine writes it).
COUNTS_COLUMNS = ("topic", "bucket_start_ms", "level", *COUNT_NAMES)


def reconcile(spark: SparkSession, config: JobConfig, sources: list[CommitlogSource]) -> Found:
    phase = Phases()
    details = config.out_dir / "details"
    acks, ledger, scope = _read_ledgers(spark, config, phase)
    outbox = read_outbox(spark, config.outbox)
    with phase("outbox_stats"):
        outbox_summary = figures.one_row(outbox_stats(outbox))

    messages_path = details / "messages"
    with phase("scan_classify_write"):
        scanned = _classify_and_write(spark, config, sources, acks, outbox, scope)
    # Every later figure is read back from the written table: the scan ran once, above.
    classified = spark.read.parquet(str(messages_path))

    counts_path = details / "counts"
    limit = config.summary_rows_max
    # Only a second log can hold a slave's copy: one log keeps the cheaper count of copies.
    fold_copies = len(sources) > 1
    with phase("counts"):
        # One aggregation for every level and the slave copies: written, then collected from
        # memory (the table is a row per topic and bucket, and a few more).
        counts = counts_by_topic_and_bucket(classified, fold_copies).cache()
        try:
            counts.select(*COUNTS_COLUMNS).write.mode("overwrite").parquet(str(counts_path))
            levels = figures.level_rows(counts, limit)
        finally:
            counts.unpersist()
    with phase("latency"):
        latency = figures.latency_summary(classified, limit)
    with phase("drill_down"):
        drill_down = figures.drill_down(
            classified, acks if ledger["malformed"] else None, config.drill_down_ids_max
        )
    total = levels[figures.LEVEL_TOTAL]
    return Found(
        engine=ENGINE_SPARK,
        where={"master": spark.sparkContext.master},
        segments=scanned,
        ledger=ledger,
        scope=scope,
        outbox=outbox_summary,
        total={k: v for k, v in total[0].items() if k != "folded_copies"} if total else {},
        per_topic=levels[figures.LEVEL_TOPIC],
        per_bucket=levels[figures.LEVEL_BUCKET],
        per_topic_bucket=levels[figures.LEVEL_TOPIC_BUCKET],
        latency=latency,
        drill_down=drill_down,
        details={"messages": str(messages_path), "counts": str(counts_path)},
        slave_copies=int(total[0]["folded_copies"] or 0) if fold_copies and total else None,
        phases=phase,
    )


def _classify_and_write(
    spark: SparkSession,
    config: JobConfig,
    sources: list[CommitlogSource],
    acks: DataFrame | None,
    outbox: DataFrame,
    scope: list[str],
) -> list[SegmentStats]:
    """Scan, classify and write ``details/messages``; what each segment's scan found.

    The segments are scanned in parts (commitlog_source.py); should a part have read past damage
    an earlier part of its segment stopped at, the whole is done again with those segments
    scanned whole: rare (a damaged record whose size is intact), and then correct."""
    segments = [segment for source in sources for segment in source.segments]
    whole: frozenset[tuple[int, int]] = frozenset()
    for _ in range(2):
        scan_stats = stats_accumulator(spark)
        records = scan_commitlog(
            spark, segments, scan_stats, config.scan_batch_records_max, whole=whole
        )
        messages = classify(records, acks, outbox, scope, config.bucket_ms, len(sources) > 1)
        with _bypass_partial_aggregation(spark):
            # Not partitioned by outcome: that would sort every row; readers filter on it instead.
            messages.write.mode("overwrite").parquet(str(config.out_dir / "details" / "messages"))
        merged = segment_stats(scan_stats.value)
        if not merged.rescan:
            return merged.segments
        whole = frozenset(merged.rescan)
    raise AssertionError(f"segments {sorted(whole)} read past damage though scanned whole")


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
