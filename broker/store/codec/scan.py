"""A fast scan of a whole commitlog segment, for tools that read every record of a log.

``check_record`` (check.py) decodes every field of a record, properties dict included, into the
DispatchRequest the dispatcher needs: right for recovery, too slow in Python for a whole log.
The reconciliation (reconcile/) reads every record of a log and needs a few fields of each; this
scan reads them in place from the mapped segment, a batch of records at a time. It reads what
rocketbox writes and what Apache RocketMQ 4.x and 5.x write (layout.py): magic V1 and V2 (the
topic's length one byte or two), IPv4 and IPv6 hosts (the sysflag's bits), records with the
record CRC pair and, as RocketMQ writes by default, without it. Per batch it:

1. walks the chain of TOTALSIZE fields (the only sequential step) to find where each record
   starts, stopping at zeros, a blank marker or a size that cannot be right: runs of records of
   one size at once with numpy, others one by one in Python;
2. reads the fixed-position fields of all the batch's records at once with numpy gathers (the
   host fields are 8 or 20 bytes by the sysflag's v6 bits, the topic's length 1 or 2 by the magic
   code) and checks that each record's fields add up to its size and that it claims its own
   phy_offset, and tells the records that end with the record CRC pair from those that do not;
3. computes each record's body CRC, and the record CRC of those with the pair (zlib-ng, one call a
   record each, driven from C by map), and compares them with the BODYCRC field and the pair;
4. checks the properties of the records without the pair (no zero byte, UTF-8), all at once;
5. finds the message id (``UNIQ_KEY``) in each record's properties.

Every record takes this vectorised path, with or without the pair, V1 or V2. It stops where
recovery (commit_log_recovery.py) would stop:

- zeros, or fewer than 8 bytes before the limit: the clean end of what was written;
- a blank marker that fills the segment exactly: padding, the next record is in the next segment;
- anything else that is not a valid record at the phy_offset it claims: a torn or damaged record.
  Nothing after it is read, even a valid-looking record: recovery would cut it. The reason given
  is ``check_record``'s own, so a tool and the broker describe the same damage the same way.
  The scan reads nothing past its stop: whether bytes were written there is its caller's to ask.

A record passes when ``check_record(buf, pos, limit, check_crc=True, require_record_crc=False)``
says MESSAGE and it claims its own phy_offset, with one difference: the properties' text of a
record whose record CRC matches is trusted as written, not checked again (the CRC covers it, so
only a writer that wrote it wrong could make it fail, and the damage the scan exists to find, a
torn or overwritten record, cannot pass the CRC). Its message id and topic are still checked as
UTF-8. A record without the pair has its body CRC and its structure to vouch for it, as in
RocketMQ's own recovery: a flipped byte in its header or properties goes unseen, so its message id
is taken as written. tests/reconcile/test_record_scan.py holds the scan to check_record on valid,
torn and damaged logs of both kinds.
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
    CRC32_DIGITS,
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
    RECORD_BYTES_MIN,
    SKIP_PROBE_RECORDS_MAX,
    SKIP_PROBE_RECORDS_MIN,
    SKIP_RUN_MIN,
    SKIP_STEP_RECORDS,
    RecordColumns,
    ScanBuffer,
    field_of,
    gather,
    i16,
    i32,
    i64,
    message_ids,
    same_size_run,
    text_prefix,
    valid_prefix,
)
from broker.store.codec.scan_crcs import crc_pairs, crcs
from broker.store.codec.text_columns import CodedColumn

_DIGIT_WEIGHTS = 10 ** np.arange(CRC32_DIGITS, dtype=np.int64)  # least significant digit first
_POSITION_MAGIC = 4
_POSITION_BODY_CRC = 8
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
            batch = self._decode(self._walk(batch_records_max))
            self.records += len(batch)
            if len(batch):
                yield batch

    # -- one batch -------------------------------------------------------------------------------
    def _walk(self, batch_records_max: int) -> npt.NDArray[np.int64]:
        """Record starts from ``position`` on, by their TOTALSIZE fields alone. Ends the scan at
        a clean end or a size that cannot be right.

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
        return np.concatenate(runs)

    def _record_size(self, pos: int, stop: int) -> int | None:
        """The size of the message record (V1 or V2) at ``pos``; None where the walk stops (at
        ``stop`` or an end of the scan, ``end`` set)."""
        limit = self._limit
        if stop <= pos < limit:
            self.end = ScanEnd(ScanEndKind.PART, pos)
            return None
        if limit - pos < END_FILE_MIN_BLANK_LENGTH:
            self.end = ScanEnd(ScanEndKind.END, pos)
            return None
        total, magic = TOTAL_AND_MAGIC.unpack_from(self._buf, pos)
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
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
        found = check_record(self._buf, pos, self._limit, True, False)
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
        # Everything up to BODY of a V1 or V2 record with IPv4 hosts, in one gather: no valid
        # record is shorter, so the window never leaves a valid record.
        head = gather(arr, pos, _AT_BODY_V4)
        total = field_of(head, 0, ">i4")
        end = pos + total
        v2 = field_of(head, _POSITION_MAGIC, ">i4") == MESSAGE_MAGIC_CODE_V2
        sysflag = field_of(head, POSITION_SYSFLAG, ">i4")
        phy_offset = field_of(head, POSITION_PHYSICAL_OFFSET, ">i8")
        store_ts = field_of(head, POSITION_STORE_TIMESTAMP_V4, ">i8")
        body_len = field_of(head, _AT_BODY_V4 - 4, ">i4")
        body_at = pos + _AT_BODY_V4
        v6 = (sysflag & _V6_BITS) != 0
        if v6.any():
            store_ts_at = pos + POSITION_BORN_HOST + np.where(sysflag & _BORN_V6, 20, 8)
            body_len_at = (
                store_ts_at + 8 + RECONSUME_PREPARED_BYTES + np.where(sysflag & _STORE_V6, 20, 8)
            )
            store_ts = np.where(v6, i64(arr, store_ts_at), store_ts)
            body_len = np.where(v6, i32(arr, body_len_at), body_len)
            body_at = body_len_at + 4
        topic_len_at = body_at + body_len
        topic_len = arr[np.clip(topic_len_at, 0, len(arr) - 1)].astype(np.int64)
        if v2.any():
            topic_len = np.where(v2, i16(arr, topic_len_at), topic_len)
        topic_at = topic_len_at + 1 + v2
        props_len_at = topic_at + topic_len
        props_len = i16(arr, props_len_at)
        props_at = props_len_at + 2
        crc_at = end - CRC32_RESERVED_LENGTH
        has_crc, digits, crc_pair_sound = crc_pairs(arr, crc_at, props_at)
        ok = (
            (body_len >= 0)
            & (topic_len >= 0)
            & (topic_at + topic_len <= end)
            & (props_len >= 0)
            & (props_at + props_len == end)
            & (phy_offset == self._file_from_offset + pos)
            & (crc_pair_sound | ~has_crc)
        )
        n = valid_prefix(ok)
        n = self._crcs_match(head, pos, body_at, body_len, crc_at, has_crc, digits, n)
        # Properties no record CRC vouches for: no zero byte (a torn write), UTF-8.
        unvouched = np.flatnonzero(~has_crc[:n])
        sound = text_prefix(arr, props_at[unvouched], props_len[unvouched])
        if sound < len(unvouched):
            n = int(unvouched[sound])
        topics, n = self._topic_strings(arr, topic_at[:n], topic_len[:n])
        props_end = np.where(has_crc[:n], crc_at[:n], end[:n])
        ids, n = message_ids(arr, buf, props_at[:n], props_end)
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
            sysflag=sysflag[:n].astype(np.int32),
        )

    def _crcs_match(
        self,
        head: npt.NDArray[np.uint8],
        pos: npt.NDArray[np.int64],
        body_at: npt.NDArray[np.int64],
        body_len: npt.NDArray[np.int64],
        crc_at: npt.NDArray[np.int64],
        has_crc: npt.NDArray[np.bool_],
        digits: npt.NDArray[np.int64],
        n: int,
    ) -> int:
        """How many of the first ``n`` records lead before one whose body CRC, or record CRC
        where it has the pair, does not match."""
        buf = self._buf
        ok = crcs(buf, body_at[:n], body_at[:n] + body_len[:n]) == field_of(
            head[:n], _POSITION_BODY_CRC, ">i4"
        )
        vouched = np.flatnonzero(has_crc[:n])
        ok[vouched] &= crcs(buf, pos[vouched], crc_at[vouched]) == digits[vouched] @ _DIGIT_WEIGHTS
        return valid_prefix(ok)

    def _topic(self, raw: bytes) -> str | None:
        topic = self._topics.get(raw)
        if topic is None:
            if b"\0" in raw:  # a torn write, as check_record says
                return None
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
