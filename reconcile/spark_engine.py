"""The Spark engine: the reconciliation as Spark jobs, for any size, locally or on a cluster.

    ledgers (JSON lines; a task a byte range, Arrow's reader) ─► inputs/acks (Parquet parts),
        the ledgers' statistics and scope ─► the driver
    segments of every commitlog (driver lists names, cuts them in parts) ─┐
    inputs/acks' parts ───────────────────────────────────────────────────┼─► spark_classify.py:
    outbox export (JSON lines or Parquet) ────────────────────────────────┘   ids in buckets,
        a task a bucket ─► details/messages (Parquet, one row per message id with its outcome)
        ─► the buckets' counts and drill-down candidates ─► Found (summary_document.py)
    details/messages ─► the delivery latency (one Spark aggregation, summary.py)

Nothing per message reaches the driver: it collects the inputs' statistics, the segments' scan
counts (an accumulator), the counts per (topic, time bucket), drill-down candidates (at most a
few ``drill_down_ids_max`` rows a bucket) and the latency aggregates. session.py says how it runs
locally and on a cluster.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from reconcile import spark_classify
from reconcile.commitlog_source import part_bytes, segment_stats, stats_accumulator
from reconcile.commitlog_sources import CommitlogSource
from reconcile.config import ENGINE_SPARK, JobConfig
from reconcile.figures import no_ledger, summarise_ledger
from reconcile.in_process import figures
from reconcile.ledgers import ParsedLedgers, parse_ledgers
from reconcile.parquet_parts import emptied, write_part
from reconcile.segment_scan import SegmentStats
from reconcile.spark_latency import latency_summary
from reconcile.summary_document import Found, Phases, split_scope


def reconcile(spark: SparkSession, config: JobConfig, sources: list[CommitlogSource]) -> Found:
    phase = Phases()
    details = config.out_dir / "details"
    parsed = None
    if config.ledgers:
        with phase("ledger_parse"):
            parsed = parse_ledgers(
                spark, config.ledgers, config.out_dir / "inputs" / "acks",
                config.drill_down_ids_max,
            )  # fmt: skip
    ledger, scope = split_scope(summarise_ledger(parsed.rows) if parsed else no_ledger())
    messages_path = details / "messages"
    fold_copies = len(sources) > 1
    with phase("scan_classify_write"):
        scanned, outbox, classified = _classify(spark, config, sources, parsed, scope)
    limit = config.summary_rows_max
    counts_path = details / "counts"
    with phase("counts"):
        counts = figures.roll_up(classified.cells)
        write_part(counts, emptied(counts_path), 0)
        total, per_topic, per_bucket, per_topic_bucket = figures.levels(counts, limit)
    with phase("latency"):
        # Every later figure is read back from the written table: the scan ran once, above.
        latency = latency_summary(spark.read.parquet(str(messages_path)), limit)
    with phase("drill_down"):
        malformed = parsed.malformed if parsed and ledger["malformed"] else None
        drill_down = figures.drill_down(classified.candidates, malformed, config.drill_down_ids_max)
    return Found(
        engine=ENGINE_SPARK,
        where={"master": spark.sparkContext.master},
        segments=scanned,
        ledger=ledger,
        scope=scope,
        outbox=outbox,
        total=total,
        per_topic=per_topic,
        per_bucket=per_bucket,
        per_topic_bucket=per_topic_bucket,
        latency=latency,
        drill_down=drill_down,
        details={"messages": str(messages_path), "counts": str(counts_path)},
        slave_copies=classified.folded_copies if fold_copies else None,
        phases=phase,
    )


def _classify(
    spark: SparkSession,
    config: JobConfig,
    sources: list[CommitlogSource],
    parsed: ParsedLedgers | None,
    scope: list[str],
) -> tuple[list[SegmentStats], dict[str, int], spark_classify.Classified]:
    """Scan, classify and write ``details/messages``; what each segment's scan found, the
    outbox's statistics and the buckets' findings.

    The segments are scanned in parts (commitlog_source.py); should a part have read past damage
    an earlier part of its segment stopped at, the whole is done again with those segments
    scanned whole: rare (a damaged record whose size is intact), and then correct."""
    sc = spark.sparkContext
    segments = [segment for source in sources for segment in source.segments]
    ack_parts = parsed.parts if parsed else []
    input_bytes = sum(s.size_bytes for s in segments) + sum(p.stat().st_size for p in ack_parts)
    job = spark_classify.Classification(
        messages_dir=str(config.out_dir / "details" / "messages"),
        buckets=spark_classify.bucket_count(
            input_bytes, sc.defaultParallelism, config.spark.shuffle_partitions
        ),
        scope=tuple(scope),
        bucket_ms=config.bucket_ms,
        fold_copies=len(sources) > 1,
        with_ledgers=parsed is not None,
        ids_max=config.drill_down_ids_max,
        batch_records_max=config.scan_batch_records_max,
    )
    whole: frozenset[tuple[int, int]] = frozenset()
    part_bytes_max = part_bytes(segments, sc.defaultParallelism)
    for _ in range(2):
        scan_stats, outbox_stats = stats_accumulator(spark), stats_accumulator(spark)
        units = spark_classify.units(segments, part_bytes_max, whole, ack_parts, config.outbox)
        emptied(config.out_dir / "details" / "messages")
        classified = spark_classify.run(sc, job, units, scan_stats, outbox_stats)
        merged = segment_stats(scan_stats.value)
        if not merged.rescan:
            (outbox,) = outbox_stats.value.values()
            return merged.segments, outbox, classified
        whole = frozenset(merged.rescan)
    raise AssertionError(f"segments {sorted(whole)} read past damage though scanned whole")
