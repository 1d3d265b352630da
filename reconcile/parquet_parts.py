"""Parquet directories written part by part by Spark's tasks themselves (with pyarrow).

A task writes its part under a hidden name and renames it into place, so a reader never sees a
half-written part, and a task run twice (a retry, a speculative copy) replaces its own part with
the same rows. Readers (Spark's and pyarrow's) skip names that begin with a dot.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# Columns that hold a value of their own on (nearly) every row: a dictionary of them is built,
# found too large and dropped, page by page. Every other string column (topics, states, causes,
# the ledger's file) repeats a few values, which a dictionary stores once. Profiled, a dictionary
# tried on every column made writing details/messages slower and its files larger than
# dictionaries only where values repeat (docs/benchmarks.md).
# Nor are their statistics (a row group's least and greatest value) kept: a part holds a bucket
# of hashed ids, so its least and greatest id span nearly every id and prune no read, and
# computing them was a large share of writing a job's inputs/acks.
UNIQUE_VALUE_COLUMNS = frozenset({"message_id", "line"})


def emptied(directory: Path) -> Path:
    """``directory``, made empty (as Spark's overwrite mode leaves it before a write)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    return directory


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def write_directory(table: pa.Table, directory: Path) -> Path:
    """A Parquet directory of one part, ``table``, replaced whole (as Spark's overwrite does)."""
    return write_part(table, emptied(directory), 0)


def write_part(table: pa.Table, directory: Path, index: int) -> Path:
    """Write ``table`` as the directory's part ``index``, one row group, whole or not at all."""
    final = directory / part_name(index)
    hidden = directory / f".{final.name}.{uuid.uuid4().hex}"
    schema = table.schema
    try:
        with pq.ParquetWriter(
            hidden,
            schema,
            use_dictionary=dictionary_columns(schema),
            write_statistics=[f.name for f in schema if f.name not in UNIQUE_VALUE_COLUMNS],
        ) as writer:
            writer.write_table(table, row_group_size=max(1, table.num_rows))
        os.replace(hidden, final)
    finally:
        hidden.unlink(missing_ok=True)
    return final


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The string columns whose values repeat: the ones worth a dictionary."""
    return [
        f.name
        for f in schema
        if (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
        and f.name not in UNIQUE_VALUE_COLUMNS
    ]
