"""The Spark engine's figures: aggregates of the classified messages, collected within bounds.

Everything here reads the job's ``details/messages`` table and collects only aggregates (at most
``limit`` + 1 rows per list, to tell a truncated list) and drill-down samples (at most
``ids_max`` message ids per finding); figures.py shapes them for the summary.

Each Spark job costs a fixed few hundred milliseconds, so the figures take few: the counts of
every level (and the slave copies) are one aggregation, written and then collected in one job
(a row number per level bounds what is collected); the latency figures and their histogram are
one aggregation; the drill-down of every finding is one job (a row number per finding).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as sf

from reconcile.classify import histogram_column, latency_stats
from reconcile.figures import DRILL_DOWN_COLUMNS, MALFORMED_LEDGER_COLUMNS, latency_document
from reconcile.outcomes import FINDINGS, LATENCY_BIN_EDGES_MS

LEVEL_TOPIC_BUCKET, LEVEL_TOPIC, LEVEL_BUCKET, LEVEL_TOTAL = 0, 1, 2, 3
_RANK = "_rank"
_DUPLICATED = "duplicated"


def one_row(df: DataFrame) -> dict[str, Any]:
    row = df.first()
    assert row is not None, "a global aggregate has one row"
    return row.asDict()


def level_rows(counts: DataFrame, limit: int) -> dict[int, list[dict[str, Any]]]:
    """The rows of every grouping level of the cube, at most ``limit`` + 1 each (to tell
    truncation), in one job: each level in (bucket_start_ms, topic) order, which is topic order
    for the per-topic level and bucket order for the per-bucket one (the other key is null)."""
    order = Window.partitionBy("level").orderBy(
        sf.col("bucket_start_ms").asc_nulls_first(), sf.col("topic").asc_nulls_first()
    )
    ranked = counts.withColumn(_RANK, sf.row_number().over(order))
    rows = ranked.where(sf.col(_RANK) <= limit + 1).collect()
    out: dict[int, list[dict[str, Any]]] = {
        level: [] for level in (LEVEL_TOPIC_BUCKET, LEVEL_TOPIC, LEVEL_BUCKET, LEVEL_TOTAL)
    }
    for r in sorted(rows, key=lambda r: (r["level"], r[_RANK])):
        row = r.asDict()
        del row[_RANK]
        out[row["level"]].append(row)
    return out


def latency_summary(classified: DataFrame, limit: int) -> dict[str, Any]:
    """summary.json's ``delivery_latency``: per topic (at most ``limit`` + 1) and in total, its
    histogram from the total's bins; one job."""
    bins = range(len(LATENCY_BIN_EDGES_MS) + 1)
    stats = [r.asDict() for r in latency_stats(classified).limit(limit + 1).collect()]
    total = next((r for r in stats if r["level"] == 1), None)
    histogram = {}
    if total is not None:
        histogram = {b: int(total[histogram_column(b)]) for b in bins}
        histogram = {b: n for b, n in histogram.items() if n}
    return latency_document(stats, histogram)


def drill_down(
    classified: DataFrame, acks: DataFrame | None, ids_max: int
) -> dict[str, list[dict[str, Any]]]:
    """Per finding, the first ``ids_max`` messages by event time (then id); the most copied
    duplicated messages; the first malformed ledger lines when ``acks`` is given."""
    findings = classified.where(sf.col("outcome").isin(*FINDINGS)).select(
        sf.col("outcome").alias("_finding"),
        sf.col("event_time_ms").alias("_key"),
        "outcome",
        *DRILL_DOWN_COLUMNS,
    )
    duplicated = classified.where(sf.col("duplicated")).select(
        sf.lit(_DUPLICATED).alias("_finding"),
        (-sf.col("copies")).cast("long").alias("_key"),
        "outcome",
        *DRILL_DOWN_COLUMNS,
    )
    rows = _first_per_group(findings.unionByName(duplicated), "_finding", ids_max)
    out: dict[str, list[dict[str, Any]]] = {finding: [] for finding in FINDINGS}
    out[_DUPLICATED] = []
    for r in rows:
        finding = r["_finding"]
        columns = ("outcome", *DRILL_DOWN_COLUMNS) if finding == _DUPLICATED else DRILL_DOWN_COLUMNS
        out[finding].append({c: r[c] for c in columns})
    if acks is not None:
        malformed = (
            acks.where(sf.col("malformed"))
            .select(*MALFORMED_LEDGER_COLUMNS)
            .limit(ids_max)
            .collect()
        )
        out["malformed_ledger_lines"] = [r.asDict() for r in malformed]
    return out


def _first_per_group(rows: DataFrame, group: str, per_group_max: int) -> list[Any]:
    """The first ``per_group_max`` rows of each group by (``_key``, message_id), in that order."""
    order: list[Column] = [sf.col("_key").asc_nulls_first(), sf.col("message_id")]
    ranked = rows.withColumn(_RANK, sf.row_number().over(Window.partitionBy(group).orderBy(*order)))
    picked = ranked.where(sf.col(_RANK) <= per_group_max).collect()
    return sorted(picked, key=lambda r: (r[group], r[_RANK]))
