"""Message ids into buckets: how the Spark engine spreads the classification over its tasks.

Every row of every input (a record, a ledger line, an outbox entry) goes to the bucket of its
message id, so one bucket holds all the evidence of each of its ids and is classified alone
(spark_classify.py). The bucket is a hash of the id's last ``HASH_TAIL_BYTES`` bytes (the whole
of any id the clients make) and its length, computed over whole Arrow columns with numpy: no
Python per row, and the same on every machine and in every process (Python's ``hash`` of a
string is salted per process). Every byte counts: ids an application makes may share a long
suffix or prefix (a host name, a topic), and one bucket must not get them all.

A map task writes its rows by bucket as one file (bucket_files.py); small tables (a bucket's
counts, a ledger range's malformed lines) reach the driver as Arrow IPC streams (bytes).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pyarrow as pa

# The id's bytes the hash reads, from its end, as 64-bit words: RocketMQ's ids and the sidecar's
# are 32 or 34 characters, and an id an application makes rarely shares 64 bytes with all others.
HASH_TAIL_BYTES = 64
# Rows hashed at once: the block's gathered bytes and indices (up to 576 B a row) stay small.
HASH_BLOCK_ROWS = 65_536
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)
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
    # No data (every id empty or null): every byte read below is masked out.
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer else np.zeros(1, np.uint8)
    found = np.empty(rows, np.int64)
    for first in range(0, rows, HASH_BLOCK_ROWS):
        last = min(rows, first + HASH_BLOCK_ROWS)
        hashed = _hashed(data, offsets[first:last], offsets[first + 1 : last + 1])
        found[first:last] = (hashed % np.uint64(buckets)).astype(np.int64)
    if array.null_count:
        found[np.asarray(array.is_null().to_numpy(zero_copy_only=False), np.bool_)] = 0
    return found


def _hashed(
    data: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of each id's length and last HASH_TAIL_BYTES bytes (zeros before a shorter
    id's start), read as 64-bit words."""
    lengths = ends - starts
    longest = int(lengths.max())
    # Always the same width, whatever the ids beside: an id's hash must not depend on them.
    width = HASH_TAIL_BYTES
    if (lengths == longest).all():
        # Ids of one length (one producer's, usually) lie as the rows of a matrix: their tails
        # are a slice of it, without a gather.
        matrix = data[int(starts[0]) : int(ends[-1])].reshape(len(starts), longest)
        kept = min(width, longest)
        tail = np.zeros((len(starts), width), np.uint8)
        tail[:, width - kept :] = matrix[:, longest - kept :]
    else:
        at = ends[:, None] - np.arange(width, 0, -1, dtype=np.int64)
        tail = data[np.maximum(at, 0)]
        tail[at < starts[:, None]] = 0
    words = tail.view(np.uint64)
    with np.errstate(over="ignore"):
        hashed = lengths.astype(np.uint64) * _MIX
        for column in range(words.shape[1]):
            hashed ^= words[:, column] * _K1
            hashed = (hashed << np.uint64(31) | hashed >> np.uint64(33)) * _K2
        # A finaliser (MurmurHash3's) so that every bit of the hash moves the bucket.
        hashed ^= hashed >> np.uint64(33)
        hashed *= _MIX
        hashed ^= hashed >> np.uint64(33)
    return hashed


def split(table: pa.Table, buckets: int) -> Iterator[tuple[int, pa.Table]]:
    """The rows of ``table`` bucket by bucket (by its ``message_id``), each non-empty bucket
    once, in bucket order."""
    if not table.num_rows:
        return
    found = bucket_of(table["message_id"], buckets)
    # Small integer keys: numpy's stable sort of 16-bit keys is a radix sort, one pass.
    keys = found.astype(np.uint16) if buckets <= 1 << 16 else found
    order = np.argsort(keys, kind="stable")
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
