"""Commitlogs and acknowledgement ledgers written as rocketbox writes them, for tests and bench/.

``CommitLogWriter`` writes record by record through the broker's codec (``encode_message`` +
``finish_record``) with the CommitLog's segment rules (commit_log.py): segments named by their
20-digit start phy_offset, a record never spans two, a segment's tail that a record does not fill
is a blank marker, and the segment being written is full size with zeros past its last record
(the broker preallocates it). It can also leave a torn last record, as a crash mid-write does.

``write_bulk_commitlog`` writes millions of records of one shape in seconds: it encodes one
template record with the codec and patches the fields that differ from record to record (queue
id, queue offset, phy_offset, timestamps, message id, record CRC) in numpy arrays. Its files are
byte for byte those ``CommitLogWriter`` writes for the same messages (tests/reconcile holds the two
equal), so a bench reads what a broker would have written.

``ledger_line`` is one line of the sidecar's acknowledgement ledger (sidecar/ledger.py, written by
sidecar/sidecar.py); ``write_bulk_ledger`` acknowledges every record of a bulk commitlog.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from broker.store.codec.encode import encode_message, finish_record
from broker.store.codec.layout import (
    CRC32_RESERVED_LENGTH,
    END_FILE_MIN_BLANK_LENGTH,
    POSITION_PHYSICAL_OFFSET,
    POSITION_QUEUE_OFFSET,
    POSITION_STORE_TIMESTAMP_V4,
    blank_marker,
    offset_to_file_name,
)
from broker.store.codec.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageExtBrokerInner

BORN_HOST = ("127.0.0.1", 50000)
STORE_HOST = ("127.0.0.1", 10911)
# Where QUEUEID and BORNTIMESTAMP sit (codec/layout.py's layout table).
_POSITION_QUEUE_ID = 12
_POSITION_BORN_TIMESTAMP = 40
_CRC_DIGITS = 10
# Records patched at once by write_bulk_commitlog: about 70 MiB of 1 KiB records.
BULK_CHUNK_RECORDS_MAX = 65_536
# Bulk message ids look like the sidecar's RocketMQ V1 ids (34 hex characters): a fixed
# 18-character prefix, then the record's index in 16 hex digits.
BULK_ID_PREFIX = "01C0FFEE0000BEEF00"
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def bulk_message_id(index: int) -> str:
    return f"{BULK_ID_PREFIX}{index:016X}"


def segment_records_max(segment_size_bytes: int, record_bytes: int) -> int:
    """How many records of one size a segment holds under the CommitLog's rule: a record fits
    when it fills the rest exactly or leaves room for a blank marker."""
    count = segment_size_bytes // record_bytes
    left = segment_size_bytes - count * record_bytes
    if 0 < left < END_FILE_MIN_BLANK_LENGTH:
        count -= 1
    assert count > 0, "a segment must hold at least one record"
    return count


class CommitLogWriter:
    """Append records to ``commitlog_dir`` exactly as the broker's CommitLog lays them out."""

    def __init__(
        self,
        commitlog_dir: Path,
        segment_size_bytes: int,
        store_host: tuple[str, int] = STORE_HOST,
    ) -> None:
        self.commitlog_dir = commitlog_dir
        self.segment_size_bytes = segment_size_bytes
        self.store_host = store_host  # the broker's address every record carries
        self._file: IO[bytes] | None = None
        self._segment_from_offset = 0
        self._wrote_position = 0
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._torn = False
        commitlog_dir.mkdir(parents=True, exist_ok=True)

    @property
    def phy_offset(self) -> int:
        """Where the next record would start if it fits the current segment."""
        return self._segment_from_offset + self._wrote_position

    def append(
        self,
        topic: str,
        message_id: str | None,
        store_timestamp_ms: int,
        body: bytes = b"payload",
        queue_id: int = 0,
        born_timestamp_ms: int | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> int:
        """Append one message; returns its phy_offset."""
        record, phy_offset = self._record(
            topic, message_id, store_timestamp_ms, body, queue_id, born_timestamp_ms, properties
        )
        self._write(record)
        return phy_offset

    def append_torn(
        self, topic: str, message_id: str, store_timestamp_ms: int, kept_bytes: int
    ) -> int:
        """Append the first ``kept_bytes`` of a record, as a crash mid-write leaves it; nothing
        more may be appended after it. Returns the torn record's phy_offset."""
        record, phy_offset = self._record(topic, message_id, store_timestamp_ms)
        assert 0 < kept_bytes < len(record)
        self._write(record[:kept_bytes])
        self._torn = True
        return phy_offset

    def _record(
        self,
        topic: str,
        message_id: str | None,
        store_timestamp_ms: int,
        body: bytes = b"payload",
        queue_id: int = 0,
        born_timestamp_ms: int | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> tuple[bytes, int]:
        assert not self._torn, "nothing is appended after a torn record"
        props = dict(properties or {})
        if message_id is not None:
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = message_id
        msg = MessageExtBrokerInner(
            topic=topic,
            body=body,
            queue_id=queue_id,
            properties=props,
            born_timestamp_ms=store_timestamp_ms
            if born_timestamp_ms is None
            else born_timestamp_ms,
            born_host=BORN_HOST,
            store_host=self.store_host,
        )
        encoded = encode_message(msg, 0)
        self._make_room(encoded.total_size)
        key = (topic, queue_id)
        queue_offset = self._queue_offsets.get(key, 0)
        self._queue_offsets[key] = queue_offset + 1
        phy_offset = self.phy_offset
        return finish_record(encoded, queue_offset, phy_offset, store_timestamp_ms), phy_offset

    def _make_room(self, size: int) -> None:
        """The CommitLog's roll: a blank marker seals the segment when the record does not fit."""
        assert size <= self.segment_size_bytes, "a record larger than a segment"
        if self._file is None:
            self._open_segment(self._segment_from_offset)
            return
        left = self.segment_size_bytes - self._wrote_position
        if size != left and size + END_FILE_MIN_BLANK_LENGTH > left:
            if left:
                self._write(blank_marker(left))
            self._close_segment()
            self._open_segment(self._segment_from_offset + self.segment_size_bytes)

    def _open_segment(self, from_offset: int) -> None:
        self._segment_from_offset = from_offset
        self._wrote_position = 0
        self._file = (self.commitlog_dir / offset_to_file_name(from_offset)).open("wb")

    def _write(self, data: bytes) -> None:
        assert self._file is not None
        self._file.write(data)
        self._wrote_position += len(data)

    def _close_segment(self) -> None:
        assert self._file is not None
        # Full size, zeros past the last record: the broker preallocates every segment.
        self._file.truncate(self.segment_size_bytes)
        self._file.close()
        self._file = None

    def close(self) -> None:
        if self._file is not None:
            self._close_segment()

    def __enter__(self) -> CommitLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class BulkShape:
    """The messages ``write_bulk_commitlog`` writes; record ``i`` is computed from ``i`` alone."""

    count: int
    body_size_bytes: int = 1024
    # Names of one length, so that every record has the same size.
    topics: tuple[str, ...] = ("BenchTopic0",)
    queues: int = 8
    first_store_timestamp_ms: int = 1_767_225_600_000  # 2026-01-01T00:00Z
    records_per_second: int = 10_000

    def topic(self, i: int) -> str:
        return self.topics[i % len(self.topics)]

    def queue_id(self, i: int) -> int:
        return (i // len(self.topics)) % self.queues

    def store_timestamp_ms(self, i: int) -> int:
        return self.first_store_timestamp_ms + i * 1000 // self.records_per_second

    def body(self) -> bytes:
        return bytes(range(256)) * (self.body_size_bytes // 256) + bytes(self.body_size_bytes % 256)


def bulk_record_bytes(shape: BulkShape) -> int:
    """The size of every record ``write_bulk_commitlog(shape)`` writes."""
    return len(_template(shape, shape.topics[0]))


def write_bulk_commitlog(commitlog_dir: Path, shape: BulkShape, segment_size_bytes: int) -> int:
    """Write ``shape.count`` records; returns the bytes written including padding."""
    assert len({len(t.encode()) for t in shape.topics}) == 1, "topics of one length"
    commitlog_dir.mkdir(parents=True, exist_ok=True)
    templates = np.stack([_template(shape, t) for t in shape.topics])
    record_bytes = templates.shape[1]
    per_segment = segment_records_max(segment_size_bytes, record_bytes)
    id_at = bytes(templates[0]).index(bulk_message_id(0).encode()) + len(BULK_ID_PREFIX)
    written = 0
    for first in range(0, shape.count, per_segment):
        segment = first // per_segment
        from_offset = segment * segment_size_bytes
        last = min(first + per_segment, shape.count)
        with (commitlog_dir / offset_to_file_name(from_offset)).open("wb") as f:
            for start in range(first, last, BULK_CHUNK_RECORDS_MAX):
                end = min(start + BULK_CHUNK_RECORDS_MAX, last)
                chunk = _patched_chunk(shape, templates, start, end, first, from_offset, id_at)
                f.write(chunk.data)
            used = (last - first) * record_bytes
            if last - first == per_segment and used < segment_size_bytes:
                f.write(blank_marker(segment_size_bytes - used))
            f.truncate(segment_size_bytes)
        written += segment_size_bytes
    return written


def _template(shape: BulkShape, topic: str) -> npt.NDArray[np.uint8]:
    msg = MessageExtBrokerInner(
        topic=topic,
        body=shape.body(),
        properties={PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: bulk_message_id(0)},
        born_host=BORN_HOST,
        store_host=STORE_HOST,
    )
    record = finish_record(encode_message(msg, 0), 0, 0, 0)
    return np.frombuffer(record, dtype=np.uint8).copy()


def _patched_chunk(
    shape: BulkShape,
    templates: npt.NDArray[np.uint8],
    start: int,
    end: int,
    segment_first: int,
    from_offset: int,
    id_at: int,
) -> npt.NDArray[np.uint8]:
    """Records ``start`` … ``end`` - 1, the first of their segment being ``segment_first``."""
    index = np.arange(start, end, dtype=np.int64)
    topics = len(shape.topics)
    record_bytes = templates.shape[1]
    chunk = templates[index % topics]
    queue_id = (index // topics) % shape.queues
    # Each (topic, queue) takes every (topics * queues)-th record, in order.
    queue_offset = index // (topics * shape.queues)
    phy_offset = from_offset + (index - segment_first) * record_bytes
    store_ts = shape.first_store_timestamp_ms + index * 1000 // shape.records_per_second
    _put(chunk, _POSITION_QUEUE_ID, queue_id.astype(">i4"))
    _put(chunk, POSITION_QUEUE_OFFSET, queue_offset.astype(">i8"))
    _put(chunk, POSITION_PHYSICAL_OFFSET, phy_offset.astype(">i8"))
    _put(chunk, _POSITION_BORN_TIMESTAMP, store_ts.astype(">i8"))
    _put(chunk, POSITION_STORE_TIMESTAMP_V4, store_ts.astype(">i8"))
    for digit in range(16):
        chunk[:, id_at + digit] = _HEX[(index >> (4 * (15 - digit))) & 0xF]
    # The record CRC (codec.finish_record): crc32 of every byte before the CRC property, written
    # as 10 decimal digits, least significant first.
    covered = record_bytes - CRC32_RESERVED_LENGTH
    flat = chunk.data.cast("B")
    crc32 = zlib.crc32
    crcs = np.fromiter(
        (crc32(flat[r * record_bytes : r * record_bytes + covered]) & 0x7FFFFFFF
         for r in range(len(index))),
        dtype=np.int64,
        count=len(index),
    )  # fmt: skip
    digits_at = record_bytes - 1 - _CRC_DIGITS
    for digit in range(_CRC_DIGITS):
        chunk[:, digits_at + digit] = (crcs // 10**digit) % 10 + ord("0")
    return chunk


def _put(chunk: npt.NDArray[np.uint8], at: int, values: npt.NDArray[Any]) -> None:
    width = values.dtype.itemsize
    chunk[:, at : at + width] = values.view(np.uint8).reshape(len(values), width)


def ledger_line(
    message_id: str,
    topic: str,
    state: str,
    time_ms: int,
    *,
    cause: str | None = None,
    queue_id: int | None = None,
    queue_offset: int | None = None,
    durable: bool | None = None,
) -> dict[str, Any]:
    """One acknowledgement as the sidecar records it: STORED lines carry the queue, queue offset
    and durability, SPOOLED lines the cause."""
    line: dict[str, Any] = {"message_id": message_id, "topic": topic, "time_ms": time_ms}
    if state == "STORED":
        line |= {"state": state, "queue_id": queue_id, "queue_offset": queue_offset,
                 "durable": True if durable is None else durable}  # fmt: skip
    else:
        line |= {"state": state, "cause": cause}
    return line


def write_ledger(path: Path, lines: Iterable[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")


def write_bulk_ledger(path: Path, shape: BulkShape) -> None:
    """A STORED acknowledgement for every record of ``write_bulk_commitlog(shape)``, told at
    its store time."""
    topics = len(shape.topics)
    with path.open("w", encoding="utf-8") as f:
        for i in range(shape.count):
            f.write(
                f'{{"message_id":"{BULK_ID_PREFIX}{i:016X}","topic":"{shape.topics[i % topics]}",'
                f'"time_ms":{shape.store_timestamp_ms(i)},"state":"STORED",'
                f'"queue_id":{shape.queue_id(i)},"queue_offset":{i // (topics * shape.queues)},'
                '"durable":true}\n'
            )
