"""Message ids into buckets (reconcile/id_buckets.py), as the Spark engine's tasks cut them.

Proves, with hypothesis over arbitrary ids (empty, short, long, non-ASCII, null):
- an id's bucket is in range and depends on the id alone: not on the other ids beside it, nor on
  the array being a slice, a chunked array or a string array of another layout;
- ``split`` hands back every row once, each in its id's bucket, in bucket order;
- Arrow IPC carries a bucket's rows unchanged, and no payload gives the schema's empty table;
and that 64 buckets are filled evenly (each within 5 % of the mean) by a million ids in the
sidecar's format (one producer's: alike but for a counter) and by a million ids an application
made alike but for a number at their start (a long suffix in common, lengths that differ);
and that the Spark engine's bucket count is the one asked for, or a whole number a core, at
least BUCKETS_PER_CORE a core and one per BUCKET_INPUT_BYTES.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconcile.id_buckets import bucket_of, from_ipc, split, to_ipc
from reconcile.spark_classify import BUCKET_INPUT_BYTES, BUCKETS_PER_CORE, bucket_count
from tests.reconcile.testdata import bulk_message_id

ids_lists = st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=60)
bucket_counts = st.integers(min_value=1, max_value=50)


@given(ids=ids_lists, buckets=bucket_counts, cut=st.integers(min_value=0, max_value=60))
def test_a_bucket_depends_on_the_id_alone(ids: list[str | None], buckets: int, cut: int) -> None:
    whole = bucket_of(pa.array(ids, pa.string()), buckets)
    alone = [bucket_of(pa.array([i], pa.string()), buckets)[0] for i in ids]
    assert whole.tolist() == alone
    assert all(0 <= b < buckets for b in whole)
    assert all(b == 0 for b, i in zip(whole, ids, strict=True) if i is None)
    cut = min(cut, len(ids))
    sliced = pa.array(ids, pa.string()).slice(cut)
    assert bucket_of(sliced, buckets).tolist() == whole[cut:].tolist()
    chunked = pa.chunked_array([pa.array(ids[:cut], pa.string()), pa.array(ids[cut:], pa.string())])
    assert bucket_of(chunked, buckets).tolist() == whole.tolist()
    assert bucket_of(pa.array(ids, pa.large_string()), buckets).tolist() == whole.tolist()


@given(ids=ids_lists, buckets=bucket_counts)
def test_split_hands_back_every_row_once_in_its_ids_bucket(
    ids: list[str | None], buckets: int
) -> None:
    table = pa.table({"message_id": pa.array(ids, pa.string()), "row": range(len(ids))})
    found = list(split(table, buckets))
    assert [b for b, _ in found] == sorted({b for b, _ in found})
    rows = []
    for bucket, part in found:
        assert part.num_rows
        assert set(bucket_of(part["message_id"], buckets).tolist()) == {bucket}
        rows += part["row"].to_pylist()
    assert sorted(rows) == list(range(len(ids)))


@given(ids=ids_lists)
def test_ipc_carries_rows_unchanged(ids: list[str | None]) -> None:
    table = pa.table({"message_id": pa.array(ids, pa.string()), "n": range(len(ids))})
    half = len(ids) // 2
    payloads = [to_ipc(table.slice(0, half)), to_ipc(table.slice(half))]
    assert from_ipc(payloads, table.schema).equals(table)
    assert from_ipc([], table.schema).equals(table.schema.empty_table())


@pytest.mark.parametrize(
    "make_id",
    [bulk_message_id, lambda i: f"{i}@orders-service.prod.example.internal:8080/producer"],
    ids=["sidecar", "shared suffix"],
)
def test_ids_alike_fill_the_buckets_evenly(make_id: Callable[[int], str]) -> None:
    ids = pa.array([make_id(i) for i in range(1_000_000)], pa.string())
    per_bucket = np.bincount(bucket_of(ids, 64), minlength=64)
    mean = len(ids) / 64
    assert per_bucket.min() >= 0.95 * mean, per_bucket.tolist()
    assert per_bucket.max() <= 1.05 * mean, per_bucket.tolist()


@given(
    input_bytes=st.integers(min_value=0, max_value=1 << 45),
    cores=st.integers(min_value=0, max_value=64),
)
def test_buckets_are_a_whole_number_a_core(input_bytes: int, cores: int) -> None:
    buckets = bucket_count(input_bytes, cores, None)
    assert buckets % max(1, cores) == 0
    assert buckets >= BUCKETS_PER_CORE * max(1, cores)
    assert buckets * BUCKET_INPUT_BYTES >= input_bytes
    assert buckets - max(1, cores) < max(
        BUCKETS_PER_CORE * max(1, cores), -(-input_bytes // BUCKET_INPUT_BYTES)
    )
    assert bucket_count(input_bytes, cores, 7) == 7
