"""The store checkpoint (RocketMQ's StoreCheckpoint): how far each part is known durable.

File layout (one 4 KiB block, big-endian; rewritten in place with pwrite + fdatasync):

    | offset | bytes | field                        | meaning                                      |
    |--------|-------|------------------------------|----------------------------------------------|
    | 0      | 8     | physic_msg_timestamp_ms      | store time of the last flushed record        |
    | 8      | 8     | logics_msg_timestamp_ms      | when consume queues were last flushed        |
    | 16     | 8     | index_msg_timestamp_ms       | when the index was last flushed              |
    | 24     | 8     | commit_log_flushed_offset    | every commitlog byte below is durable        |
    | 32     | 8     | logics_dispatched_offset     | consume-queue entries of records below it    |
    |        |       |                              | are durable                                  |
    | 40     | 8     | index_dispatched_offset      | index entries of records below it are        |
    |        |       |                              | durable                                      |
    | 48     | 4     | crc32 of bytes 0..47         | a torn checkpoint reads as absent            |

All three offsets are record boundaries, so recovery can start walking the log at any of them.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger(__name__)

CHECKPOINT_FILE_SIZE_BYTES = 4096
_FIELDS = struct.Struct(">qqqqqq")
_CRC = struct.Struct(">I")


@dataclass(slots=True)
class CheckpointState:
    physic_msg_timestamp_ms: int = 0
    logics_msg_timestamp_ms: int = 0
    index_msg_timestamp_ms: int = 0
    commit_log_flushed_offset: int = 0
    logics_dispatched_offset: int = 0
    index_dispatched_offset: int = 0


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        existed = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.state = CheckpointState()
        self.loaded = False  # True when a valid checkpoint was read from disk
        if existed:
            self._read()

    def _read(self) -> None:
        raw = os.pread(self._fd, _FIELDS.size + _CRC.size, 0)
        if len(raw) < _FIELDS.size + _CRC.size:
            LOG.warning("checkpoint %s is short; recovering without it", self.path)
            return
        (crc,) = _CRC.unpack_from(raw, _FIELDS.size)
        if zlib.crc32(raw[: _FIELDS.size]) != crc:
            LOG.warning("checkpoint %s fails its CRC; recovering without it", self.path)
            return
        self.state = CheckpointState(*_FIELDS.unpack_from(raw, 0))
        self.loaded = True

    def flush(self) -> None:
        s = self.state
        fields = _FIELDS.pack(
            s.physic_msg_timestamp_ms,
            s.logics_msg_timestamp_ms,
            s.index_msg_timestamp_ms,
            s.commit_log_flushed_offset,
            s.logics_dispatched_offset,
            s.index_dispatched_offset,
        )
        block = fields + _CRC.pack(zlib.crc32(fields))
        os.pwrite(self._fd, block.ljust(CHECKPOINT_FILE_SIZE_BYTES, b"\0"), 0)
        os.fdatasync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def record_logics_flushed(
    checkpoint: StoreCheckpoint,
    dispatched: int,
    commit_log_flushed_offset: int,
    last_store_timestamp_ms: int,
    flush_logics_files: Callable[[], None],
) -> None:
    """Flush consume queues and index (``flush_logics_files``), then record in ``checkpoint``
    how far they reach: every record below ``dispatched``."""
    cp = checkpoint.state
    if (
        dispatched == cp.logics_dispatched_offset
        and commit_log_flushed_offset == cp.commit_log_flushed_offset
    ):
        return  # nothing moved: spare the disk an fsync a second on an idle store
    flush_logics_files()
    now_ms = time.time_ns() // 1_000_000
    cp.logics_dispatched_offset = cp.index_dispatched_offset = dispatched
    cp.logics_msg_timestamp_ms = cp.index_msg_timestamp_ms = now_ms
    cp.commit_log_flushed_offset = commit_log_flushed_offset
    cp.physic_msg_timestamp_ms = last_store_timestamp_ms
    checkpoint.flush()
