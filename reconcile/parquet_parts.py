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


def emptied(directory: Path) -> Path:
    """``directory``, made empty (as Spark's overwrite mode leaves it before a write)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    return directory


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def write_part(table: pa.Table, directory: Path, index: int) -> Path:
    """Write ``table`` as the directory's part ``index``, whole or not at all."""
    final = directory / part_name(index)
    hidden = directory / f".{final.name}.{uuid.uuid4().hex}"
    try:
        pq.write_table(table, hidden)
        os.replace(hidden, final)
    finally:
        hidden.unlink(missing_ok=True)
    return final
