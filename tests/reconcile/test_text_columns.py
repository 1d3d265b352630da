"""The scan's text columns (broker/store/codec/text_columns.py) and the Arrow arrays the
reconciliation makes of them (reconcile/segment_scan.py), with hypothesis:

- a column of any strings and absent values reads back as those values, cut (``head``) or joined
  to another (``concat``), and Arrow's array of it holds the same values, absent ones null;
- ``utf8_prefix`` counts the values that decode, up to the first that does not, on any bytes
  cut anywhere (an ASCII buffer in one check, any other value by value);
- a coded column reads back as its names, joined to another with names of its own.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from broker.store.codec.text_columns import CodedColumn, TextColumn, utf8_prefix
from reconcile.segment_scan import string_array

values_lists = st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=40)


@given(values=values_lists, more=values_lists, cut=st.integers(0, 40))
def test_a_text_column_reads_back_its_values_cut_and_joined(
    values: list[str | None], more: list[str | None], cut: int
) -> None:
    column = TextColumn.of(values)
    cut = min(cut, len(values))

    assert column.tolist() == values
    assert column.head(cut).tolist() == values[:cut]
    assert column.concat(TextColumn.of(more)).tolist() == values + more
    assert string_array(column.concat(TextColumn.of(more))).to_pylist() == values + more
    assert string_array(column).null_count == values.count(None)


@given(pieces=st.lists(st.binary(max_size=6), max_size=30))
def test_utf8_prefix_counts_the_values_before_the_first_that_does_not_decode(
    pieces: list[bytes],
) -> None:
    data = np.frombuffer(b"".join(pieces), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(np.int64)

    def decodes(piece: bytes) -> bool:
        try:
            piece.decode()
        except UnicodeDecodeError:
            return False
        return True

    expected = next((i for i, p in enumerate(pieces) if not decodes(p)), len(pieces))
    assert utf8_prefix(data, offsets) == expected


def test_a_value_cut_inside_a_character_does_not_decode_though_the_buffer_does() -> None:
    # "é" is two bytes: cut between them, the buffer is UTF-8 and neither value is.
    data = np.frombuffer("é".encode(), np.uint8)
    assert utf8_prefix(data, np.asarray([0, 1, 2], np.int64)) == 0


@given(
    names=st.lists(st.text(max_size=8), min_size=1, max_size=5, unique=True),
    more=st.lists(st.text(max_size=8), min_size=1, max_size=5, unique=True),
    data=st.data(),
)
def test_a_coded_column_reads_back_its_names_joined_to_another(
    names: list[str], more: list[str], data: st.DataObject
) -> None:
    codes = data.draw(st.lists(st.integers(0, len(names) - 1), max_size=20))
    other = data.draw(st.lists(st.integers(0, len(more) - 1), max_size=20))
    a = CodedColumn(np.asarray(codes, np.int32), names)
    b = CodedColumn(np.asarray(other, np.int32), more)

    assert a.tolist() == [names[c] for c in codes]
    assert a.concat(b).tolist() == [names[c] for c in codes] + [more[c] for c in other]
    assert a.head(len(codes) // 2).tolist() == [names[c] for c in codes[: len(codes) // 2]]
