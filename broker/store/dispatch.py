"""The dispatcher (RocketMQ's ReputMessageService): builds derived data from the commitlog.

It walks the commitlog from ``reput_from_offset`` in log order and hands every record to each
dispatcher target (consume queue, index, message-arrival listeners). Consume queues and index
are therefore pure functions of the log and are rebuilt by walking it again.

Records appended by this process arrive through the commitlog's hand-off queue as the exact
DispatchRequest their bytes decode to; anything not in the queue (it was full, or the record was
written before a restart) is read back and decoded from the log.

A put dispatches what it appended itself, on its own thread, right after the append
(``dispatch_appended``): no thread hop and no polling, which cost a busy broker CPU on every
message in GIL hand-offs and an idle one a thousand wake-ups a second. Rounds are serialised
by a lock; a put that finds a round under way leaves its records to that thread, waking it (a
round reads the log's end when it starts, so it may have missed them). The service thread is
the safety net: it dispatches what no put did (records read back after a restart) and, at
shutdown, everything appended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from broker.store.codec.check import DispatchRequest, RecordKind, check_record
from broker.store.codec.message import KEY_SEPARATOR, MessageSysFlag
from broker.store.commit_log import CommitLog
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.index_service import IndexService
from broker.store.service_thread import ServiceThread

LOG = logging.getLogger(__name__)

Dispatcher = Callable[[DispatchRequest], None]
# Records dispatched per round before the service re-reads the log's end: keeps one round short.
REPUT_BATCH_MAX = 4096
# Puts dispatch inline and wake the thread when they cannot: its poll is a safety net.
IDLE_WAIT_MS = 100


class LogicsDispatcher:
    """The consume queue and index targets (RocketMQ's CommitLogDispatcherBuildConsumeQueue and
    CommitLogDispatcherBuildIndex): live, and during recovery's walk of the log."""

    def __init__(
        self,
        consume_queue_store: ConsumeQueueStore,
        index_service: IndexService,
        message_index_enable: bool,
    ) -> None:
        self._consume_queue_store = consume_queue_store
        self._index_service = index_service
        self._message_index_enable = message_index_enable

    def dispatch(self, req: DispatchRequest) -> None:
        tx_type = MessageSysFlag.transaction_value(req.sysflag)
        if tx_type in (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE):
            self._consume_queue_store.find_or_create(
                req.topic, req.queue_id
            ).put_message_position_info(
                req.commit_log_offset, req.msg_size, req.tags_code, req.consume_queue_offset
            )
        if self._message_index_enable and tx_type != MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
            keys = [k for k in req.keys.split(KEY_SEPARATOR) if k] if req.keys else []
            if keys or req.uniq_key:
                self._index_service.build_index(
                    req.topic, keys, req.uniq_key, req.commit_log_offset, req.store_timestamp_ms
                )


class ReputMessageService(ServiceThread):
    def __init__(
        self, commit_log: CommitLog, dispatchers: Sequence[Dispatcher], reput_from_offset: int
    ) -> None:
        super().__init__("ReputMessageService")
        self._commit_log = commit_log
        self._dispatchers = tuple(dispatchers)
        self._reput_from_offset = reput_from_offset
        self._stalled_at = -1
        # One round at a time: a put's inline dispatch or the thread's.
        self._round = threading.Lock()

    @property
    def reput_from_offset(self) -> int:
        """Every record below this offset has been dispatched."""
        return self._reput_from_offset

    @property
    def behind_bytes(self) -> int:
        return max(0, self._commit_log.max_offset - self._reput_from_offset)

    def run(self) -> None:
        while not self.is_stopped:
            with self._round:
                dispatched = self.do_reput()
            if dispatched == 0:
                self.wait_for_running(IDLE_WAIT_MS)
        with self._round:
            while self.do_reput():  # shutdown: dispatch everything that was appended
                pass

    def dispatch_appended(self) -> None:
        """After an append, on the appender's thread: dispatch it now, or, when a round is
        under way, have the thread run another."""
        if self._round.acquire(blocking=False):
            try:
                while self.do_reput() == REPUT_BATCH_MAX:
                    pass
            finally:
                self._round.release()
        else:
            self.wakeup()

    def do_reput(self) -> int:
        """Dispatch what the log holds past ``reput_from_offset`` (one batch); returns how many
        records were dispatched."""
        log = self._commit_log
        handoff = log.dispatch_handoff
        mfq = log.mapped_file_queue
        max_offset = log.max_offset
        off = self._reput_from_offset
        count = 0
        while off < max_offset and count < REPUT_BATCH_MAX:
            req: DispatchRequest | None = None
            while handoff:
                head = handoff[0]
                if head.commit_log_offset < off:
                    handoff.popleft()  # already dispatched from the log
                    continue
                if head.commit_log_offset == off:
                    req = handoff.popleft()
                break
            if req is None:
                mf = mfq.find_by_offset(off)
                if mf is None:
                    self._stall(off, "no segment holds this offset")
                    break
                pos = off - mf.file_from_offset
                res = check_record(mf.buffer, pos, mf.wrote_position, check_crc=False)
                if res.kind == RecordKind.BLANK:
                    off += res.size
                    self._reput_from_offset = off
                    continue
                if res.request is None:
                    self._stall(off, res.reason or "no record")
                    break
                req = res.request
            for dispatch in self._dispatchers:
                dispatch(req)
            off += req.msg_size
            self._reput_from_offset = off
            count += 1
        return count

    def _stall(self, off: int, why: str) -> None:
        # Below max_offset every record is complete, so this is a bug or outside damage; say
        # so once and retry rather than skipping data.
        if self._stalled_at != off:
            self._stalled_at = off
            LOG.error("dispatch stalled at phy_offset %s: %s", off, why)
