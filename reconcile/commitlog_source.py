"""The commitlog as a Spark DataFrame: one task per segment file, scanned by segment_scan.py.

Segments are listed on the driver (names and sizes only); each becomes one Spark partition, and
``mapInArrow`` runs ``scan_partition`` on it in a Python worker, which hands the segment's kept
records (segment_scan.py says which) to Spark as Arrow batches. Nothing per record passes through
the driver.

Each segment's counts reach the driver through a Spark accumulator keyed by the segment's
directory (its index among the commitlogs read) and start offset, so a task run twice (a retry, a
recomputed stage) reports the same numbers once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as st
from pyspark.sql.pandas.types import from_arrow_schema

from reconcile.segment_scan import (
    COMMITLOG_ARROW_SCHEMA,
    SCAN_BATCH_RECORDS_MAX,
    Segment,
    SegmentStats,
    scan_segment,
)

COMMITLOG_SCHEMA = from_arrow_schema(COMMITLOG_ARROW_SCHEMA)
_SEGMENTS_SCHEMA = st.StructType(
    [
        st.StructField("path", st.StringType(), False),
        st.StructField("file_from_offset", st.LongType(), False),
        st.StructField("source", st.IntegerType(), False),
    ]
)
# What the scan tasks' accumulator is keyed by: (source, file_from_offset).
StatsKey = tuple[int, int]


class _SegmentStatsParam(AccumulatorParam[dict[StatsKey, dict[str, Any]]]):
    """Merges per-segment stats by (source, start offset): a segment scanned twice counts once."""

    def zero(self, value: dict[StatsKey, dict[str, Any]]) -> dict[StatsKey, dict[str, Any]]:
        return {}

    def addInPlace(  # noqa: N802 - pyspark's name
        self, value1: dict[StatsKey, dict[str, Any]], value2: dict[StatsKey, dict[str, Any]]
    ) -> dict[StatsKey, dict[str, Any]]:
        value1.update(value2)
        return value1


def stats_accumulator(spark: SparkSession) -> Accumulator[dict[StatsKey, dict[str, Any]]]:
    return spark.sparkContext.accumulator({}, _SegmentStatsParam())


def scan_commitlog(
    spark: SparkSession,
    segments: list[Segment],
    stats: Accumulator[dict[StatsKey, dict[str, Any]]],
    batch_records_max: int = SCAN_BATCH_RECORDS_MAX,
) -> DataFrame:
    """The records of every segment (COMMITLOG_SCHEMA), one Spark partition per segment."""
    rows = [(str(s.path), s.file_from_offset, s.source) for s in segments]
    # parallelize with one slice per element: exactly one segment per partition, so one task.
    rdd = spark.sparkContext.parallelize(rows, len(rows))
    paths = spark.createDataFrame(rdd, _SEGMENTS_SCHEMA)
    scan = functools.partial(scan_partition, stats, batch_records_max)
    return paths.mapInArrow(scan, COMMITLOG_SCHEMA)


def scan_partition(
    stats: Accumulator[dict[StatsKey, dict[str, Any]]],
    batch_records_max: int,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function: scan the segments named in ``batches`` (runs on an executor)."""
    for batch in batches:
        for path, from_offset, source in zip(
            batch.column("path").to_pylist(),
            batch.column("file_from_offset").to_pylist(),
            batch.column("source").to_pylist(),
            strict=True,
        ):
            found = SegmentStats(Path(path).name, from_offset, source)
            yield from scan_segment(Path(path), found, batch_records_max)
            stats.add({(source, from_offset): asdict(found)})
