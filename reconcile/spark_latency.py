"""The Spark engine's delivery latency figures: one aggregation over ``details/messages``.

The percentiles are Spark's ``percentile_approx``, per topic (at most ``limit`` + 1) and in total,
with the total's histogram, in one job; figures.py shapes them for the summary. Everything else
the Spark engine reports comes from its tasks (spark_classify.py).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from reconcile.figures import latency_document
from reconcile.outcomes import LATENCY_BIN_EDGES_MS, LATENCY_PERCENTILES


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


def latency_bin() -> Column:
    """The histogram bin of a message's delivery latency: 0 below LATENCY_BIN_EDGES_MS[0] …"""
    latency = sf.col("delivery_latency_ms")
    return sum(
        (sf.when(latency >= edge, 1).otherwise(0) for edge in LATENCY_BIN_EDGES_MS), sf.lit(0)
    )


def histogram_column(bin_index: int) -> str:
    return f"bin_{bin_index}"


def latency_stats(messages: DataFrame) -> DataFrame:
    """Per topic and in total (topic null): count, percentiles and max of delivery latency, and
    the messages in each histogram bin (``histogram_column``), all in one pass."""
    latency = sf.col("delivery_latency_ms")
    with_bin = messages.where(latency.isNotNull()).select(
        "topic", "delivery_latency_ms", latency_bin().alias("bin")
    )
    bins = range(len(LATENCY_BIN_EDGES_MS) + 1)
    return with_bin.rollup("topic").agg(
        sf.grouping_id().alias("level"),
        sf.count(sf.lit(1)).alias("messages"),
        sf.percentile_approx(latency, list(LATENCY_PERCENTILES)).alias("percentiles_ms"),
        sf.max(latency).alias("max_ms"),
        *(sf.count(sf.when(sf.col("bin") == b, 1)).alias(histogram_column(b)) for b in bins),
    )
