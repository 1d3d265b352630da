"""Acknowledgement ledgers as a Spark DataFrame: what each sender was told about each message.

The format and what makes a line malformed are input_formats.py's. Several ledgers (several
sidecars or load generators) are read as one.

The job parses the JSON once: ``normalise_ledgers`` writes the lines as Parquet (the job's
``inputs/acks``), and the statistics, the scope and the classification read that.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql import types as st
from pyspark.sql.pandas.types import from_arrow_schema

from reconcile.input_formats import (
    ACK_STATES,
    LEDGER_ARROW_SCHEMA,
    MALFORMED_TEXT_CHARS_MAX,
    check_ledgers,
)

CORRUPT_RECORD = "_corrupt_record"

LEDGER_SCHEMA = st.StructType(
    [
        *from_arrow_schema(LEDGER_ARROW_SCHEMA).fields,
        st.StructField(CORRUPT_RECORD, st.StringType()),
    ]
)


def read_ledgers(spark: SparkSession, paths: tuple[Path, ...]) -> DataFrame:
    """Every line of every ledger: the ledger columns, ``malformed``, ``line`` (the text of a
    malformed line, truncated) and ``source`` (the file)."""
    check_ledgers(paths)
    raw = (
        spark.read.schema(LEDGER_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_RECORD)
        .json([str(p) for p in paths])
    )
    malformed = (
        sf.col(CORRUPT_RECORD).isNotNull()
        | sf.col("message_id").isNull()
        | (sf.length("message_id") == 0)
        | sf.col("topic").isNull()
        | sf.col("time_ms").isNull()
        | ~sf.coalesce(sf.col("state").isin(*ACK_STATES), sf.lit(False))
    )
    return raw.select(
        "message_id",
        "topic",
        "state",
        "time_ms",
        "cause",
        malformed.alias("malformed"),
        sf.substring(CORRUPT_RECORD, 1, MALFORMED_TEXT_CHARS_MAX).alias("line"),
        sf.col("_metadata.file_path").alias("source"),
    )


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
