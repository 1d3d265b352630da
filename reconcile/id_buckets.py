"""Message ids into buckets: how the Spark engine spreads the classification over its tasks.

Every row of every input (a record, a ledger line, an outbox entry) goes to the bucket of its
message id, so one bucket holds all the evidence of each of its ids and is classified alone
(spark_classify.py). The bucket is a hash of the id's last ``HASH_TAIL_BYTES`` bytes and its
length, computed over whole Arrow columns with numpy: no Python per row, and the same on every
machine and in every process (Python's ``hash`` of a string is salted per process).

A bucket's rows cross Spark's shuffle as one Arrow IPC stream (bytes): Spark moves a few large
opaque values instead of converting every row to its own format and back.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pyarrow as pa

# The id's bytes the hash reads, from its end: an id's end changes fastest (RocketMQ's ids and
# the sidecar's end in a time and a sequence number), and reading more costs a pass each.
HASH_TAIL_BYTES = 16
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_MIX = np.uint64(0xFF51AFD7ED558CCD)


def bucket_of(ids: pa.Array | pa.ChunkedArray, buckets: int) -> npt.NDArray[np.int64]:
    """The bucket (0 .. ``buckets`` - 1) of each id; a null id's is 0."""
    assert buckets >= 1
    array = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    array = array.cast(pa.binary())
    rows = len(array)
    _, offsets_buffer, data_buffer = array.buffers()
    if rows == 0:
        return np.zeros(0, np.int64)
    offsets = np.frombuffer(offsets_buffer, np.int32, rows + 1, array.offset * 4).astype(np.int64)
    starts, ends = offsets[:-1], offsets[1:]
    # No data buffer: every id is empty (the reads below then read nothing of it).
    data = np.zeros(1, np.uint8) if data_buffer is None else np.frombuffer(data_buffer, np.uint8)
    hashed = np.full(rows, _FNV_OFFSET, np.uint64)
    with np.errstate(over="ignore"):
        for back in range(1, HASH_TAIL_BYTES + 1):
            at = ends - back
            inside = at >= starts
            if not inside.any():
                break
            byte = data[np.where(inside, at, 0)].astype(np.uint64)
            hashed = np.where(inside, (hashed ^ byte) * _FNV_PRIME, hashed)
        hashed ^= (ends - starts).astype(np.uint64)
        # A finaliser (MurmurHash3's) so that every bit of the hash moves the bucket.
        hashed ^= hashed >> np.uint64(33)
        hashed *= _MIX
        hashed ^= hashed >> np.uint64(33)
    found = (hashed % np.uint64(buckets)).astype(np.int64)
    if array.null_count:
        found[np.asarray(array.is_null().to_numpy(zero_copy_only=False), np.bool_)] = 0
    return found


def split(table: pa.Table, buckets: int) -> Iterator[tuple[int, pa.Table]]:
    """The rows of ``table`` bucket by bucket (by its ``message_id``), each non-empty bucket
    once, in bucket order."""
    if not table.num_rows:
        return
    found = bucket_of(table["message_id"], buckets)
    order = np.argsort(found, kind="stable")
    ordered = table.take(pa.array(order))
    counts = np.bincount(found, minlength=buckets)
    start = 0
    for bucket in np.flatnonzero(counts).tolist():
        count = int(counts[bucket])
        yield bucket, ordered.slice(start, count)
        start += count


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(payloads: list[bytes], schema: pa.Schema) -> pa.Table:
    """The tables of ``payloads`` as one (``schema``'s, empty when there are none)."""
    tables = [pa.ipc.open_stream(p).read_all() for p in payloads]
    return pa.concat_tables(tables) if tables else schema.empty_table()
