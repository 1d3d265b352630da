"""chaos/unsynced.py, what a file holds beyond its last fsync, over a real backing file:

- whatever the writes and truncations since the sync, the file reads as a plain file given the
  same calls would (sizes, zeros where a truncation cut and the file grew again);
- the backing file is untouched until ``write_back``, and afterwards reads exactly the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.unsynced import PAGE_BYTES, UnsyncedFile

SIZE_MAX = 5 * PAGE_BYTES

offsets = st.integers(0, SIZE_MAX)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), offsets, st.binary(min_size=1, max_size=2 * PAGE_BYTES)),
        st.tuples(st.just("truncate"), offsets, st.just(b"")),
    ),
    max_size=12,
)


@contextmanager
def backing(path: Path, content: bytes) -> Iterator[int]:
    path.write_bytes(content)
    fd = os.open(path, os.O_RDWR)
    try:
        yield fd
    finally:
        os.close(fd)


def apply(model: bytearray, op: str, offset: int, data: bytes) -> None:
    if op == "write":
        if offset > len(model):
            model.extend(bytes(offset - len(model)))
        model[offset : offset + len(data)] = data
    elif offset < len(model):
        del model[offset:]
    else:
        model.extend(bytes(offset - len(model)))


@settings(max_examples=200, deadline=None)
@given(synced=st.binary(max_size=3 * PAGE_BYTES), steps=ops, read_at=offsets)
def test_it_reads_as_a_plain_file_and_writes_back_the_same(
    tmp_path_factory: pytest.TempPathFactory,
    synced: bytes,
    steps: list[tuple[str, int, bytes]],
    read_at: int,
) -> None:
    path = tmp_path_factory.getbasetemp() / "unsynced"
    with backing(path, synced) as fd:
        state = UnsyncedFile(len(synced))
        model = bytearray(synced)
        for op, offset, data in steps:
            apply(model, op, offset, data)
            if op == "write":
                state.write(fd, offset, data)
            else:
                state.truncate(offset)
            assert state.size == len(model)
        assert state.read(fd, 0, SIZE_MAX * 2) == bytes(model)
        assert state.read(fd, read_at, 777) == bytes(model[read_at : read_at + 777])
        assert path.read_bytes() == synced, "the backing file changed before the sync"
        state.write_back(fd)
        assert path.read_bytes() == bytes(model)
        assert not state.pages
        assert state.read(fd, 0, SIZE_MAX * 2) == bytes(model)
    path.unlink()


def test_a_truncation_then_growth_reads_zeros_not_the_synced_bytes(tmp_path: Path) -> None:
    with backing(tmp_path / "f", b"s" * 10_000) as fd:
        state = UnsyncedFile(10_000)
        state.truncate(10)
        state.write(fd, 9_000, b"end")
        assert state.read(fd, 0, 20_000) == b"s" * 10 + bytes(8_990) + b"end"
        state.truncate(9_500)
        assert state.read(fd, 9_000, 1_000) == b"end" + bytes(497)
        assert state.dirty_bytes == PAGE_BYTES
