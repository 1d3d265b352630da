"""The Spark engine: the reconciliation as Spark jobs, for any size, locally or on a cluster.

    segments of every commitlog (driver lists names, cuts them in parts) ─┐
    outbox export (JSON lines or Parquet) ────────────────────────────────┤
    ledgers (JSON lines; driver cuts them in byte ranges at line ends) ───┴─► spark_classify.py:
        one stage of map tasks: rows into buckets of ids (files of the exchange, Spark's
        shuffle saying where), ledger lines also into inputs/acks (Parquet parts); a task a
        bucket ─► details/messages (Parquet, a row per id with its outcome) ─► the buckets'
        counts and drill-down candidates, the ledgers' statistics
        ─► Found (summary_document.py)
    details/messages ─► the delivery latency (one Spark aggregation, spark_latency.py; none
        when no message has one)

Nothing per message reaches the driver: it collects the inputs' statistics, the segments' scan
counts (an accumulator), the counts per (topic, time bucket), drill-down candidates (at most a
few ``drill_down_ids_max`` rows a bucket) and the latency aggregates. session.py says how it runs
locally and on a cluster.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pyspark.sql import SparkSession

from reconcile import spark_classify
from reconcile.bucket_files import EXCHANGE_DIR_NAME
from reconcile.commitlog_source import part_bytes, segment_stats, stats_accumulator
from reconcile.commitlog_sources import CommitlogSource
from reconcile.config import ENGINE_SPARK, JobConfig
from reconcile.figures import latency_document, no_ledger, summarise_ledger
from reconcile.in_process import figures
from reconcile.ledgers import ParsedLedgers, ledger_ranges, parsed_ledgers
from reconcile.parquet_parts import emptied, write_directory
from reconcile.segment_scan import Segment, SegmentStats
from reconcile.spark_classify import Classification, InputStats
from reconcile.spark_latency import latency_summary
from reconcile.spark_preflight import check_executors
from reconcile.summary_document import Found, Phases, split_scope


def reconcile(spark: SparkSession, config: JobConfig, sources: list[CommitlogSource]) -> Found:
    check_executors(spark, config, sources)
    phase = Phases()
    details = config.out_dir / "details"
    sc = spark.sparkContext
    segments = [segment for source in sources for segment in source.segments]
    input_bytes = sum(s.size_bytes for s in segments) + sum(
        p.stat().st_size for p in config.ledgers
    )
    buckets = spark_classify.bucket_count(
        input_bytes, sc.defaultParallelism, config.spark.shuffle_partitions
    )
    messages_path = details / "messages"
    fold_copies = len(sources) > 1
    job = spark_classify.Classification(
        messages_dir=str(messages_path),
        acks_dir=str(config.out_dir / "inputs" / "acks"),
        exchange_dir=str(config.out_dir / EXCHANGE_DIR_NAME),
        buckets=buckets,
        bucket_ms=config.bucket_ms,
        fold_copies=fold_copies,
        ledgers=bool(config.ledgers),
        ids_max=config.drill_down_ids_max,
        batch_records_max=config.scan_batch_records_max,
    )
    with phase("scan_parse_classify_write"):
        scanned, outbox, parsed, classified = _classify(spark, config, segments, job)
    # Too many topics is refused here, after the job: the ranges' topics are known only then.
    ledger, scope = split_scope(summarise_ledger(parsed.rows) if parsed else no_ledger())
    limit = config.summary_rows_max
    counts_path = details / "counts"
    with phase("counts"):
        counts = figures.roll_up(classified.cells)
        write_directory(counts, counts_path)
        total, per_topic, per_bucket, per_topic_bucket = figures.levels(counts, limit)
    with phase("latency"):
        # Every later figure is read back from the written table: the scan ran once, above.
        latency = (
            latency_summary(spark.read.parquet(str(messages_path)), limit)
            if classified.timed_messages
            # No message was delivered late (nothing spooled): no Spark job to learn so.
            else latency_document([], {})
        )
    with phase("drill_down"):
        malformed = parsed.malformed if parsed and ledger["malformed"] else None
        drill_down = figures.drill_down(classified.candidates, malformed, config.drill_down_ids_max)
    return Found(
        engine=ENGINE_SPARK,
        where={"master": spark.sparkContext.master, "id_buckets": buckets},
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
    spark: SparkSession, config: JobConfig, segments: list[Segment], job: Classification
) -> tuple[list[SegmentStats], dict[str, int], ParsedLedgers | None, spark_classify.Classified]:
    """Scan, parse the ledgers, classify and write ``details/messages``; what each segment's
    scan found, the outbox's statistics, the ledgers' and the buckets' findings.

    The segments are scanned in parts (commitlog_source.py); should a part have read past damage
    an earlier part of its segment stopped at, or begun elsewhere than where the part before it
    ended, the whole is done again with those segments scanned whole: rare (a damaged record
    whose size is intact, a record forged inside another's body), and then correct."""
    sc = spark.sparkContext
    whole: frozenset[tuple[int, int]] = frozenset()
    part_bytes_max = part_bytes(segments, sc.defaultParallelism)
    ranges = ledger_ranges(config.ledgers, sc.defaultParallelism)
    for _ in range(2):
        stats = InputStats(*(stats_accumulator(spark) for _ in range(3)))
        units = spark_classify.units(segments, part_bytes_max, whole, config.outbox, ranges)
        emptied(Path(job.messages_dir))
        emptied(Path(job.acks_dir))
        exchange = emptied(Path(job.exchange_dir))
        try:
            classified = spark_classify.run(sc, job, units, stats)
        finally:
            # The rows by bucket were only on their way: the job's outputs hold them.
            shutil.rmtree(exchange, ignore_errors=True)
        merged = segment_stats(stats.scan.value)
        if not merged.rescan:
            (outbox,) = stats.outbox.value.values()
            parsed = (
                parsed_ledgers({k[0]: v for k, v in stats.ledger.value.items()}, job.ids_max)
                if ranges
                else None
            )
            return merged.segments, outbox, parsed, classified
        whole = frozenset(merged.rescan)
    raise AssertionError(f"segments {sorted(whole)} read past damage though scanned whole")
