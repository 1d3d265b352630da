"""DefaultMessageStore: the store's one entry point (RocketMQ's DefaultMessageStore).

Life cycle: ``start()`` locks the directory (one writer process), recovers (store_recovery.py), then
runs the services: dispatcher, commitlog flush (periodic or group commit), consume-queue/index
flush with the checkpoint, and the cleaner. ``shutdown()`` stops intake, lets every service
finish, flushes everything, writes the checkpoint and removes the abort marker, so the next
start knows the exit was clean.

Puts answer with a PutMessageStatus; reads with a GetMessageStatus or None. Faults that are not
outcomes (a locked directory, a store not started) raise StoreError subclasses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from broker.store.checkpoint import StoreCheckpoint, record_logics_flushed
from broker.store.clean import CleanResult, StoreCleaner
from broker.store.codec.check import DispatchRequest
from broker.store.codec.encode import EncodedMessage, encode_message
from broker.store.codec.message import (
    NO_HOST,
    HostAddress,
    MessageExtBrokerInner,
)
from broker.store.commit_log import CommitLog
from broker.store.commit_log_recovery import RecoveryReport
from broker.store.config import MessageStoreConfig
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.dispatch import LogicsDispatcher, ReputMessageService
from broker.store.errors import MessageIllegalError, StoreNotRunningError
from broker.store.flush import FlushConsumeQueueService, GroupCommitService, commit_log_flusher
from broker.store.index_service import IndexService
from broker.store.message_reader import MessageReader
from broker.store.service_thread import ServiceThread
from broker.store.status import (
    AppendMessageResult,
    PutMessageResult,
    PutMessageStatus,
    ReplicaWait,
    flush_timeouts,
    illegal_result,
)
from broker.store.store_lock import StoreLock
from broker.store.store_recovery import recover_store
from broker.store.validation import validate_message

LOG = logging.getLogger(__name__)

# Looked up once: on Python 3.11 an attribute of an Enum class is a slow lookup on every put.
_PUT_OK = PutMessageStatus.PUT_OK


class DefaultMessageStore(MessageReader):
    def __init__(
        self,
        config: MessageStoreConfig,
        store_host: HostAddress = NO_HOST,
        on_flush_seconds: Callable[[float], None] | None = None,
    ) -> None:
        """``on_flush_seconds`` is told how long each commitlog fsync took (the metrics)."""
        self.config = config
        self._on_flush_seconds = on_flush_seconds
        self.store_host = store_host
        self.commit_log = CommitLog(config)
        self.consume_queue_store = ConsumeQueueStore(
            config.store_path_consume_queue, config.mapped_file_size_consume_queue_entries
        )
        self.index_service = IndexService(
            config.store_path_index, config.hash_slot_num, config.index_num_max
        )
        self._logics = LogicsDispatcher(
            self.consume_queue_store, self.index_service, config.message_index_enable
        )
        self.recovery_report: RecoveryReport | None = None
        self._arrival_listeners: list[Callable[[DispatchRequest], None]] = []
        self._running = False
        self._flush_failed = False
        # Why puts are refused (SERVICE_NOT_AVAILABLE), when they are: a failed fsync, or a
        # slave's store, whose log only its master's bytes may extend. One check for both.
        self._writes_refused: str | None = None
        self._lock = StoreLock(config.lock_file_path, config.store_path_root_dir)
        self._sync_flush_timeout_s = config.sync_flush_timeout_ms / 1000
        self._checkpoint: StoreCheckpoint | None = None
        self._commit_log_flushed_offset = 0
        self._services: list[ServiceThread] = []
        self._group_commit: GroupCommitService | None = None
        self._reput: ReputMessageService | None = None
        self._cleaner: StoreCleaner | None = None
        # A SYNC_MASTER's wait for a slave to hold a put (broker/ha/ha_service.py).
        self.replica_wait: ReplicaWait | None = None

    # == life cycle ================================================================================
    def lock(self) -> None:
        """Take the directory's lock (StoreLockedError naming its holder) before ``start``: a broker
        does before binding its ports, so a second one hears the directory is taken, not a port."""
        self._lock.acquire()

    def unlock(self) -> None:
        """Give back a lock ``lock`` took for a store that did not start."""
        if not self._running:
            self._lock.release()

    def start(self) -> RecoveryReport:
        cfg = self.config
        self.lock()
        try:
            report = self._recover()
        except BaseException:
            self._lock.release()
            raise
        self.recovery_report = report
        cfg.abort_file_path.touch()
        self._start_services(report.max_phy_offset)
        self._running = True
        LOG.info("store started at %s: %s", cfg.store_path_root_dir, report.summary())
        return report

    def _recover(self) -> RecoveryReport:
        checkpoint = self._checkpoint = StoreCheckpoint(self.config.store_checkpoint_path)
        report = recover_store(
            self.config, checkpoint, self.commit_log, self.consume_queue_store,
            self.index_service, self._logics.dispatch,
        )  # fmt: skip
        self._commit_log_flushed_offset = report.max_phy_offset
        return report

    def _timed_flush(self) -> int:
        assert self._on_flush_seconds is not None
        started_s = time.perf_counter()
        try:
            return self.commit_log.flush()
        finally:
            self._on_flush_seconds(time.perf_counter() - started_s)

    @property
    def commit_log_flushed_offset(self) -> int:
        """The phy_offset up to which the commitlog is known to be on disk."""
        return self._commit_log_flushed_offset

    def _start_services(self, reput_from_offset: int) -> None:
        cfg = self.config
        reput = self._reput = ReputMessageService(
            self.commit_log, [self._dispatch_live], reput_from_offset
        )
        flush = self.commit_log.flush if self._on_flush_seconds is None else self._timed_flush
        flusher = commit_log_flusher(
            cfg, flush, self.commit_log.dirty_bytes, self._commit_log_flushed_offset,
            self._on_commit_log_flushed, self._on_flush_error,
        )  # fmt: skip
        if isinstance(flusher, GroupCommitService):
            self._group_commit = flusher
        logics = FlushConsumeQueueService(self.flush_logics, cfg.flush_interval_consume_queue_ms)
        cleaner = self._cleaner = StoreCleaner(
            cfg, self.commit_log, self.consume_queue_store, self.index_service,
            safe_offset=lambda: min(reput.reput_from_offset, self._commit_log_flushed_offset),
        )  # fmt: skip
        cleaner.check_disk()
        # Stop order is the reverse: cleaner, logics, flush, then the dispatcher drains.
        self._services = [reput, flusher, logics, cleaner]
        if self.commit_log.allocator is not None:
            self._services.insert(0, self.commit_log.allocator)
            self.commit_log.prepare_next_segment()
        for service in self._services:
            service.start()

    def shutdown(self) -> None:
        """Stop intake, finish in-flight work, flush, checkpoint, and release the directory."""
        if not self._running:
            return
        self._running = False
        self.commit_log.wait_for_appends_in_progress()
        for service in reversed(self._services):
            service.shutdown()
        self._services = []
        self._commit_log_flushed_offset = self.commit_log.flush()
        self.flush_logics()
        self.consume_queue_store.close()
        self.index_service.close()
        self.commit_log.close()
        if self._checkpoint is not None:
            self._checkpoint.close()
        if not self._flush_failed:
            # Only a fully flushed exit counts as clean.
            self.config.abort_file_path.unlink(missing_ok=True)
        self._lock.release()
        LOG.info("store at %s shut down", self.config.store_path_root_dir)

    def __enter__(self) -> DefaultMessageStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def is_running(self) -> bool:
        return self._running

    # == dispatch =================================================================================
    def _dispatch_live(self, req: DispatchRequest) -> None:
        self._logics.dispatch(req)
        for listener in self._arrival_listeners:
            listener(req)

    def add_message_arriving_listener(self, listener: Callable[[DispatchRequest], None]) -> None:
        """Called on the dispatcher thread for each record once it is readable (long polling)."""
        self._arrival_listeners.append(listener)

    @property
    def group_commit_flush_count(self) -> int:
        """fsyncs group commit has done (0 under ASYNC_FLUSH): puts per fsync = puts / this."""
        return self._group_commit.flush_count if self._group_commit else 0

    @property
    def dispatch_behind_bytes(self) -> int:
        return self._reput.behind_bytes if self._reput else 0

    def wait_dispatched(self, timeout_s: float) -> bool:
        """Wait until every appended record is readable through consume queues and index."""
        deadline = time.monotonic() + timeout_s
        while self.dispatch_behind_bytes and time.monotonic() < deadline:
            time.sleep(0.001)
        return not self.dispatch_behind_bytes

    # == flush bookkeeping =========================================================================
    def _on_commit_log_flushed(self, flushed_offset: int) -> None:
        self._commit_log_flushed_offset = max(self._commit_log_flushed_offset, flushed_offset)

    def _on_flush_error(self, error: OSError) -> None:
        self._flush_failed = True
        self._writes_refused = "a commitlog fsync failed; the store no longer accepts writes"

    def refuse_puts(self, detail: str) -> None:
        """Refuse every put from now on (a slave's store: only its master's bytes go in)."""
        self._writes_refused = detail

    def flush_logics(self) -> None:
        """Flush consume queues and index, then record in the checkpoint how far they reach."""
        if self._checkpoint is not None:
            dispatched = (
                self._reput.reput_from_offset if self._reput else self.commit_log.max_offset
            )
            record_logics_flushed(
                self._checkpoint, dispatched, self._commit_log_flushed_offset,
                self.commit_log.last_store_timestamp_ms, self._flush_logics_files,
            )  # fmt: skip

    def _flush_logics_files(self) -> None:
        self.consume_queue_store.flush_all()
        self.index_service.flush()

    # == writing ==================================================================================
    # One put path: ``_append`` validates, encodes and appends one message or many alike; the two
    # entry points differ only in how they wait for the fsync under SYNC_FLUSH. A single message
    # is a batch of one: the batch costs it one list, little beside its own Python per message.
    def put_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> list[PutMessageResult]:
        """Store ``msgs`` in order; one result each. Blocks for the fsync under SYNC_FLUSH."""
        results, end_offset = self._append(msgs)
        group_commit = self._group_commit
        if end_offset < 0 or group_commit is None:
            return results
        if group_commit.wait_flushed(end_offset, self._sync_flush_timeout_s):
            return results
        return flush_timeouts(results)

    async def async_put_messages(
        self, msgs: Sequence[MessageExtBrokerInner]
    ) -> list[PutMessageResult]:
        """As ``put_messages``, but the event loop runs on while the fsync is under way."""
        results, end_offset = self._append(msgs)
        group_commit = self._group_commit
        if (
            end_offset >= 0
            and group_commit is not None
            and not await group_commit.wait_flushed_async(end_offset, self._sync_flush_timeout_s)
        ):
            results = flush_timeouts(results)
        if self.replica_wait is None:  # all but a SYNC_MASTER: this check is all they pay
            return results
        return await self.replica_wait(results)

    def append_to_commit_log(self, start_phy_offset: int, data: bytes) -> str | None:
        """A slave's write (CommitLog.append_data), dispatched as any append; why it refused."""
        if not self._running or self._flush_failed:
            return "a commitlog fsync failed" if self._running else "the store is not running"
        refused = self.commit_log.append_data(start_phy_offset, data)
        if refused is None:
            self._wake_dispatch()
        return refused

    def _append(self, msgs: Sequence[MessageExtBrokerInner]) -> tuple[list[PutMessageResult], int]:
        """Validate, encode and append. Returns one result per message, in order, and under
        SYNC_FLUSH the offset the caller must see flushed (-1 when there is none to wait for)."""
        refusal = self._refusal()
        if refusal is not None:
            return [refusal] * len(msgs), -1
        config = self.config
        batch: list[tuple[MessageExtBrokerInner, EncodedMessage]] = []
        illegal: list[tuple[int, PutMessageResult]] | None = None  # made only when one is
        # No enumerate (an iterator and a tuple per message): a refused message's index is
        # known without it, since every message before it is in one of the two lists.
        for msg in msgs:
            try:
                validate_message(msg, config)
            except MessageIllegalError as e:
                if illegal is None:
                    illegal = []
                illegal.append((len(batch) + len(illegal), illegal_result(e)))
                continue
            if msg.store_host == NO_HOST:
                msg.store_host = self.store_host
            batch.append((msg, encode_message(msg, msg.sysflag)))
        results, end_offset = self._append_valid(batch)
        if illegal is not None:
            # In ascending order, each lands where its message stood.
            for i, result in illegal:
                results.insert(i, result)
        return results, end_offset

    def _append_valid(
        self, batch: list[tuple[MessageExtBrokerInner, EncodedMessage]]
    ) -> tuple[list[PutMessageResult], int]:
        if not batch:
            return [], -1
        group_commit = self._group_commit
        if group_commit is not None and not group_commit.admit():
            return [self._busy()] * len(batch), -1
        appended, error = self.commit_log.append_messages(batch)
        self._wake_dispatch()
        # A plain loop, not a list comprehension: on Python 3.11 a comprehension is a function
        # made and called each time, a measurable share of a single put (docs/benchmarks.md).
        results: list[PutMessageResult] = []
        for append in appended:
            results.append(PutMessageResult(_PUT_OK, append))
        if error is not None:
            # A segment could not be created: the messages from there on were not written.
            failed = PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, detail=str(error))
            results.extend([failed] * (len(batch) - len(appended)))
        if group_commit is None:
            return results, -1
        if not appended:
            group_commit.release()
            return results, -1
        last = appended[-1]
        return results, last.wrote_offset + last.wrote_bytes

    def _wake_dispatch(self) -> None:
        """An append is dispatched by the put that made it (broker/store/dispatch.py)."""
        if self._reput is not None:
            self._reput.dispatch_appended()

    def _busy(self) -> PutMessageResult:
        return PutMessageResult(
            PutMessageStatus.OS_PAGE_CACHE_BUSY,
            detail=f"group_commit_requests_max={self.config.group_commit_requests_max} "
            "puts already wait for the disk",
        )

    def _refusal(self) -> PutMessageResult | None:
        if not self._running:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, detail="the store is not running"
            )
        if self._writes_refused is not None:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, detail=self._writes_refused
            )
        if self._cleaner is not None and self._cleaner.disk_full:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, detail=self._cleaner.disk_full_detail()
            )
        held_ms = self.commit_log.lock_held_ms()
        if held_ms > self.config.os_page_cache_busy_timeout_ms:
            return PutMessageResult(
                PutMessageStatus.OS_PAGE_CACHE_BUSY,
                detail=f"the put lock has been held {held_ms} ms "
                f"(os_page_cache_busy_timeout_ms={self.config.os_page_cache_busy_timeout_ms})",
            )
        return None

    # == retention ================================================================================
    def clean_expired_files(self, now_ms: int | None = None) -> CleanResult:
        """One retention pass now (the cleaner also runs one every clean_resource_interval_ms)."""
        if self._cleaner is None:
            raise StoreNotRunningError("the store is not started")
        return self._cleaner.clean_expired_files(
            time.time_ns() // 1_000_000 if now_ms is None else now_ms
        )

    def check_disk(self) -> bool:
        if self._cleaner is None:
            raise StoreNotRunningError("the store is not started")
        return self._cleaner.check_disk()


__all__ = ["AppendMessageResult", "DefaultMessageStore"]
