"""A map task's rows by bucket as one file (reconcile/bucket_files.py), as the Spark engine's
classification hands them from the tasks that read the inputs to the tasks that classify.

Proves, with hypothesis over arbitrary ids and tables cut in several:
- every row written comes back once, in its id's bucket, and the buckets' batches together are
  exactly the rows written;
- a file written again (a retried task) is replaced whole, with nothing else left beside it, and
  rows read before the replacement stay readable;
- no refs read as the schema's empty table.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconcile.bucket_files import read_buckets, write_buckets
from reconcile.id_buckets import bucket_of

SCHEMA = pa.schema([pa.field("message_id", pa.string()), pa.field("row", pa.int64())])
ids_lists = st.lists(st.one_of(st.none(), st.text(max_size=20)), max_size=80)


def table(ids: list[str | None], first_row: int = 0) -> pa.Table:
    rows = list(range(first_row, first_row + len(ids)))
    return pa.table({"message_id": pa.array(ids, pa.string()), "row": rows}, SCHEMA)


def rows_of(found: pa.Table) -> list[tuple[str | None, int]]:
    return sorted(zip(found["message_id"].to_pylist(), found["row"].to_pylist(), strict=True),
                  key=lambda r: r[1])  # fmt: skip


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(
    ids=ids_lists,
    buckets=st.integers(min_value=1, max_value=12),
    cut=st.integers(min_value=0, max_value=80),
)
def test_every_row_comes_back_once_in_its_bucket(
    tmp_path: Path, ids: list[str | None], buckets: int, cut: int
) -> None:
    cut = min(cut, len(ids))
    tables = [table(ids[:cut]), table(ids[cut:], cut)]
    path = tmp_path / "part.arrow"

    refs = write_buckets(tables, SCHEMA, path, buckets)

    every: list[tuple[str | None, int]] = []
    for bucket, ref in refs.items():
        found = read_buckets([ref], SCHEMA)
        assert found.num_rows > 0
        assert set(bucket_of(found["message_id"], buckets).tolist()) == {bucket}
        every += rows_of(found)
    assert sorted(every, key=lambda r: r[1]) == rows_of(table(ids))
    assert read_buckets(refs.values(), SCHEMA).num_rows == len(ids)
    assert [p.name for p in tmp_path.iterdir()] == ["part.arrow"]


def test_a_file_written_again_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "part.arrow"
    first = write_buckets([table(["a", "b", "c"])], SCHEMA, path, 1)
    before = read_buckets(first.values(), SCHEMA)

    again = write_buckets([table(["x", "y"], 10)], SCHEMA, path, 1)

    assert rows_of(read_buckets(again.values(), SCHEMA)) == [("x", 10), ("y", 11)]
    # A reader that had mapped the first file still reads it: the rename left its rows alone.
    assert rows_of(before) == [("a", 0), ("b", 1), ("c", 2)]
    assert Counter(p.name for p in tmp_path.iterdir()) == Counter(["part.arrow"])


def test_no_refs_read_as_the_empty_table(tmp_path: Path) -> None:
    assert read_buckets([], SCHEMA) == SCHEMA.empty_table()
    assert write_buckets([table([])], SCHEMA, tmp_path / "none.arrow", 4) == {}
