"""The reconciliation job: the inputs, the classification and what it writes.

    segments of every commitlog (driver lists names)
        ─► scan tasks (one per segment, mapInArrow) ───────────────────────────┐
    ledgers (JSON lines, parsed once to inputs/acks) ──────────────────────────┼─► classify
    outbox export (JSON lines or Parquet) ──────────────────────────────────────┘   (one shuffle)
        ─► details/messages (Parquet, one row per message id with its outcome; written by Spark)
        ─► aggregates read back from it (summary.py) ─► summary (report.py writes it out)

Nothing per message reaches the driver: it collects the inputs' statistics, the segments' scan
counts (an accumulator), the aggregates (at most ``summary_rows_max`` rows per list; the full
table is ``details/counts``) and drill-down samples of at most ``drill_down_ids_max`` ids per
finding. session.py says how it runs locally and on a cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from reconcile import summary as figures
from reconcile.classify import BUCKET_MS_DEFAULT, classify, counts_by_topic_and_bucket
from reconcile.commitlog_source import (
    SCAN_BATCH_RECORDS_MAX,
    SegmentStats,
    scan_commitlog,
    stats_accumulator,
)
from reconcile.commitlog_sources import CommitlogSource, read_sources, sources_summary
from reconcile.errors import InputError
from reconcile.ledgers import (
    check_ledgers,
    ledger_stats,
    normalise_ledgers,
    summarise_ledger,
)
from reconcile.outbox_source import export_kind, outbox_stats, read_outbox
from reconcile.session import SparkSettings, quiet_pyspark, spark_session, translate_errors

LOG = logging.getLogger(__name__)

DRILL_DOWN_IDS_MAX_DEFAULT = 100
SUMMARY_ROWS_MAX_DEFAULT = 10_000
# Topics the ledgers may name: each becomes a literal of the scope test in the classification.
SCOPE_TOPICS_MAX = 10_000
_BYPASS_PARTIAL_AGGREGATION = "spark.sql.execution.bypassPartialAggregation"


@dataclass(frozen=True, slots=True)
class JobConfig:
    # Store roots (with commitlog/) or commitlog directories: one broker's, or a cluster's
    # (every group's master, and slaves' copies, which fold into their masters' records).
    commitlogs: tuple[Path, ...]
    outbox: Path  # an export: .jsonl, or .parquet (file or directory)
    out_dir: Path
    ledgers: tuple[Path, ...] = ()
    spark: SparkSettings = field(default_factory=SparkSettings)
    bucket_ms: int = BUCKET_MS_DEFAULT
    drill_down_ids_max: int = DRILL_DOWN_IDS_MAX_DEFAULT
    summary_rows_max: int = SUMMARY_ROWS_MAX_DEFAULT
    scan_batch_records_max: int = SCAN_BATCH_RECORDS_MAX
    extra: dict[str, str] = field(default_factory=dict)  # echoed into the summary's inputs

    def __post_init__(self) -> None:
        for name in (
            "bucket_ms",
            "drill_down_ids_max",
            "summary_rows_max",
            "scan_batch_records_max",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")


def run(config: JobConfig, spark: SparkSession | None = None) -> dict[str, Any]:
    """Reconcile; returns the summary (report.py writes it). With ``spark`` the caller's session
    is used (tests share one); without, one is started and stopped for this run."""
    check_inputs(config)
    with translate_errors(), quiet_pyspark():
        if spark is not None:
            return reconcile(spark, config)
        with spark_session(config.spark) as own:
            return reconcile(own, config)


def check_inputs(config: JobConfig) -> None:
    """Fail before Spark starts when an input is missing (InputError, exit 3)."""
    read_sources(config.commitlogs)
    export_kind(config.outbox)
    check_ledgers(config.ledgers)


class _Phases:
    """Wall time per phase, for the summary (where does a run spend its time?)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - began, 3)
            LOG.info("reconcile: %s took %.1f s", name, self.seconds[name])


def reconcile(spark: SparkSession, config: JobConfig) -> dict[str, Any]:
    started = time.monotonic()
    phase = _Phases()
    out = config.out_dir
    details = out / "details"
    out.mkdir(parents=True, exist_ok=True)
    sources = read_sources(config.commitlogs)
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

    segment_rows = [SegmentStats(**v) for _, v in sorted(scan_stats.value.items())]
    summary: dict[str, Any] = {
        "verdict": "",
        "inputs": _inputs(spark, config, sources),
        "bucket_ms": config.bucket_ms,
        "totals": figures.counts_only(total[0]) if total else figures.counts_only({}),
        "commitlog": sources_summary(sources, segment_rows, limit),
        "ledgers": {**ledger, "scope_topics": scope[:limit]},
        "outbox": outbox_summary,
        "per_topic": [figures.with_key(r, "topic") for r in per_topic[:limit]],
        "per_bucket": [figures.with_bucket(r) for r in per_bucket[:limit]],
        "per_topic_bucket": [figures.with_bucket(r, "topic") for r in per_topic_bucket[:limit]],
        "truncated": {
            "per_topic": len(per_topic) > limit,
            "per_bucket": len(per_bucket) > limit,
            "per_topic_bucket": len(per_topic_bucket) > limit,
        },
        "delivery_latency": latency,
        "drill_down": drill_down,
        "details": {"messages": str(messages_path), "counts": str(counts_path)},
        "phases_s": phase.seconds,
    }
    if fold_copies:
        with phase("slave_copies"):
            summary["commitlog"]["slave_copies"] = figures.slave_copies(classified)
    summary["verdict"] = "LOST" if summary["totals"]["lost"] else "NOTHING_LOST"
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    return summary


def _read_ledgers(
    spark: SparkSession, config: JobConfig, phase: _Phases
) -> tuple[DataFrame | None, dict[str, Any], list[str]]:
    """The ledgers parsed once (None without ledgers), their statistics, and the scope."""
    acks: DataFrame | None = None
    ledger = figures.no_ledger()
    if config.ledgers:
        with phase("ledger_parse"):
            acks = normalise_ledgers(spark, config.ledgers, config.out_dir / "inputs" / "acks")
        with phase("ledger_stats"):
            # A row per (topic, state, …): more than the scope's limit means too many topics.
            rows = ledger_stats(acks).limit(4 * (SCOPE_TOPICS_MAX + 1)).collect()
            ledger = summarise_ledger([r.asDict() for r in rows])
    scope: list[str] = ledger.pop("topics") or []
    if len(scope) > SCOPE_TOPICS_MAX:
        raise InputError(f"the ledgers name {len(scope)} topics, more than {SCOPE_TOPICS_MAX}")
    return acks, ledger, scope


def _inputs(
    spark: SparkSession, config: JobConfig, sources: list[CommitlogSource]
) -> dict[str, Any]:
    return {
        "commitlogs": [str(s.directory) for s in sources],
        "outbox": str(config.outbox),
        "ledgers": [str(p) for p in config.ledgers],
        "master": spark.sparkContext.master,
        **config.extra,
    }


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
