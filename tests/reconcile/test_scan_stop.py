"""What lies past where a segment's scan stopped (reconcile/scan_stop.py).

Proves: the first byte that is not zero past a position is found in a sparse segment (its holes
skipped) and in one whose zeros were all written, across chunk boundaries and at the file's very
end, and there is none in zeros to the end; a torn record (its size intact) is skipped whole
before the search, a record whose size cannot be right only for its first 8 bytes; a segment
whose first bytes are neither a record nor a blank marker nor zeros, or zeros with data after
them, is no commitlog, and one that starts with a torn record is still one.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker.store.codec.scan import ScanEnd, ScanEndKind
from reconcile import scan_stop
from reconcile.scan_stop import PastStop, first_written, past_stop

SIZE = 4 * 1024 * 1024
V1 = struct.pack(">i", -626843481)


@contextmanager
def mapped(path: Path) -> Iterator[tuple[int, mmap.mmap]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        with mmap.mmap(fd, os.fstat(fd).st_size, access=mmap.ACCESS_READ) as buf:
            yield fd, buf
    finally:
        os.close(fd)


def sparse(path: Path, writes: dict[int, bytes]) -> Path:
    with path.open("wb") as f:
        f.truncate(SIZE)
        for at, data in writes.items():
            f.seek(at)
            f.write(data)
    return path


def dense(path: Path, writes: dict[int, bytes]) -> Path:
    data = bytearray(SIZE)
    for at, chunk in writes.items():
        data[at : at + len(chunk)] = chunk
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("make", [sparse, dense])
@pytest.mark.parametrize("at", [100, 3 * 1024 * 1024 + 17, SIZE - 1])
def test_the_first_written_byte_is_found_holes_or_not(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[Path, dict[int, bytes]], Path],
    at: int,
) -> None:
    monkeypatch.setattr(scan_stop, "WRITTEN_SEARCH_CHUNK_BYTES", 1024 * 1024 + 3)
    path = make(tmp_path / "segment", {0: b"\x07" * 64, at: b"\x01"})
    with mapped(path) as (fd, buf):
        assert first_written(fd, buf, 64, SIZE) == at
        assert first_written(fd, buf, at + 1, SIZE) is None
        assert first_written(fd, buf, SIZE, SIZE) is None


def test_a_torn_record_is_skipped_whole_and_a_bad_size_for_its_head_only(tmp_path: Path) -> None:
    torn = struct.pack(">i", 300) + V1 + b"\x05" * 60  # 300 bytes claimed, 68 written
    path = sparse(tmp_path / "segment", {1000: torn, 1250: b"\x09"})
    end = ScanEnd(ScanEndKind.CORRUPT, 1000, "torn")
    with mapped(path) as (fd, buf):
        assert past_stop(fd, buf, SIZE, end) == PastStop(None, "")
    path = sparse(tmp_path / "later", {1000: torn, 1300: b"\x09"})
    with mapped(path) as (fd, buf):
        assert past_stop(fd, buf, SIZE, end) == PastStop(1300, "")
    huge = struct.pack(">i", 2 * SIZE) + V1 + b"\x05" * 60
    path = sparse(tmp_path / "huge", {1000: huge})
    with mapped(path) as (fd, buf):
        assert past_stop(fd, buf, SIZE, end) == PastStop(1008, "")


def test_a_segment_that_starts_with_no_record_is_no_commitlog(tmp_path: Path) -> None:
    foreign = sparse(tmp_path / "foreign", {0: b"\x00\x00\x00\x00\x12\x34\x56\x78"})
    queue = sparse(tmp_path / "queue", {8: struct.pack(">iq", 230, 0)})
    torn_first = sparse(tmp_path / "torn", {0: struct.pack(">i", 300) + V1 + b"\x05" * 9})
    bad_magic = ScanEnd(ScanEndKind.CORRUPT, 0, "bad magic code 0x12345678")
    with mapped(foreign) as (fd, buf):
        assert past_stop(fd, buf, SIZE, bad_magic).not_a_commitlog == (
            "its first bytes are no record and no blank marker (bad magic code 0x12345678)"
        )
    with mapped(queue) as (fd, buf):
        assert past_stop(fd, buf, SIZE, ScanEnd(ScanEndKind.END, 0)) == PastStop(
            11, "no record at its start, yet bytes written at 11"
        )
    with mapped(torn_first) as (fd, buf):
        assert past_stop(fd, buf, SIZE, ScanEnd(ScanEndKind.CORRUPT, 0, "torn")) == PastStop(
            None, ""
        )
