"""Retention and the disk guard (RocketMQ's CleanCommitLogService / CleanConsumeQueueService).

Retention deletes commitlog segments whose last write is older than ``file_reserved_hours``,
oldest first, and only as a prefix of the log: a segment is deleted only if every older one is
too, so the log stays contiguous. The active segment (the last one) is never deleted, nor one the
dispatcher or the flush has not finished with. Consume-queue and index files are derived from
the log; they go when every record they point at has gone.

The disk guard measures the share of the store's filesystem in use. Above
``disk_used_space_ratio_max`` the store refuses puts (SERVICE_NOT_AVAILABLE) until it falls again.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker.store.commit_log import CommitLog
from broker.store.config import MessageStoreConfig
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.index_service import IndexService
from broker.store.mapped_file import MappedFile
from broker.store.service_thread import ServiceThread

LOG = logging.getLogger(__name__)

MS_PER_HOUR = 3_600_000


@dataclass(slots=True)
class CleanResult:
    commit_log: list[Path] = field(default_factory=list)
    consume_queue: list[Path] = field(default_factory=list)
    index: list[Path] = field(default_factory=list)


class StoreCleaner(ServiceThread):
    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueStore,
        index: IndexService,
        safe_offset: Callable[[], int],
    ) -> None:
        super().__init__("StoreCleaner")
        self._config = config
        self._commit_log = commit_log
        self._consume_queues = consume_queues
        self._index = index
        # Below this phy_offset everything is flushed and dispatched: only such segments go.
        self._safe_offset = safe_offset
        self.disk_used_ratio = 0.0
        self.disk_full = False

    def run(self) -> None:
        while not self.is_stopped:
            self.wait_for_running(self._config.clean_resource_interval_ms)
            if self.is_stopped:
                return
            try:
                self.check_disk()
                self.clean_expired_files(time.time_ns() // 1_000_000)
            except OSError as e:
                LOG.error("cleaning pass failed: %s", e)

    def check_disk(self) -> bool:
        """Measure disk use; returns True when puts must be refused."""
        usage = shutil.disk_usage(self._config.store_path_root_dir)
        self.disk_used_ratio = (usage.total - usage.free) / usage.total if usage.total else 1.0
        full = self.disk_used_ratio > self._config.disk_used_space_ratio_max
        if full != self.disk_full:
            LOG.warning(
                "disk usage %.3f %s disk_used_space_ratio_max %.3f: puts %s",
                self.disk_used_ratio,
                ">" if full else "<=",
                self._config.disk_used_space_ratio_max,
                "refused" if full else "accepted again",
            )
        self.disk_full = full
        return full

    def disk_full_detail(self) -> str:
        return (
            f"disk usage {self.disk_used_ratio:.3f} is above "
            f"disk_used_space_ratio_max={self._config.disk_used_space_ratio_max}"
        )

    def clean_expired_files(self, now_ms: int) -> CleanResult:
        result = CleanResult()
        reserved_ms = self._config.file_reserved_hours * MS_PER_HOUR
        mfq = self._commit_log.mapped_file_queue
        safe = self._safe_offset()
        doomed: list[MappedFile] = []
        for mf in mfq.files[:-1]:  # never the active segment
            if len(doomed) >= self._config.delete_files_batch_max:
                break
            if mf.file_from_offset + mf.file_size > safe:
                break
            if now_ms - mf.last_modified_ms < reserved_ms:
                break  # only a prefix: the log stays contiguous
            doomed.append(mf)
        if doomed:
            result.commit_log = [mf.path for mf in doomed]
            mfq.remove_files(doomed)
            LOG.info("retention deleted commitlog segments %s", [p.name for p in result.commit_log])
        min_offset = self._commit_log.min_offset
        result.consume_queue = self._consume_queues.delete_expired(min_offset)
        result.index = self._index.delete_expired_file(min_offset)
        return result
