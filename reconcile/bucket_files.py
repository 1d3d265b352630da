"""A map task's rows, bucket of ids by bucket, as one Arrow IPC file: how the Spark engine's
classification hands rows from the tasks that read the inputs to the tasks that classify them.

A map task (a part of a segment, a ledger's range, the outbox export) cuts its rows into buckets
of message ids (id_buckets.py) and writes them as the record batches of one IPC file in the
job's exchange directory, under ``--out``; it hands Spark's shuffle only, for each bucket, the
file and the batches in it. The task of a bucket maps the files read-only and takes its batches
without a copy. Spark moved the rows itself before (each bucket's rows as one value): its shuffle
wrote them, read them back and piped them through its JVM twice, a sizeable share of a large
job's CPU spent on the JVM's task threads (docs/benchmarks.md). The files are
on the volume every executor shares with the driver, as the job's other outputs are (session.py).

A file is written under a hidden name and renamed, so a task run twice (a retry, a speculative
copy) replaces its own file with the same rows, and a reader never sees half a file. The
exchange directory is removed when the classification ends.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from reconcile.id_buckets import split

# Where, under the job's --out, the map tasks' files are while the classification runs.
EXCHANGE_DIR_NAME = ".exchange"
# (the file, its record batches of one bucket)
BucketRef = tuple[str, tuple[int, ...]]


def write_buckets(
    tables: Iterable[pa.Table], schema: pa.Schema, path: Path, buckets: int
) -> dict[int, BucketRef]:
    """Every row of ``tables`` (of ``schema``), bucket by bucket, as record batches of the IPC
    file ``path``, whole or not at all; each non-empty bucket's batches in it."""
    by_bucket = (found for table in tables for found in split(table, buckets))
    return write_split(by_bucket, schema, path)


def write_split(
    by_bucket: Iterable[tuple[int, pa.Table]], schema: pa.Schema, path: Path
) -> dict[int, BucketRef]:
    """Rows already cut into buckets, (bucket, rows of ``schema``), as ``write_buckets``
    writes them."""
    hidden = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    batches_of: dict[int, list[int]] = {}
    written = 0
    try:
        with pa.OSFile(str(hidden), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for bucket, rows in by_bucket:
                for batch in rows.to_batches():
                    writer.write_batch(batch)
                    batches_of.setdefault(bucket, []).append(written)
                    written += 1
        os.replace(hidden, path)
    finally:
        hidden.unlink(missing_ok=True)
    return {bucket: (str(path), tuple(found)) for bucket, found in batches_of.items()}


def read_buckets(refs: Iterable[BucketRef], schema: pa.Schema) -> pa.Table:
    """The batches ``refs`` name, as one table of ``schema`` (empty when they are none), in the
    order of the files' names. The files are mapped: the batches are read without a copy, and
    the mapping lives as long as the table does."""
    batches: list[pa.RecordBatch] = []
    for path, indices in sorted(refs):
        reader = pa.ipc.open_file(pa.memory_map(path))
        batches.extend(reader.get_batch(i) for i in indices)
    return pa.Table.from_batches(batches, schema)
