"""A fast scan of a whole commitlog segment, for tools that read every record of a log.

``check_record`` (check.py) decodes every field of a record, properties dict included, into the
DispatchRequest the dispatcher needs: right for recovery, about 6 µs a 1 KiB record in Python.
The reconciliation (reconcile/) reads every record of a log and needs a few fields of each; this
scan reads them in place from the mapped segment, a batch of records at a time, whole-record CRC
included. Per batch it:

1. walks the chain of TOTALSIZE fields (the only sequential step) to find where each record
   starts, stopping at zeros, a blank marker or a size that cannot be right: runs of records of
   one size at once with numpy, others one by one in Python;
2. reads the fixed-position fields of all the batch's records at once with numpy gathers (layout.py
   lays them out; the host fields are 8 or 20 bytes by the sysflag's v6 bits) and checks that each
   record's fields add up to its size, ends with the ``__CRC32#`` property and claims its own
   phy_offset;
3. computes each record's CRC (zlib-ng, one call a record, driven from C by map) and compares it
   with the property;
4. finds the message id (``UNIQ_KEY``) in each record's properties.

It stops where recovery (commit_log_recovery.py) would stop:

- zeros, or fewer than 8 bytes before the limit: the clean end of what was written;
- a blank marker that fills the segment exactly: padding, the next record is in the next segment;
- anything else that is not a valid record at the phy_offset it claims: a torn or damaged record.
  Nothing after it is read, even a valid-looking record: recovery would cut it. The reason given
  is ``check_record``'s own, so a tool and the broker describe the same damage the same way.

A record passes when ``check_record(buf, pos, limit, check_crc=True, require_record_crc=True)``
says MESSAGE and it claims its own phy_offset, with one difference: a record whose whole-record
CRC matches is trusted as written. The body CRC and the properties' text (UTF-8, no NUL) are not
re-checked: the whole-record CRC covers them, so only a writer that wrote them wrong could make
them disagree, and the damage the scan exists to find, a torn or overwritten record, cannot
pass it. Records with the V2 magic code (2-byte topic length; read, never written by rocketbox)
are decoded one by one with ``check_record``. tests/reconcile/test_record_scan.py holds the scan
to check_record on valid, torn and damaged logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from broker.store.codec.check import RecordKind, check_record
from broker.store.codec.layout import (
    BLANK_MAGIC_CODE,
    CRC32_PREFIX,
    CRC32_RESERVED_LENGTH,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POSITION_BODY_LENGTH_V4,
    POSITION_BORN_HOST,
    POSITION_BORN_TIMESTAMP,
    POSITION_PHYSICAL_OFFSET,
    POSITION_QUEUE_ID,
    POSITION_QUEUE_OFFSET,
    POSITION_STORE_TIMESTAMP_V4,
    POSITION_SYSFLAG,
    RECONSUME_PREPARED_BYTES,
    TOTAL_AND_MAGIC,
)
from broker.store.codec.message import MessageSysFlag
from broker.store.codec.scan_columns import (
    PAIR_END_BYTE,
    RECORD_BYTES_MIN,
    SKIP_PROBE_RECORDS_MAX,
    SKIP_PROBE_RECORDS_MIN,
    SKIP_RUN_MIN,
    SKIP_STEP_RECORDS,
    RecordColumns,
    ScanBuffer,
    body_size,
    concat,
    field_of,
    gather,
    i16,
    i32,
    i64,
    message_ids,
    record_crcs,
    same_size_run,
    valid_prefix,
)
from broker.store.codec.text_columns import CodedColumn, TextColumn

_CRC_PROPERTY_PREFIX = np.frombuffer(CRC32_PREFIX, np.uint8)
_CRC_NAME_BYTES = len(CRC32_PREFIX)
_CRC_DIGITS = 10
_DIGIT_WEIGHTS = 10 ** np.arange(_CRC_DIGITS, dtype=np.int64)  # least significant digit first
_AT_BODY_V4 = POSITION_BODY_LENGTH_V4 + 4
_BORN_V6: Final = MessageSysFlag.BORNHOST_V6_FLAG
_STORE_V6: Final = MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
_V6_BITS: Final = _BORN_V6 | _STORE_V6
# Passes that name the records of one topic in a batch at once (records of more topics than
# this in one batch are named one by one).
TOPIC_RUNS_MAX = 16


class ScanEndKind:
    """Why a segment scan stopped."""

    END: Final = "END"  # zeros, or the segment's last bytes: nothing was written past here
    BLANK: Final = "BLANK"  # a blank marker padding the segment to its end
    CORRUPT: Final = "CORRUPT"  # a torn or damaged record: recovery would cut the log here
    # The first record boundary at or past the scan's ``stop_position``: a part of a segment
    # scanned by several readers ends there, and the next part begins there.
    PART: Final = "PART"


@dataclass(slots=True)
class ScanEnd:
    kind: str
    position: int  # in the segment: where the scan stopped
    reason: str = ""


class SegmentScanner:
    """Scan one segment mapped (or read) into ``buf``; ``end`` says where and why it stopped."""

    def __init__(self, buf: ScanBuffer, file_from_offset: int, limit: int) -> None:
        assert 0 <= limit <= len(buf), "the limit lies outside the buffer"
        self._buf = buf
        self._file_from_offset = file_from_offset
        self._limit = limit
        self.position = 0
        # Stop (ScanEndKind.PART) at the first record boundary at or past it; None: the limit.
        self.stop_position: int | None = None
        self.records = 0
        self.blank_bytes = 0
        self.end: ScanEnd | None = None
        # Topic bytes → str: a log holds few topics, so each is decoded (and checked) once.
        self._topics: dict[bytes, str] = {}

    def batches(self, batch_records_max: int) -> Iterator[RecordColumns]:
        """Yield the records in log order, at most ``batch_records_max`` per batch."""
        assert batch_records_max > 0
        while self.end is None:
            batch = self._scan_batch(batch_records_max)
            self.records += len(batch)
            if len(batch):
                yield batch

    # -- one batch -------------------------------------------------------------------------------
    def _scan_batch(self, batch_records_max: int) -> RecordColumns:
        starts, v2_next = self._walk(batch_records_max)
        batch = self._decode(starts)
        if v2_next and self.end is None and len(batch) < batch_records_max:
            batch = concat(batch, self._decode_one_v2())
        return batch

    def _walk(self, batch_records_max: int) -> tuple[npt.NDArray[np.int64], bool]:
        """Record starts from ``position`` on, by their TOTALSIZE fields alone. Ends the scan at
        a clean end or a size that cannot be right; returns whether a V2 record comes next.

        Records of one size in a row (one producer's messages, often) are found a run at a time
        (scan_columns.same_size_run, as ``skip_chain`` finds them); where sizes vary, record by
        record, ``SKIP_STEP_RECORDS`` of them before the next probe."""
        runs: list[npt.NDArray[np.int64]] = []
        starts: list[int] = []
        found, pos = 0, self.position
        stop = self._limit if self.stop_position is None else self.stop_position
        probe, stepping = SKIP_PROBE_RECORDS_MIN, 0
        arr = np.frombuffer(self._buf, dtype=np.uint8, count=self._limit)
        try:
            while found < batch_records_max:
                total = self._record_size(pos, stop)
                if total is None:
                    break
                starts.append(pos)
                found += 1
                if stepping:
                    stepping -= 1
                    pos += total
                    continue
                wanted = min(probe, batch_records_max - found, (stop - pos - 1) // total)
                ahead = same_size_run(arr, pos, total, wanted)
                if ahead:
                    runs += [np.asarray(starts, np.int64), pos + total * np.arange(1, ahead + 1)]
                    starts.clear()
                    found += ahead
                pos += total * (ahead + 1)
                if ahead >= probe:
                    probe = min(2 * probe, SKIP_PROBE_RECORDS_MAX)
                elif ahead < SKIP_RUN_MIN:
                    probe, stepping = SKIP_PROBE_RECORDS_MIN, SKIP_STEP_RECORDS
        finally:
            # A view of a mapping must not outlive this call: the mapping is closed after the scan.
            del arr
        runs.append(np.asarray(starts, np.int64))
        # Stopped without an end: a V2 record is next.
        return np.concatenate(runs), found < batch_records_max and self.end is None

    def _record_size(self, pos: int, stop: int) -> int | None:
        """The size of the V1 record at ``pos``; None where the walk stops: at ``stop`` or an
        end of the scan (``end`` set), or before a V2 record (``end`` not set)."""
        limit = self._limit
        if stop <= pos < limit:
            self.end = ScanEnd(ScanEndKind.PART, pos)
            return None
        if limit - pos < END_FILE_MIN_BLANK_LENGTH:
            self.end = ScanEnd(ScanEndKind.END, pos)
            return None
        total, magic = TOTAL_AND_MAGIC.unpack_from(self._buf, pos)
        if magic != MESSAGE_MAGIC_CODE:
            if magic != MESSAGE_MAGIC_CODE_V2:
                self.end = self._not_a_message(pos, total, magic)
            return None
        if total < RECORD_BYTES_MIN or pos + total > limit:
            # A size no record can have: check_record says what is wrong here.
            self.end = ScanEnd(ScanEndKind.CORRUPT, pos, self._reason(pos))
            return None
        return int(total)

    def _not_a_message(self, pos: int, total: int, magic: int) -> ScanEnd:
        if magic == BLANK_MAGIC_CODE and total == self._limit - pos:
            self.blank_bytes = total
            return ScanEnd(ScanEndKind.BLANK, pos)
        if total == 0 and magic == 0:
            return ScanEnd(ScanEndKind.END, pos)
        return ScanEnd(ScanEndKind.CORRUPT, pos, self._reason(pos))

    def _reason(self, pos: int) -> str:
        """check_record's description of the damage at ``pos``."""
        found = check_record(self._buf, pos, self._limit, True, True)
        if found.kind == RecordKind.MESSAGE:
            request = found.request
            assert request is not None
            if request.commit_log_offset != self._file_from_offset + pos:
                return f"record claims phy_offset {request.commit_log_offset}"
            return "record does not decode"
        return found.reason or "zeros inside a record"

    def _decode(self, starts: npt.NDArray[np.int64]) -> RecordColumns:
        """The records at ``starts``, up to the first that fails a check (which ends the scan)."""
        if not len(starts):
            return RecordColumns()
        arr = np.frombuffer(self._buf, dtype=np.uint8, count=self._limit)
        try:
            return self._decode_in(arr, starts)
        finally:
            # A view of a mapping must not outlive this call: the mapping is closed after the scan.
            del arr

    def _decode_in(
        self, arr: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64]
    ) -> RecordColumns:
        buf = self._buf
        pos = starts
        # Everything up to BODY of a record with IPv4 hosts, in one gather: no valid record is
        # shorter, so the window never leaves a valid record.
        head = gather(arr, pos, _AT_BODY_V4)
        total = field_of(head, 0, ">i4")
        end = pos + total
        sysflag = field_of(head, POSITION_SYSFLAG, ">i4")
        phy_offset = field_of(head, POSITION_PHYSICAL_OFFSET, ">i8")
        store_ts = field_of(head, POSITION_STORE_TIMESTAMP_V4, ">i8")
        body_len = field_of(head, _AT_BODY_V4 - 4, ">i4")
        store_ts_at = pos + POSITION_STORE_TIMESTAMP_V4
        body_len_at = pos + _AT_BODY_V4 - 4
        v6 = (sysflag & _V6_BITS) != 0
        if v6.any():
            store_ts_at = pos + POSITION_BORN_HOST + np.where(sysflag & _BORN_V6, 20, 8)
            body_len_at = (
                store_ts_at + 8 + RECONSUME_PREPARED_BYTES + np.where(sysflag & _STORE_V6, 20, 8)
            )
            store_ts = np.where(v6, i64(arr, store_ts_at), store_ts)
            body_len = np.where(v6, i32(arr, body_len_at), body_len)
        topic_len_at = body_len_at + 4 + body_len
        topic_len = arr[np.clip(topic_len_at, 0, len(arr) - 1)].astype(np.int64)
        props_len_at = topic_len_at + 1 + topic_len
        props_len = i16(arr, props_len_at)
        props_at = props_len_at + 2
        crc_at = end - CRC32_RESERVED_LENGTH
        # The CRC property: its name, 10 digits and the closing separator, in one gather.
        tail = gather(arr, crc_at, CRC32_RESERVED_LENGTH)
        digits = tail[:, _CRC_NAME_BYTES : _CRC_NAME_BYTES + _CRC_DIGITS].astype(np.int64) - ord(
            "0"
        )
        ok = (
            (body_len >= 0)
            & (topic_len_at + 3 <= end)
            & (props_at + props_len == end)
            & (props_len >= CRC32_RESERVED_LENGTH)
            & (phy_offset == self._file_from_offset + pos)
            & (tail[:, :_CRC_NAME_BYTES] == _CRC_PROPERTY_PREFIX).all(axis=1)
            & (tail[:, -1] == PAIR_END_BYTE)
            & ((digits >= 0) & (digits <= 9)).all(axis=1)
        )
        n = valid_prefix(ok)
        # The record CRC of every structurally valid record: one CRC call each.
        ok[:n] &= record_crcs(buf, pos[:n], crc_at[:n]) == digits[:n] @ _DIGIT_WEIGHTS
        n = valid_prefix(ok[:n])
        topics, n = self._topic_strings(arr, topic_len_at[:n] + 1, topic_len[:n])
        ids, n = message_ids(arr, buf, props_at[:n], crc_at[:n])
        topics = topics.head(n)
        if n < len(starts):
            at = int(starts[n])
            self.end = ScanEnd(ScanEndKind.CORRUPT, at, self._reason(at))
        self.position = int(end[n - 1]) if n else int(starts[0])
        return RecordColumns(
            message_id=ids,
            topic=topics,
            queue_id=field_of(head[:n], POSITION_QUEUE_ID, ">i4").astype(np.int32),
            queue_offset=field_of(head[:n], POSITION_QUEUE_OFFSET, ">i8"),
            phy_offset=phy_offset[:n],
            store_timestamp_ms=store_ts[:n],
            born_timestamp_ms=field_of(head[:n], POSITION_BORN_TIMESTAMP, ">i8"),
            body_size_bytes=body_len[:n].astype(np.int32),
        )

    def _topic(self, raw: bytes) -> str | None:
        topic = self._topics.get(raw)
        if topic is None:
            try:
                topic = self._topics[raw] = raw.decode()
            except UnicodeDecodeError:
                return None
        return topic

    def _topic_strings(
        self,
        arr: npt.NDArray[np.uint8],
        topic_at: npt.NDArray[np.int64],
        topic_len: npt.NDArray[np.int64],
    ) -> tuple[CodedColumn, int]:
        """The records' topics, and how many lead before one that does not decode.

        A log holds few topics, written in runs: each pass takes the first record not yet
        named, and names at once every record whose topic bytes equal its own. After
        ``TOPIC_RUNS_MAX`` passes (many topics in one batch) the rest are named one by one."""
        n = len(topic_at)
        codes = np.zeros(n, np.int32)
        names: dict[str, int] = {}
        todo = np.arange(n)
        for _ in range(TOPIC_RUNS_MAX):
            if not len(todo):
                break
            first = int(todo[0])
            length = int(topic_len[first])
            candidates = todo[topic_len[todo] == length]
            rows = gather(arr, topic_at[candidates], length)
            same = candidates[(rows == rows[0]).all(axis=1)]
            topic = self._topic(rows[0].tobytes())
            if topic is None:
                n = first
                todo = todo[todo < n]
                continue
            codes[same] = names.setdefault(topic, len(names))
            todo = np.setdiff1d(todo, same, assume_unique=True)
        for i in todo.tolist():
            at = int(topic_at[i])
            topic = self._topic(bytes(self._buf[at : at + int(topic_len[i])]))
            if topic is None:
                n = i
                break
            codes[i] = names.setdefault(topic, len(names))
        return CodedColumn(codes[:n], list(names)), n

    def _decode_one_v2(self) -> RecordColumns:
        """The V2 record at ``position`` (2-byte topic length), through check_record."""
        pos = self.position
        found = check_record(self._buf, pos, self._limit, True, True)
        request = found.request
        phy_offset = self._file_from_offset + pos
        if found.kind != RecordKind.MESSAGE or request is None:
            self.end = ScanEnd(ScanEndKind.CORRUPT, pos, found.reason)
            return RecordColumns()
        if request.commit_log_offset != phy_offset:
            self.end = ScanEnd(
                ScanEndKind.CORRUPT, pos, f"record claims phy_offset {request.commit_log_offset}"
            )
            return RecordColumns()
        self.position = pos + found.size
        arr = np.frombuffer(self._buf, dtype=np.uint8, count=self._limit)
        p = np.asarray([pos], dtype=np.int64)
        try:
            born_ts = i64(arr, p + POSITION_BORN_TIMESTAMP)
        finally:
            del arr
        return RecordColumns(
            message_id=TextColumn.of([request.uniq_key]),
            topic=CodedColumn(np.zeros(1, np.int32), [request.topic]),
            queue_id=np.asarray([request.queue_id], np.int32),
            queue_offset=np.asarray([request.consume_queue_offset], np.int64),
            phy_offset=np.asarray([phy_offset], np.int64),
            store_timestamp_ms=np.asarray([request.store_timestamp_ms], np.int64),
            born_timestamp_ms=born_ts,
            body_size_bytes=np.asarray([body_size(self._buf, pos)], np.int32),
        )
