"""The outbox export as a Spark DataFrame: what the sidecars still hold, delivered or gave up on.

The export (outbox/export.py) is JSON lines (``.jsonl``) or Parquet (``.parquet``, a file or a
directory of files), the same columns in both; an outbox URL is exported to Parquet first by the
command line (rocketbox/reconcile_cli.py), the composition root that may open a backend.

Only the columns the classification needs are read (``OUTBOX_COLUMNS``); others are ignored. A
JSON line that does not parse, or a row without a message id or with a state other than
PENDING / DELIVERED / DEAD, is *malformed*: counted, never joined.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql import types as st

from outbox.export import EXPORT_SCHEMA
from reconcile.errors import InputError

ENTRY_STATES = ("PENDING", "DELIVERED", "DEAD")
CORRUPT_RECORD = "_corrupt_record"
JSON_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIX = ".parquet"

# The export's columns that the classification reads. Their types come from outbox/export.py's
# EXPORT_SCHEMA, the export's one definition, so a type changed there is read as changed here.
OUTBOX_COLUMN_NAMES = (
    "message_id",
    "topic",
    "state",
    "cause",
    "maybe_stored",
    "attempts",
    "last_error",
    "created_ms",
    "state_changed_ms",
    "delivered_ms",
)
# The Arrow types the export uses, as Spark reads them (every integer there is int64).
_SPARK_TYPES: dict[str, st.DataType] = {
    "string": st.StringType(),
    "int64": st.LongType(),
    "bool": st.BooleanType(),
}


def _spark_field(name: str) -> st.StructField:
    arrow_type = str(EXPORT_SCHEMA.field(name).type)
    if arrow_type not in _SPARK_TYPES:
        raise TypeError(f"outbox export column {name}: no Spark type for Arrow {arrow_type}")
    return st.StructField(name, _SPARK_TYPES[arrow_type])


OUTBOX_COLUMNS = st.StructType([_spark_field(name) for name in OUTBOX_COLUMN_NAMES])
_JSON_SCHEMA = st.StructType(
    [*OUTBOX_COLUMNS.fields, st.StructField(CORRUPT_RECORD, st.StringType())]
)


def export_kind(path: Path) -> str:
    """ "jsonl" or "parquet", by the name; InputError for anything else or a missing path."""
    if not path.exists():
        raise InputError(f"outbox export {path} does not exist")
    if path.suffix in JSON_SUFFIXES and path.is_file():
        return "jsonl"
    if path.suffix == PARQUET_SUFFIX:
        return "parquet"
    raise InputError(
        f"outbox export {path}: expected a {'/'.join(JSON_SUFFIXES)} file or a "
        f"{PARQUET_SUFFIX} file or directory (or an outbox URL)"
    )


def read_outbox(spark: SparkSession, path: Path) -> DataFrame:
    """Every exported entry: OUTBOX_COLUMNS and ``malformed``."""
    if export_kind(path) == "jsonl":
        raw = (
            spark.read.schema(_JSON_SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_RECORD)
            .json(str(path))
        )
        unparsed = sf.col(CORRUPT_RECORD).isNotNull()
    else:
        raw = spark.read.parquet(str(path))
        missing = [f.name for f in OUTBOX_COLUMNS.fields if f.name not in raw.columns]
        if missing:
            raise InputError(f"outbox export {path} lacks the columns {missing}")
        unparsed = sf.lit(False)
    malformed = (
        unparsed
        | sf.col("message_id").isNull()
        | (sf.length("message_id") == 0)
        | ~sf.coalesce(sf.col("state").isin(*ENTRY_STATES), sf.lit(False))
    )
    columns = [sf.col(f.name).cast(f.dataType).alias(f.name) for f in OUTBOX_COLUMNS.fields]
    return raw.select(*columns, malformed.alias("malformed"))


def outbox_stats(outbox: DataFrame) -> DataFrame:
    """One row: entries, malformed ones, and entries by state."""
    good = ~sf.col("malformed")
    return outbox.agg(
        sf.count(sf.lit(1)).alias("entries"),
        sf.count(sf.when(sf.col("malformed"), 1)).alias("malformed"),
        *(
            sf.count(sf.when(good & (sf.col("state") == state), 1)).alias(state.lower())
            for state in ENTRY_STATES
        ),
    )
