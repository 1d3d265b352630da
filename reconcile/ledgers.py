"""Acknowledgement ledgers as a Spark DataFrame: what each sender was told about each message.

A ledger is JSON lines, one acknowledgement a line, as the sidecar writes it (sidecar/ledger.py:
the STORED and SPOOLED answers it sent, which is what the ledger can and cannot prove) and as
test and bench load generators write it (tests/reconcile/testdata.py)::

    {"message_id", "topic", "state": "STORED"|"SPOOLED", "time_ms",
     "queue_id", "queue_offset", "durable"}            (STORED)
    {"message_id", "topic", "state": "SPOOLED", "time_ms", "cause"}   (SPOOLED)

Lines are read with a fixed schema (fields not named here are ignored). A line that is not JSON
(a crash may tear the last one), or lacks a message id, topic or time, or has another state, is
*malformed*: counted, shown in the drill-down, never joined.
Several ledgers (several sidecars or load generators) are read as one.

The job parses the JSON once: ``normalise_ledgers`` writes the lines as Parquet (the job's
``inputs/acks``), and the statistics, the scope and the classification read that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql import types as st

from reconcile.errors import InputError

ACK_STATES = ("STORED", "SPOOLED")
CORRUPT_RECORD = "_corrupt_record"
# Characters of a malformed line kept for the drill-down.
MALFORMED_TEXT_CHARS_MAX = 200

LEDGER_SCHEMA = st.StructType(
    [
        st.StructField("message_id", st.StringType()),
        st.StructField("topic", st.StringType()),
        st.StructField("state", st.StringType()),
        st.StructField("time_ms", st.LongType()),
        st.StructField("queue_id", st.IntegerType()),
        st.StructField("queue_offset", st.LongType()),
        st.StructField("durable", st.BooleanType()),
        st.StructField("cause", st.StringType()),
        st.StructField(CORRUPT_RECORD, st.StringType()),
    ]
)


def check_ledgers(paths: tuple[Path, ...]) -> None:
    for path in paths:
        if not path.is_file():
            raise InputError(f"acknowledgement ledger {path} is not a readable file")


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
    ``summarise_ledger`` makes the ledger's statistics and the scope: the topics the ledgers
    name, in which a stored message must have been acknowledged (classify.py)."""
    ambiguous = (sf.col("state") == "SPOOLED") & (sf.col("cause") == "AMBIGUOUS")
    return acks.groupBy(
        "malformed",
        sf.when(~sf.col("malformed"), sf.col("topic")).alias("topic"),
        sf.when(~sf.col("malformed"), sf.col("state")).alias("state"),
        sf.coalesce(ambiguous & ~sf.col("malformed"), sf.lit(False)).alias("ambiguous"),
    ).agg(sf.count(sf.lit(1)).alias("lines"))


def summarise_ledger(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``ledger_stats`` rows as totals and the sorted scope topics."""

    def lines(**match: Any) -> int:
        return sum(r["lines"] for r in rows if all(r[k] == v for k, v in match.items()))

    return {
        "lines": lines(),
        "malformed": lines(malformed=True),
        "stored": lines(malformed=False, state="STORED"),
        "spooled": lines(malformed=False, state="SPOOLED"),
        "spooled_ambiguous": lines(malformed=False, ambiguous=True),
        "topics": sorted({r["topic"] for r in rows if not r["malformed"]}),
    }
