"""What lies past where a segment's scan stopped: data it did not read, or no commitlog at all.

A scan stops at zeros (the end of what was written) or at a torn or damaged record
(segment_scan.py). A crash mid-append leaves the torn record followed by zeros only: the broker
maps each segment whole and writes it front to back, so a byte that is not zero past the stopped
record is data the scan did not read. Whether it is there decides whether a run may give a
verdict (reconcile/unread.py).

The stopped record ends where its TOTALSIZE says when its head holds a message's magic code and
a size that fits the segment (a torn record keeps its head: the head is written first), else
after its first 8 bytes. The search skips the file's holes without reading them (a segment is
allocated sparse by the brokers and by ``truncate``): only the written extents are read, a chunk
at a time, so the tail segment of a large log costs what was written of it.

A segment whose very first bytes are neither a message's magic code, a blank marker nor zeros,
or are zeros with data after them, is no commitlog segment (a consume queue or index file, a
DLedger log, another format): ``not_a_commitlog`` says why.
"""

from __future__ import annotations

import errno
import mmap
import os
from dataclasses import dataclass

import numpy as np

from broker.store.codec.layout import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    TOTAL_AND_MAGIC,
)
from broker.store.codec.scan import ScanEnd, ScanEndKind
from broker.store.codec.scan_columns import RECORD_BYTES_MIN

# Bytes looked at a time for data past where a scan stopped.
WRITTEN_SEARCH_CHUNK_BYTES = 16 * 1024 * 1024
_MESSAGE_MAGIC_CODES = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)


@dataclass(frozen=True, slots=True)
class PastStop:
    written_at: int | None  # the first byte past the stopped record that is not zero
    not_a_commitlog: str  # why the segment is no commitlog; empty when it may be one


def past_stop(fd: int, buf: mmap.mmap, size: int, end: ScanEnd) -> PastStop:
    """What lies past ``end`` (kind END or CORRUPT) in the segment of ``size`` bytes mapped in
    ``buf`` from ``fd``."""
    assert end.kind in (ScanEndKind.END, ScanEndKind.CORRUPT)
    pos = end.position
    magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)[1] if size - pos >= 8 else 0
    written_at = first_written(fd, buf, _stopped_record_end(buf, size, end), size)
    foreign = end.kind == ScanEndKind.CORRUPT and magic not in (
        *_MESSAGE_MAGIC_CODES,
        BLANK_MAGIC_CODE,
    )
    why = ""
    if pos == 0 and foreign:
        why = f"its first bytes are no record and no blank marker ({end.reason})"
    elif pos == 0 and end.kind == ScanEndKind.END and written_at is not None:
        why = f"no record at its start, yet bytes written at {written_at:,}"
    return PastStop(written_at, why)


def _stopped_record_end(buf: mmap.mmap, size: int, end: ScanEnd) -> int:
    pos = end.position
    if end.kind == ScanEndKind.END or size - pos < END_FILE_MIN_BLANK_LENGTH:
        return pos
    total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)
    if magic in _MESSAGE_MAGIC_CODES and RECORD_BYTES_MIN <= total <= size - pos:
        return int(pos + total)
    return pos + END_FILE_MIN_BLANK_LENGTH


def first_written(fd: int, buf: mmap.mmap, start: int, size: int) -> int | None:
    """The first byte at or past ``start`` that is not zero, or None."""
    at = start
    while at < size:
        data_end = size
        try:
            at = os.lseek(fd, at, os.SEEK_DATA)
            data_end = os.lseek(fd, at, os.SEEK_HOLE)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data past ``at``: a hole to the end
                return None
            # EINVAL: the file system cannot say where its holes are; every byte is read.
        while at < min(data_end, size):
            count = min(WRITTEN_SEARCH_CHUNK_BYTES, size - at, data_end - at)
            chunk = np.frombuffer(buf, np.uint8, count=count, offset=at)
            try:
                if chunk.any():
                    return at + int(np.argmax(chunk != 0))
            finally:
                # A view of a mapping must not outlive this call: the mapping is closed after.
                del chunk
            at += count
    return None
