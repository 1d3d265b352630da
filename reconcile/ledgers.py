"""Acknowledgement ledgers as a Spark DataFrame: what each sender was told about each message.

The format and what makes a line malformed are input_formats.py's. Several ledgers (several
sidecars or load generators) are read as one.

The lines are parsed by Arrow's JSON reader, as the in-process engine parses them
(in_process/inputs.py's ``read_ledgers``, the one definition of a ledger line as read): each
ledger is cut at line ends into byte ranges (on the driver, reading a few bytes at each cut; a
range is a share of the cores' work, within bounds), and a ``mapInArrow`` task parses each.
Arrow parses in C what Spark's JSON reader parsed row by row in the JVM, and its rules for a
malformed line are Spark's permissive reader's (tests/reconcile/test_engines.py holds the two
engines to it).

The job parses the JSON once: ``normalise_ledgers`` writes the lines as Parquet (the job's
``inputs/acks``), and the statistics, the scope and the classification read that.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql import types as st
from pyspark.sql.pandas.types import from_arrow_schema

from reconcile.errors import InputError
from reconcile.in_process.inputs import line_end_after
from reconcile.in_process.inputs import read_ledgers as read_ledger_range
from reconcile.input_formats import LEDGER_ARROW_SCHEMA, check_ledgers

# Bytes of a ledger one task parses: at most the MAX (about 400k lines), and at least the MIN
# (a task's start stays small beside its work); in between, enough tasks that every core gets
# LEDGER_TASKS_PER_CORE of them (so that no core waits long for the last).
LEDGER_PART_BYTES_MAX = 64 * 1024 * 1024
LEDGER_PART_BYTES_MIN = 8 * 1024 * 1024
LEDGER_TASKS_PER_CORE = 2
# Rows per Arrow batch a ledger task hands to Spark.
LEDGER_BATCH_ROWS_MAX = 65_536
# What a ledger task returns: the columns the classification reads, malformed, the text of a
# malformed line, and the file.
ACKS_ARROW_SCHEMA = pa.schema(
    [
        *(LEDGER_ARROW_SCHEMA.field(c) for c in ("message_id", "topic", "state", "time_ms")),
        LEDGER_ARROW_SCHEMA.field("cause"),
        pa.field("malformed", pa.bool_()),
        pa.field("line", pa.string()),
        pa.field("source", pa.string()),
    ]
)
ACKS_SCHEMA = from_arrow_schema(ACKS_ARROW_SCHEMA)
_RANGES_SCHEMA = st.StructType(
    [
        st.StructField("path", st.StringType(), False),
        st.StructField("start_byte", st.LongType(), False),
        st.StructField("end_byte", st.LongType(), False),
    ]
)


def read_ledgers(
    spark: SparkSession, paths: tuple[Path, ...], part_bytes: int | None = None
) -> DataFrame:
    """Every line of every ledger: the ledger columns, ``malformed``, ``line`` (the text of a
    malformed line, truncated) and ``source`` (the file, as ``file:/abs/path``). ``part_bytes``:
    the bytes a task parses, or None to size the parts for the cores."""
    check_ledgers(paths)
    part_bytes_max = part_bytes or _part_bytes(paths, spark.sparkContext.defaultParallelism)
    rows = [(str(p), start, end) for p in paths for start, end in line_ranges(p, part_bytes_max)]
    # One range per partition, so one task each.
    rdd = spark.sparkContext.parallelize(rows, len(rows))
    return spark.createDataFrame(rdd, _RANGES_SCHEMA).mapInArrow(_parse_ranges, ACKS_SCHEMA)


def _part_bytes(paths: tuple[Path, ...], cores: int) -> int:
    total = sum(p.stat().st_size for p in paths)
    even = -(-total // max(1, LEDGER_TASKS_PER_CORE * cores))
    return min(LEDGER_PART_BYTES_MAX, max(LEDGER_PART_BYTES_MIN, even))


def line_ranges(path: Path, part_bytes_max: int) -> list[tuple[int, int]]:
    """[start, end) byte ranges covering the file, each cut just after a line end (or at the
    file's end), about ``part_bytes_max`` apart; one empty range for an empty file."""
    assert part_bytes_max > 0
    try:
        size = path.stat().st_size
        cuts = [0]
        with path.open("rb") as f:
            while cuts[-1] + part_bytes_max < size:
                cut = line_end_after(f, cuts[-1] + part_bytes_max, size)
                if cut >= size:
                    break
                cuts.append(cut)
    except OSError as e:
        raise InputError(f"cannot read acknowledgement ledger {path}: {e}") from e
    ends = [*cuts[1:], size]
    return list(zip(cuts, ends, strict=True))


def _parse_ranges(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function: the lines of the byte ranges named in ``batches``."""
    for batch in batches:
        for path, start, end in zip(
            *(batch.column(name).to_pylist() for name in _RANGES_SCHEMA.names), strict=True
        ):
            table = read_ledger_range((Path(path),), ((start, end),))
            yield from table.cast(ACKS_ARROW_SCHEMA).to_batches(LEDGER_BATCH_ROWS_MAX)


def normalise_ledgers(spark: SparkSession, paths: tuple[Path, ...], out: Path) -> DataFrame:
    """Parse the ledgers once into Parquet at ``out``; returns the table read back."""
    read_ledgers(spark, paths).write.mode("overwrite").parquet(str(out))
    return spark.read.parquet(str(out))


def ledger_stats(acks: DataFrame) -> DataFrame:
    """Lines per (malformed, topic, state, ambiguous): few rows (topics x states), from which
    figures.summarise_ledger makes the ledger's statistics and the scope: the topics the ledgers
    name, in which a stored message must have been acknowledged (classify.py)."""
    ambiguous = (sf.col("state") == "SPOOLED") & (sf.col("cause") == "AMBIGUOUS")
    return acks.groupBy(
        "malformed",
        sf.when(~sf.col("malformed"), sf.col("topic")).alias("topic"),
        sf.when(~sf.col("malformed"), sf.col("state")).alias("state"),
        sf.coalesce(ambiguous & ~sf.col("malformed"), sf.lit(False)).alias("ambiguous"),
    ).agg(sf.count(sf.lit(1)).alias("lines"))
