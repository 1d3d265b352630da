"""One commitlog segment scanned into Arrow batches: what both engines read the log with.

The segment is mapped read-only and walked by ``broker.store.codec.scan.SegmentScanner`` (the
codec's layout, the recovery walk's stopping rules); its records leave as Arrow record batches of
at most ``batch_records_max`` rows, and ``SegmentStats`` says what the scan found. The Spark
engine runs it in a task per segment (commitlog_source.py); the in-process engine in a loop.

It reads what rocketbox writes and what Apache RocketMQ 4.x and 5.x write: magic V1 and V2,
IPv4 and IPv6 hosts, records with the record CRC pair and without it (RocketMQ's default; such a
record is checked on its body CRC and its structure, broker/store/codec/layout.py).

What each segment scan keeps, and what it only counts:

- records of application topics with a message id (``UNIQ_KEY``): kept;
- records parked under ``SCHEDULE_TOPIC_XXXX`` (delayed, not yet due) or
  ``RMQ_SYS_TRANS_HALF_TOPIC`` (half messages, RocketMQ 4.3 and later): kept with ``parked`` set
  and their REAL_TOPIC as topic; the copy a delayed message gets in its real topic when due, and
  the copy a committed transaction gets there (sysflag TRANSACTION_COMMIT_TYPE), carry the same
  id, so a parked copy proves the message stored and is not a duplicate of it;
- records of a prepared transaction in the application topic itself (sysflag
  TRANSACTION_PREPARED_TYPE: RocketMQ before 4.3, which never dispatches them to a consume
  queue): parked, like a half message, in that topic;
- records of a rolled-back transaction in the application topic (sysflag
  TRANSACTION_ROLLBACK_TYPE, RocketMQ before 4.3, not dispatched either): counted only
  (``rollback_records``), never stored: the rollback says the message was not to be delivered.
  A rolled-back message keeps its prepared (parked) record, as a 4.3+ one keeps its half;
- records of other system topics (``%RETRY%``, ``%DLQ%``, ``RMQ_SYS_*`` such as the transaction
  op records of ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, ``rmq_sys_*``): copies made by consumers and by
  the broker itself, counted only;
- records without a message id: counted only (nothing can be joined on them);
- blank padding: skipped; zeros: the end of what was written;
- a torn or damaged record: the scan of that segment ends there and says so (kind CORRUPT, its
  phy_offset and the reason). Valid-looking records after it are not read: the broker's recovery
  cuts the log at the same place.

Where a scan stopped at zeros or at a torn record, the rest of the segment past the stopped
record is read for any byte that is not zero (``written_after_phy_offset``, scan_stop.py): a
crash mid-append leaves only zeros after the torn record, so bytes there mean the scan stopped
before the log's written end, and the run is no verdict (reconcile/unread.py). A segment whose
first bytes are no record and no blank marker at all is ``NOT_A_COMMITLOG`` (a consume queue or
index file, another format).

Each kept record also carries its store host (store_hosts.py), which tells a slave's copy of a
record from a resend when several commitlogs are read (commitlog_sources.py).
"""

from __future__ import annotations

import itertools
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from broker.store.codec.decode import decode_message
from broker.store.codec.layout import END_FILE_MIN_BLANK_LENGTH, FILE_NAME_DIGITS
from broker.store.codec.message import PROPERTY_REAL_TOPIC, MessageSysFlag
from broker.store.codec.scan import ScanEndKind, SegmentScanner
from broker.store.codec.scan_columns import RecordColumns
from broker.store.codec.text_columns import CodedColumn, TextColumn
from reconcile.errors import InputError
from reconcile.scan_stop import past_stop
from reconcile.store_hosts import store_hosts

# rocketbox_api/message_rules.py's SYSTEM_TOPIC_PREFIXES and the parking topics of
# broker/timer_message.py and broker/transaction_message.py. The reconciliation reads only
# broker.store (docs/design.md §9), so they are repeated here; tests/reconcile holds them equal.
SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC")
PARKING_TOPICS = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")
# Rows per Arrow batch a scan task hands to Spark: about 6 MiB of columns.
SCAN_BATCH_RECORDS_MAX = 65_536
# Scan ends other than the scanner's: the segment could not be opened or mapped; its first bytes
# are no record and no blank marker.
UNREADABLE = "UNREADABLE"
NOT_A_COMMITLOG = "NOT_A_COMMITLOG"

# The columns of the kept records, as every engine reads them.
COMMITLOG_ARROW_SCHEMA = pa.schema(
    [
        pa.field("message_id", pa.string(), False),
        pa.field("topic", pa.string(), False),
        pa.field("parked", pa.bool_(), False),
        pa.field("queue_id", pa.int32(), False),
        pa.field("queue_offset", pa.int64(), False),
        pa.field("phy_offset", pa.int64(), False),
        pa.field("store_timestamp_ms", pa.int64(), False),
        pa.field("born_timestamp_ms", pa.int64(), False),
        pa.field("body_size_bytes", pa.int32(), False),
        pa.field("store_host", pa.string(), False),
    ]
)


@dataclass(frozen=True, slots=True)
class Segment:
    path: Path
    file_from_offset: int
    size_bytes: int
    source: int = 0  # the index of its directory among the commitlogs read


@dataclass(slots=True)
class SegmentStats:
    """What one segment scan found (summary.json's ``commitlog.segments``)."""

    segment: str
    file_from_offset: int
    source: int = 0  # the index of its directory among the commitlogs read
    size_bytes: int = 0
    records: int = 0  # valid records read, of every kind
    kept_records: int = 0  # handed to the job: application topics with an id, parked ones too
    parked_records: int = 0
    system_topic_records: int = 0
    rollback_records: int = 0  # of a rolled-back transaction in its topic: counted only
    records_without_id: int = 0
    blank_bytes: int = 0
    start_position: int = 0  # where in the segment the scan began (a record boundary)
    scanned_bytes: int = 0  # from the segment's start to where the scan stopped
    end_kind: str = ""  # ScanEndKind, UNREADABLE or NOT_A_COMMITLOG
    end_phy_offset: int = 0
    end_reason: str = ""
    # A stop at zeros or a torn record: the first byte past the stopped record that is not zero
    # (data the scan did not read), None when only zeros follow to the segment's end.
    written_after_phy_offset: int | None = None
    first_store_timestamp_ms: int | None = None
    last_store_timestamp_ms: int | None = None
    # The brokers that stored its kept records (a master's address; a slave's copy has it too).
    store_hosts: list[str] = field(default_factory=list)

    @property
    def stopped_early(self) -> bool:
        return self.end_kind in (ScanEndKind.CORRUPT, UNREADABLE, NOT_A_COMMITLOG)

    @property
    def written(self) -> bool:
        """Anything at all in it: an empty segment may be one the broker prepared ahead."""
        return bool(self.records) or self.end_kind != ScanEndKind.END or self.scanned_bytes > 0

    @property
    def ends_early(self) -> bool:
        """Zeros before the end of a segment that later segments continue: a recovery walking
        through here would stop and cut everything after it."""
        return (
            self.end_kind == ScanEndKind.END
            and self.size_bytes - self.scanned_bytes >= END_FILE_MIN_BLANK_LENGTH
        )


def commitlog_dir(path: Path) -> Path:
    """The directory of segment files: ``path`` itself, or the ``commitlog/`` of a store root."""
    if (path / "commitlog").is_dir():
        return path / "commitlog"
    if path.is_dir():
        return path
    raise InputError(f"commitlog directory {path} does not exist")


def list_segments(directory: Path, source: int = 0) -> list[Segment]:
    """The segment files in phy_offset order (names and sizes only: no record is read here);
    ``source`` is the directory's index among the commitlogs read."""
    try:
        names = sorted(p for p in directory.iterdir() if _is_segment_name(p.name))
        segments = [Segment(p, int(p.name), p.stat().st_size, source) for p in names]
    except OSError as e:
        raise InputError(f"cannot list commitlog segments in {directory}: {e}") from e
    if not segments:
        raise InputError(f"no commitlog segment files (20-digit names) in {directory}")
    return segments


def segment_gaps(segments: list[Segment]) -> list[dict[str, int]]:
    """Ranges of phy_offsets no segment covers between the first and the last: deleted files.

    Retention deletes from the oldest end only, so any gap is damage the summary reports."""
    return [
        {"from_phy_offset": a.file_from_offset + a.size_bytes, "to_phy_offset": b.file_from_offset}
        for a, b in itertools.pairwise(segments)
        if a.file_from_offset + a.size_bytes < b.file_from_offset
    ]


def scan_segment(
    path: Path,
    found: SegmentStats,
    batch_records_max: int,
    start_position: int = 0,
    end_position: int | None = None,
    look_past_stop: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The kept records of one segment as Arrow batches; fills ``found`` as it goes.
    ``start_position``: a record boundary in the segment to begin at (where an earlier scan
    stopped: an incremental run resumes there). ``end_position``: stop at the first record
    boundary at or past it (end kind PART: a part of a segment that several tasks scan).
    ``look_past_stop``: look for data past a stop at zeros or a torn record (a part that began
    where an earlier part's scan ends need not: that part looks)."""
    found.start_position = start_position
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        found.end_kind, found.end_reason = UNREADABLE, str(e)
        return
    try:
        size = os.fstat(fd).st_size
        found.size_bytes = size
        if size == 0:
            found.end_kind = ScanEndKind.END
            found.end_phy_offset = found.file_from_offset
            return
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as buf:
            # Read ahead generously: the scan reads the file once, front to back.
            buf.madvise(mmap.MADV_SEQUENTIAL)
            scanner = SegmentScanner(buf, found.file_from_offset, size)
            scanner.position = start_position
            scanner.stop_position = end_position
            topics: dict[str, int] = {}
            for cols in scanner.batches(batch_records_max):
                found.records += len(cols)
                _note_times(found, cols)
                out = _kept(cols, topics, buf, found)
                found.kept_records += out.num_rows
                if out.num_rows:
                    yield out
            end = scanner.end
            assert end is not None
            found.end_kind, found.end_reason = end.kind, end.reason
            found.end_phy_offset = found.file_from_offset + end.position
            found.scanned_bytes = end.position
            found.blank_bytes = scanner.blank_bytes
            if look_past_stop and end.kind in (ScanEndKind.END, ScanEndKind.CORRUPT):
                past = past_stop(fd, buf, size, end)
                if past.written_at is not None:
                    found.written_after_phy_offset = found.file_from_offset + past.written_at
                if past.not_a_commitlog:
                    found.end_kind, found.end_reason = NOT_A_COMMITLOG, past.not_a_commitlog
    except (OSError, ValueError) as e:
        # Deleted or truncated under us (retention on a live broker), or not mappable.
        found.end_kind, found.end_reason = UNREADABLE, str(e)
    finally:
        os.close(fd)


_USER, _PARKED, _SYSTEM = 0, 1, 2


def topic_kind(topic: str) -> int:
    if topic in PARKING_TOPICS:
        return _PARKED
    if topic.startswith(SYSTEM_TOPIC_PREFIXES):
        return _SYSTEM
    return _USER


def is_system_topic(topic: str) -> bool:
    return topic.startswith(SYSTEM_TOPIC_PREFIXES)


def _note_times(found: SegmentStats, cols: RecordColumns) -> None:
    if not len(cols):
        return
    # Store timestamps never decrease in log order (commit_log.py): first and last suffice.
    if found.first_store_timestamp_ms is None:
        found.first_store_timestamp_ms = int(cols.store_timestamp_ms[0])
    found.last_store_timestamp_ms = int(cols.store_timestamp_ms[-1])


def _kept(
    cols: RecordColumns, topics: dict[str, int], buf: mmap.mmap, found: SegmentStats
) -> pa.RecordBatch:
    """The batch as Arrow, without what is only counted and with parked copies resolved."""
    for t in cols.topic.names:
        if t not in topics:
            topics[t] = topic_kind(t)
    kinds = np.asarray([topics[t] for t in cols.topic.names], np.int8)[cols.topic.codes]
    has_id = cols.message_id.valid
    transaction = cols.sysflag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE  # its two bits
    prepared = transaction == MessageSysFlag.TRANSACTION_PREPARED_TYPE
    rolled_back = transaction == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    if not kinds.any() and has_id.all() and not (prepared | rolled_back).any():
        return _to_arrow(cols, np.zeros(len(cols), np.bool_), buf, found)
    system = kinds == _SYSTEM
    rolled_back &= ~system
    keep = ~system & ~rolled_back & has_id
    parked = keep & ((kinds == _PARKED) | prepared)
    found.system_topic_records += int(system.sum())
    found.rollback_records += int(rolled_back.sum())
    found.records_without_id += int((~system & ~rolled_back & ~has_id).sum())
    found.parked_records += int(parked.sum())
    codes, names = cols.topic.codes.copy(), list(cols.topic.names)
    for i in np.flatnonzero(parked & (kinds == _PARKED)).tolist():
        # Rare: decode the whole record with the codec to learn its real topic.
        msg = decode_message(buf, int(cols.phy_offset[i]) - found.file_from_offset)
        real = msg.properties.get(PROPERTY_REAL_TOPIC, names[codes[i]])
        codes[i] = len(names)
        names.append(real)
    cols.topic = CodedColumn(codes, names)
    return _to_arrow(cols, parked, buf, found, np.flatnonzero(keep))


def _to_arrow(
    cols: RecordColumns,
    parked: npt.NDArray[np.bool_],
    buf: mmap.mmap,
    found: SegmentStats,
    keep: npt.NDArray[np.int64] | None = None,
) -> pa.RecordBatch:
    """The records (those at ``keep``, or all) as a batch of COMMITLOG_ARROW_SCHEMA. The text
    columns go to Arrow as the scan laid them out (text_columns.py): no Python string a record."""
    ids = string_array(cols.message_id)
    codes = cols.topic.codes
    # The numeric columns by name, in the schema's order (between ``parked`` and the host).
    numbers: dict[str, npt.NDArray[Any]] = {
        name: getattr(cols, name)
        for name in ("queue_id", "queue_offset", "phy_offset", "store_timestamp_ms",
                     "born_timestamp_ms", "body_size_bytes")
    }  # fmt: skip
    if keep is not None:
        ids = ids.take(pa.array(keep))
        codes, parked = codes[keep], parked[keep]
        numbers = {name: column[keep] for name, column in numbers.items()}
    hosts = store_hosts(buf, numbers["phy_offset"] - found.file_from_offset)
    found.store_hosts = sorted(set(found.store_hosts).union(hosts.dictionary.to_pylist()))
    fields = COMMITLOG_ARROW_SCHEMA
    return pa.RecordBatch.from_arrays(
        [
            ids,
            pa.array(cols.topic.names, pa.string()).take(pa.array(codes)),
            pa.array(parked, pa.bool_()),
            *(pa.array(column, fields.field(name).type) for name, column in numbers.items()),
            hosts.dictionary.take(hosts.indices),
        ],
        schema=COMMITLOG_ARROW_SCHEMA,
    )


def string_array(column: TextColumn) -> pa.Array:
    """A TextColumn as Arrow's string array, its buffers as they are (checked as UTF-8 by the
    scan); absent values null."""
    valid = column.valid
    nulls = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.StringArray.from_buffers(
        len(column),
        pa.py_buffer(column.offsets.astype(np.int32)),
        pa.py_buffer(column.data),
        nulls,
    )


def _is_segment_name(name: str) -> bool:
    return len(name) == FILE_NAME_DIGITS and name.isdigit()
