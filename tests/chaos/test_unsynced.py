"""chaos/unsynced.py, what a file holds beyond its last fsync, over a real backing file:

- whatever the writes, truncations, durable resizes and preallocations since the sync, the file
  reads as a plain file given the same calls would (sizes, zeros where a truncation cut and the
  file grew again);
- the backing file holds only what the durable resizes and preallocations did to it until
  ``write_back``, and afterwards reads exactly as the file does.
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
        st.tuples(st.just("resize"), offsets, st.just(b"")),
        st.tuples(st.just("grow"), offsets, st.just(b"")),
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


def sized(model: bytearray, size: int) -> None:
    if size < len(model):
        del model[size:]
    else:
        model.extend(bytes(size - len(model)))


def apply(model: bytearray, backing_model: bytearray, op: str, offset: int, data: bytes) -> None:
    """What the file reads, and what its backing file holds, after ``op``."""
    if op == "write":
        if offset > len(model):
            model.extend(bytes(offset - len(model)))
        model[offset : offset + len(data)] = data
    elif op in ("truncate", "resize"):
        sized(model, offset)
        if op == "resize":
            # Durable at once: the backing file is cut or zero-extended to the size.
            sized(backing_model, offset)
    elif offset > len(backing_model):
        # fallocate: the backing file grows with zeros; the file grows to it if shorter.
        sized(backing_model, offset)
        if offset > len(model):
            sized(model, offset)


def step(state: UnsyncedFile, fd: int, op: str, offset: int, data: bytes) -> None:
    if op == "write":
        state.write(fd, offset, data)
    elif op == "truncate":
        state.truncate(offset)
    elif op == "resize":
        os.ftruncate(fd, offset)
        state.resized(offset)
    elif offset > os.fstat(fd).st_size:
        os.posix_fallocate(fd, 0, offset)
        state.backing_grown(offset)


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
        model, backing_model = bytearray(synced), bytearray(synced)
        for op, offset, data in steps:
            if op == "grow" and state.cut_size != state.base_size:
                continue  # fallocate comes after an unsynced truncate only through resize
            apply(model, backing_model, op, offset, data)
            step(state, fd, op, offset, data)
            assert state.size == len(model)
        assert state.read(fd, 0, SIZE_MAX * 2) == bytes(model)
        assert state.read(fd, read_at, 777) == bytes(model[read_at : read_at + 777])
        assert path.read_bytes() == backing_model, "the backing file holds unsynced writes"
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
