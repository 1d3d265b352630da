"""The classification's merge join (in_process/classify.py's ``_joined``) gives what Arrow's
hash join gives: every id of either side once, with both sides' columns where the id is on both,
nulls where it is on one; a null id matches nothing; an empty side leaves the other's rows."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from reconcile.in_process.classify import _joined

IDS = st.sampled_from([f"01C0FFEE{n:04X}" for n in range(40)])


@st.composite
def sides(draw: st.DrawFn) -> tuple[pa.Table, pa.Table]:
    """Two tables of unique ids (and some null ids), drawn from one small pool so they meet."""
    tables = []
    for column in ("left_value", "right_value"):
        ids: list[str | None] = draw(st.lists(IDS, unique=True, max_size=30))
        ids += [None] * draw(st.integers(0, 2))
        values = draw(st.lists(st.integers(-5, 5), min_size=len(ids), max_size=len(ids)))
        id_column = pa.array(ids, pa.string())
        tables.append(pa.table({"message_id": id_column, column: pa.array(values, pa.int64())}))
    return tables[0], tables[1]


def rows(table: pa.Table) -> list[tuple[object, ...]]:
    """The rows, named columns in a fixed order, sorted (nulls first)."""
    names = ["message_id", "left_value", "right_value"]
    listed = zip(*(table[n].to_pylist() for n in names), strict=True)
    return sorted(listed, key=lambda r: tuple((v is not None, v) for v in r))


@settings(max_examples=300, deadline=None)
@given(sides())
def test_the_merge_join_is_the_full_outer_join(pair: tuple[pa.Table, pa.Table]) -> None:
    left, right = pair
    expected = left.join(right, "message_id", join_type="full outer")
    assert rows(_joined(left, right)) == rows(expected)
