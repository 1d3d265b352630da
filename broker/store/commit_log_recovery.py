"""Crash recovery of the commitlog: find where valid data ends, cut the rest, report it.

The walk starts at a record boundary the checkpoint vouches for and checks record by record
(whole-record CRC, magic, sizes, and that each record sits at the phy_offset it claims). It stops
at zeros (a clean end) or at the first record that fails (a torn or corrupt tail). Every valid
record it passes is handed to ``dispatch``, which rebuilds consume queues and the index.

After an abnormal exit, the bytes past the valid end are zeroed where they are not zero already:
pages of a later record may have reached the disk while an earlier one tore, and a restarted log
that appends over the cut must never walk into such leftovers after a second crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.store.codec.check import DispatchRequest, RecordKind, check_record
from broker.store.commit_log import CommitLog
from broker.store.mapped_file import MappedFile

LOG = logging.getLogger(__name__)

ZERO_SCAN_CHUNK_BYTES = 1 << 20
_ZEROS = bytes(ZERO_SCAN_CHUNK_BYTES)


@dataclass(slots=True)
class RecoveryReport:
    """What recovery found and did; logged at start and kept on the store for operators."""

    clean_shutdown: bool
    verified_from_offset: int = 0
    max_phy_offset: int = 0
    records_verified: int = 0
    truncated: bool = False
    truncate_reason: str = ""
    dropped_bytes: int = 0
    deleted_segments: list[str] = field(default_factory=list)
    consume_queue_entries_truncated: int = 0
    index_rebuilt_from_offset: int | None = None
    last_store_timestamp_ms: int = 0

    def summary(self) -> str:
        kind = "clean" if self.clean_shutdown else "abnormal"
        text = (
            # Printed by `rocketbox broker` at start: "1 record", never "1 records".
            f"{kind} recovery: verified {self.records_verified} "
            f"{'record' if self.records_verified == 1 else 'records'} from phy_offset "
            f"{self.verified_from_offset} to {self.max_phy_offset}"
        )
        if self.truncated:
            text += (
                f"; truncated the tail at {self.max_phy_offset} ({self.truncate_reason}), "
                f"dropped {self.dropped_bytes} "
                f"{'byte' if self.dropped_bytes == 1 else 'bytes'}, "
                f"deleted segments {self.deleted_segments}"
            )
        if self.consume_queue_entries_truncated:
            text += f"; removed {self.consume_queue_entries_truncated} consume-queue entries"
        if self.index_rebuilt_from_offset is not None:
            text += f"; index rebuilt from phy_offset {self.index_rebuilt_from_offset}"
        return text


def recover_commit_log(
    commit_log: CommitLog,
    start_offset: int,
    report: RecoveryReport,
    check_crc: bool,
    dispatch: Callable[[DispatchRequest], None],
    require_record_crc: bool = True,
) -> None:
    """Walk, dispatch and cut. Fills ``report``; leaves the log's positions at the valid end."""
    mfq = commit_log.mapped_file_queue
    files = mfq.files
    if not files:
        return
    last = files[-1]
    off = max(start_offset, files[0].file_from_offset)
    if off > last.file_from_offset + last.file_size:
        # The checkpoint points past the files on disk: trust none of the last segment.
        off = last.file_from_offset
    report.verified_from_offset = off
    reason = ""
    while True:
        mf = mfq.find_by_offset(off)
        if mf is None:
            break
        res = check_record(
            mf.buffer, off - mf.file_from_offset, mf.file_size, check_crc, require_record_crc
        )
        if res.kind == RecordKind.BLANK:
            off += res.size
            continue
        req = res.request
        if res.kind == RecordKind.MESSAGE and req is not None:
            if req.commit_log_offset != off:
                reason = f"record claims phy_offset {req.commit_log_offset}"
                break
            dispatch(req)
            report.records_verified += 1
            report.last_store_timestamp_ms = req.store_timestamp_ms
            off += res.size
            continue
        reason = res.reason  # END (empty) or CORRUPT (torn)
        break
    report.max_phy_offset = off
    _cut_tail(commit_log, off, reason, report)


def _cut_tail(commit_log: CommitLog, valid_end: int, reason: str, report: RecoveryReport) -> None:
    mfq = commit_log.mapped_file_queue
    holder = mfq.find_by_offset(valid_end)
    if holder is not None:
        pos = valid_end - holder.file_from_offset
        dropped = _zero_dirty_tail(holder, pos)
        holder.wrote_position = pos
        holder.flushed_position = min(holder.flushed_position, pos)
        report.dropped_bytes += dropped
    later = [mf for mf in mfq.files if mf.file_from_offset > valid_end]
    for mf in later:
        dropped = _zero_dirty_tail(mf, 0)
        report.dropped_bytes += dropped
        mf.wrote_position = 0
        if dropped:
            report.deleted_segments.append(mf.path.name)
    # Empty later segments (prepared by the allocator) go too, but are no damage to report.
    mfq.truncate_dirty_files(valid_end)
    if reason or report.dropped_bytes:
        report.truncated = True
        report.truncate_reason = reason or "stray bytes past the end"
        LOG.warning(
            "commitlog truncated at phy_offset %s: %s; %s bytes dropped, segments deleted: %s",
            valid_end,
            report.truncate_reason,
            report.dropped_bytes,
            report.deleted_segments,
        )


def _zero_dirty_tail(mf: MappedFile, pos: int) -> int:
    """Zero the non-zero chunks of ``mf`` from ``pos`` to its end; returns the span in bytes
    from ``pos`` to the last non-zero byte found (0 when it was all zeros)."""
    buf = mf.buffer
    last_dirty_end = pos
    start = pos
    while start < mf.file_size:
        end = min(start + ZERO_SCAN_CHUNK_BYTES, mf.file_size)
        if buf[start:end] != _ZEROS[: end - start]:
            chunk = buf[start:end]
            last_dirty_end = start + len(chunk.rstrip(b"\0"))
            mf.write_at(start, _ZEROS[: end - start])
        start = end
    return last_dirty_end - pos
