"""The Spark engine's figures: aggregates of the classified messages, collected within bounds.

Everything here reads the job's ``details/messages`` table and collects only aggregates (at most
``limit`` + 1 rows per list, to tell a truncated list) and drill-down samples (at most
``ids_max`` message ids per finding); figures.py shapes them for the summary.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from reconcile.classify import latency_histogram, latency_stats
from reconcile.figures import DRILL_DOWN_COLUMNS, MALFORMED_LEDGER_COLUMNS, latency_document
from reconcile.outcomes import FINDINGS


def one_row(df: DataFrame) -> dict[str, Any]:
    row = df.first()
    assert row is not None, "a global aggregate has one row"
    return row.asDict()


def level_rows(counts: DataFrame, level: int, order: list[str], limit: int) -> list[dict[str, Any]]:
    """Rows of one grouping level of the cube, at most ``limit`` + 1 (to tell truncation)."""
    rows = counts.where(sf.col("level") == level)
    if order:
        rows = rows.orderBy(*order)
    return [r.asDict() for r in rows.limit(limit + 1).collect()]


def slave_copies(classified: DataFrame) -> int:
    """Records read more than once (a slave's copy of its master's) and counted once."""
    return int(one_row(classified.agg(sf.sum("folded_copies").alias("n")))["n"] or 0)


def latency_summary(classified: DataFrame, limit: int) -> dict[str, Any]:
    stats = [r.asDict() for r in latency_stats(classified).limit(limit + 1).collect()]
    histogram = {int(r["bin"]): int(r["messages"]) for r in latency_histogram(classified).collect()}
    return latency_document(stats, histogram)


def drill_down(
    classified: DataFrame, acks: DataFrame | None, ids_max: int
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for finding in FINDINGS:
        rows = (
            classified.where(sf.col("outcome") == finding)
            .orderBy("event_time_ms", "message_id")
            .select(*DRILL_DOWN_COLUMNS)
            .limit(ids_max)
            .collect()
        )
        out[finding] = [r.asDict() for r in rows]
    duplicated = (
        classified.where(sf.col("duplicated"))
        .orderBy(sf.col("copies").desc(), "message_id")
        .select("outcome", *DRILL_DOWN_COLUMNS)
        .limit(ids_max)
        .collect()
    )
    out["duplicated"] = [r.asDict() for r in duplicated]
    if acks is not None:
        malformed = (
            acks.where(sf.col("malformed"))
            .select(*MALFORMED_LEDGER_COLUMNS)
            .limit(ids_max)
            .collect()
        )
        out["malformed_ledger_lines"] = [r.asDict() for r in malformed]
    return out
