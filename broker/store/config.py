"""Typed, frozen configuration of the message store (RocketMQ's MessageStoreConfig).

Built once at the composition root and passed down; nothing in the store reads the environment.
Every size, interval and limit carries its unit in its name; every limit ends in ``_max``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from broker.store.errors import StoreConfigError
from rocketbox_api.message_rules import BODY_BYTES_MAX
from rocketbox_api.names import TOPIC_LENGTH_MAX

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# Bytes a commitlog record needs besides its body, topic and properties (see codec/layout.py).
RECORD_FIXED_BYTES_MAX = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 20 + 8 + 20 + 4 + 8 + 4 + 1 + 2
# RocketMQ stores the properties length in a signed short.
PROPERTIES_LENGTH_MAX = 32767


class FlushDiskType(enum.Enum):
    """When a put is answered relative to the fsync of its bytes."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclass(frozen=True, slots=True)
class MessageStoreConfig:
    """Every knob of the store. Defaults follow RocketMQ's broker defaults."""

    store_path_root_dir: Path
    # CommitLog segments: RocketMQ's 1 GiB default. Tests use small ones.
    mapped_file_size_commit_log_bytes: int = GIB
    # ConsumeQueue segments hold this many 20-byte entries (RocketMQ: 300,000 = 5.7 MiB).
    mapped_file_size_consume_queue_entries: int = 300_000
    # IndexFile geometry (RocketMQ: 5M slots, 20M entries, about 420 MiB a file). RocketMQ's
    # maxHashSlotNum is the slot count, a size rather than a limit, hence no _max here.
    hash_slot_num: int = 5_000_000
    index_num_max: int = 20_000_000
    message_index_enable: bool = True
    # Prepare and pre-fault the next commitlog segment in the background (mapped_file.py says
    # why); costs one extra write of each segment's size, off the put path.
    warm_mapped_file_enable: bool = True

    # RocketMQ's message rules (rocketbox_api/message_rules.py) are the defaults of these two.
    message_size_bytes_max: int = BODY_BYTES_MAX
    topic_length_max: int = TOPIC_LENGTH_MAX
    properties_length_max: int = PROPERTIES_LENGTH_MAX

    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    # ASYNC_FLUSH: fsync every interval when at least this many 4 KiB pages are dirty, and
    # unconditionally every thorough interval (RocketMQ's FlushRealTimeService).
    flush_interval_commit_log_ms: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval_ms: int = 10_000
    # SYNC_FLUSH: a put whose bytes are not durable within this is answered FLUSH_DISK_TIMEOUT.
    sync_flush_timeout_ms: int = 5_000
    # Group commit: the most puts waiting on one fsync before new puts are refused.
    group_commit_requests_max: int = 100_000
    flush_interval_consume_queue_ms: int = 1_000
    # A put lock held longer than this makes the store report OS_PAGE_CACHE_BUSY.
    os_page_cache_busy_timeout_ms: int = 1_000

    # Retention and disk guard (RocketMQ's CleanCommitLogService).
    file_reserved_hours: float = 72.0
    clean_resource_interval_ms: int = 10_000
    # Files deleted per cleaning pass, so one pass never stalls the disk.
    delete_files_batch_max: int = 10
    # Above this share of the disk in use, puts are refused (SERVICE_NOT_AVAILABLE).
    disk_used_space_ratio_max: float = 0.90

    # Recovery verifies whole-record CRCs from the checkpoint forward.
    check_crc_on_recover: bool = True
    # Accept records without the __CRC32# property (written by another tool) on recovery; off,
    # a record of ours whose CRC property was damaged cannot pass on its body CRC alone.
    accept_records_without_crc: bool = False

    def __post_init__(self) -> None:
        record_bytes_max = (
            RECORD_FIXED_BYTES_MAX
            + self.message_size_bytes_max
            + self.topic_length_max
            + self.properties_length_max
        )
        checks: list[tuple[bool, str]] = [
            (
                self.mapped_file_size_commit_log_bytes >= record_bytes_max,
                "mapped_file_size_commit_log_bytes must hold the largest record "
                f"({record_bytes_max} bytes: message_size_bytes_max + topic + properties + header)",
            ),
            (
                self.mapped_file_size_consume_queue_entries > 0,
                "mapped_file_size_consume_queue_entries must be > 0",
            ),
            (self.hash_slot_num > 0, "hash_slot_num must be > 0"),
            (self.index_num_max > 1, "index_num_max must be > 1"),
            (self.message_size_bytes_max > 0, "message_size_bytes_max must be > 0"),
            (
                0 < self.topic_length_max <= TOPIC_LENGTH_MAX,
                f"topic_length_max must be in 1..{TOPIC_LENGTH_MAX}",
            ),
            (
                0 < self.properties_length_max <= PROPERTIES_LENGTH_MAX,
                f"properties_length_max must be in 1..{PROPERTIES_LENGTH_MAX}",
            ),
            (self.flush_interval_commit_log_ms > 0, "flush_interval_commit_log_ms must be > 0"),
            (self.sync_flush_timeout_ms > 0, "sync_flush_timeout_ms must be > 0"),
            (self.group_commit_requests_max > 0, "group_commit_requests_max must be > 0"),
            (self.file_reserved_hours > 0, "file_reserved_hours must be > 0"),
            (self.delete_files_batch_max > 0, "delete_files_batch_max must be > 0"),
            (
                0.0 < self.disk_used_space_ratio_max <= 1.0,
                "disk_used_space_ratio_max must be in (0, 1]",
            ),
        ]
        for ok, why in checks:
            if not ok:
                raise StoreConfigError(why)

    @property
    def store_path_commit_log(self) -> Path:
        return self.store_path_root_dir / "commitlog"

    @property
    def store_path_consume_queue(self) -> Path:
        return self.store_path_root_dir / "consumequeue"

    @property
    def store_path_index(self) -> Path:
        return self.store_path_root_dir / "index"

    @property
    def store_checkpoint_path(self) -> Path:
        return self.store_path_root_dir / "checkpoint"

    @property
    def abort_file_path(self) -> Path:
        return self.store_path_root_dir / "abort"

    @property
    def lock_file_path(self) -> Path:
        return self.store_path_root_dir / "lock"
