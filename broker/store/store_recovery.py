"""Recovery of the whole store at start: which offset to walk the commitlog from, and putting
consume queues, index, checkpoint and the queue-offset table back in step with what the walk found
(commit_log_recovery.py walks the log and cuts its torn tail).

The walk starts at the lowest offset any part still needs: the checkpoint's flushed and dispatched
offsets; the start of index files dropped after an abnormal exit; the whole log when there is no
valid checkpoint or when consume queues or index were deleted.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.store.checkpoint import StoreCheckpoint
from broker.store.codec.check import DispatchRequest
from broker.store.commit_log import CommitLog
from broker.store.commit_log_recovery import RecoveryReport, recover_commit_log
from broker.store.config import MessageStoreConfig
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.index_service import IndexService


def recover_store(
    cfg: MessageStoreConfig,
    checkpoint: StoreCheckpoint,
    commit_log: CommitLog,
    consume_queues: ConsumeQueueStore,
    index: IndexService,
    dispatch: Callable[[DispatchRequest], None],
) -> RecoveryReport:
    """Recover every part; on return all of it is flushed and the checkpoint says so."""
    clean = not cfg.abort_file_path.exists()
    cp = checkpoint.state
    mfq = commit_log.mapped_file_queue
    mfq.load()
    consume_queues.load()
    consume_queues.recover()
    index_rebuild_from = index.load(clean, cp.index_dispatched_offset)

    # Without a valid checkpoint nothing vouches for any offset: walk the whole log.
    start = mfq.min_offset
    if checkpoint.loaded:
        start = min(
            cp.commit_log_flushed_offset,
            cp.logics_dispatched_offset,
            cp.index_dispatched_offset,
        )
    has_log = bool(mfq.files)
    if index_rebuild_from is not None:
        start = min(start, index_rebuild_from)
    # Derived data deleted (or never written): rebuild it from the whole log.
    if has_log and consume_queues.is_empty():
        start = mfq.min_offset
    if has_log and cfg.message_index_enable and index.max_indexed_phy_offset < 0:
        start = mfq.min_offset
    start = min(start, mfq.max_offset)

    report = RecoveryReport(clean_shutdown=clean, index_rebuilt_from_offset=index_rebuild_from)
    verify_from = max(start, mfq.min_offset)
    # Segments from the walk's start on may hold bytes that reached only the page cache
    # before the crash: sync them before anything new is acknowledged.
    for mf in mfq.files:
        if mf.file_from_offset + mf.file_size > verify_from:
            mf.flushed_position = 0
    recover_commit_log(
        commit_log,
        start,
        report,
        cfg.check_crc_on_recover,
        dispatch,
        require_record_crc=not cfg.accept_records_without_crc,
    )
    report.consume_queue_entries_truncated = consume_queues.truncate_dirty(report.max_phy_offset)
    # Entries that point below the log's first segment were left by retention: skip them.
    consume_queues.correct_min_offset(mfq.min_offset)
    commit_log.topic_queue_table = {
        (topic, qid): cq.max_offset_in_queue
        for topic in consume_queues.topics()
        for qid in consume_queues.queue_ids(topic)
        if (cq := consume_queues.find(topic, qid)) is not None
    }
    commit_log.set_last_store_timestamp(
        max(report.last_store_timestamp_ms, cp.physic_msg_timestamp_ms)
    )
    commit_log.flush()
    consume_queues.flush_all()
    index.flush()
    end = report.max_phy_offset
    cp.commit_log_flushed_offset = cp.logics_dispatched_offset = cp.index_dispatched_offset = end
    checkpoint.flush()
    return report
