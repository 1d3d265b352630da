"""The outbox export as a Spark DataFrame: what the sidecars still hold, delivered or gave up on.

The format and what makes an entry malformed are input_formats.py's; an outbox URL is exported
to Parquet first by the command line (rocketbox/reconcile_cli.py), the composition root that may
open a backend.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql import types as st

from reconcile.errors import InputError
from reconcile.input_formats import ENTRY_STATES, OUTBOX_ARROW_SCHEMA, export_kind

CORRUPT_RECORD = "_corrupt_record"
# The Arrow types the export uses, as Spark reads them (every integer there is int64).
_SPARK_TYPES: dict[str, st.DataType] = {
    "string": st.StringType(),
    "int64": st.LongType(),
    "bool": st.BooleanType(),
}


def _spark_field(field: pa.Field) -> st.StructField:
    if str(field.type) not in _SPARK_TYPES:
        raise TypeError(f"outbox export column {field.name}: no Spark type for Arrow {field.type}")
    return st.StructField(field.name, _SPARK_TYPES[str(field.type)])


OUTBOX_COLUMNS = st.StructType([_spark_field(f) for f in OUTBOX_ARROW_SCHEMA])
_JSON_SCHEMA = st.StructType(
    [*OUTBOX_COLUMNS.fields, st.StructField(CORRUPT_RECORD, st.StringType())]
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
