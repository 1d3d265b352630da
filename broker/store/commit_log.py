"""The CommitLog: every topic's messages appended in arrival order, the store's source of truth.

Invariants:
- Exactly one writer at a time: appends happen under ``_put_lock``, which also assigns each
  record its phy_offset, queue_offset and store timestamp, so all three grow in log order.
- A record never spans segments. A segment's unused tail is a blank marker (codec/layout.py); the
  bytes left in a segment are always 0 or at least END_FILE_MIN_BLANK_LENGTH.
- Store timestamps never go backwards in log order, even if the wall clock does: consume-queue
  lookups by time binary-search on them.
- Each appended record is handed to the dispatcher as the DispatchRequest a decode of its bytes
  would produce, through a bounded queue; when that queue is full the dispatcher reads the
  records back from the log instead. Either way consume queues and the index hold exactly what
  the log holds.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Sequence

from broker.store.allocate_mapped_file import AllocateMappedFileService
from broker.store.codec.check import DispatchRequest
from broker.store.codec.decode import decode_message, read_store_timestamp
from broker.store.codec.encode import EncodedMessage, finish_record
from broker.store.codec.layout import END_FILE_MIN_BLANK_LENGTH, blank_marker, offset_to_file_name
from broker.store.codec.message import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageExt,
    MessageExtBrokerInner,
    MessageSysFlag,
    tags_string_to_tags_code,
)
from broker.store.config import MessageStoreConfig
from broker.store.mapped_file import MappedFile, MappedFileQueue
from broker.store.status import AppendMessageResult

LOG = logging.getLogger(__name__)

# Records handed to the dispatcher in memory before it must read them back from the log.
DISPATCH_HANDOFF_REQUESTS_MAX = 65_536
_I32_SIZE = 4


class CommitLog:
    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.allocator = AllocateMappedFileService() if config.warm_mapped_file_enable else None
        self.mapped_file_queue = MappedFileQueue(
            config.store_path_commit_log, config.mapped_file_size_commit_log_bytes, self.allocator
        )
        self._put_lock = threading.Lock()
        self._begin_time_in_lock_ms = 0
        self._last_store_timestamp_ms = 0
        # Next queue_offset per (topic, queue id) (RocketMQ's topicQueueTable).
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.dispatch_handoff: collections.deque[DispatchRequest] = collections.deque()

    # -- writing -------------------------------------------------------------------------------
    def append_messages(
        self, batch: Sequence[tuple[MessageExtBrokerInner, EncodedMessage]]
    ) -> tuple[list[AppendMessageResult], OSError | None]:
        """Append every message of ``batch`` in order.

        Returns the results of the records appended, and the OSError that stopped the batch
        when a new segment could not be created (disk full): the records before it are stored
        and reported so; none after it was written.
        """
        results: list[AppendMessageResult] = []
        mfq = self.mapped_file_queue
        with self._put_lock:
            now_ms = time.time_ns() // 1_000_000
            self._begin_time_in_lock_ms = now_ms
            # Never backwards in log order, whatever the wall clock does.
            store_ts = max(now_ms, self._last_store_timestamp_ms)
            self._last_store_timestamp_ms = store_ts
            try:
                mf = mfq.last_or_create(0)
                for msg, enc in batch:
                    size = enc.total_size
                    left = mf.remaining_bytes
                    if size != left and size + END_FILE_MIN_BLANK_LENGTH > left:
                        if left:
                            mf.seal(blank_marker(left))
                        mf = mfq.last_or_create(0)
                    phy_offset = mf.file_from_offset + mf.wrote_position
                    results.append(self._append_one(mf, msg, enc, phy_offset, store_ts))
            except OSError as e:
                LOG.error("cannot create a commitlog segment: %s", e)
                return results, e
            finally:
                self._begin_time_in_lock_ms = 0
        return results, None

    def _append_one(
        self,
        mf: MappedFile,
        msg: MessageExtBrokerInner,
        enc: EncodedMessage,
        phy_offset: int,
        store_ts: int,
    ) -> AppendMessageResult:
        key = (msg.topic, msg.queue_id)
        tx_type = MessageSysFlag.transaction_value(msg.sysflag)
        # Prepared and rolled-back transactional records never enter a consume queue, so they
        # take no queue offset (RocketMQ does the same).
        consumes_offset = tx_type in (
            MessageSysFlag.TRANSACTION_NOT_TYPE,
            MessageSysFlag.TRANSACTION_COMMIT_TYPE,
        )
        queue_offset = self.topic_queue_table.get(key, 0) if consumes_offset else 0
        mf.append(finish_record(enc, queue_offset, phy_offset, store_ts))
        if consumes_offset:
            self.topic_queue_table[key] = queue_offset + 1
        props = msg.properties
        uniq_key = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        handoff = self.dispatch_handoff
        if len(handoff) < DISPATCH_HANDOFF_REQUESTS_MAX:
            handoff.append(
                DispatchRequest(
                    msg.topic,
                    msg.queue_id,
                    phy_offset,
                    enc.total_size,
                    tags_string_to_tags_code(msg.tags),
                    store_ts,
                    queue_offset,
                    props.get(PROPERTY_KEYS, ""),
                    uniq_key,
                    enc.sysflag,
                    msg.prepared_transaction_offset,
                    props,
                )
            )
        return AppendMessageResult(phy_offset, enc.total_size, queue_offset, store_ts, uniq_key)

    def append_data(self, start_phy_offset: int, data: bytes) -> str | None:
        """Append another log's bytes at exactly ``start_phy_offset`` (RocketMQ's
        appendToCommitLog, a slave's only write): they are the master's records and blank end
        markers, so segments come out identical to the master's. Returns why it refused, or None.

        The bytes must be contiguous with this log's end (an empty log starts at any segment
        boundary) and stay in one segment; the caller hands whole records, so the dispatcher
        never meets half of one.
        """
        mfq = self.mapped_file_queue
        size = mfq.mapped_file_size_bytes
        with self._put_lock:
            last = mfq.last()
            if last is None:
                if start_phy_offset % size:
                    return f"phy_offset {start_phy_offset} does not start a segment of {size} bytes"
            elif start_phy_offset != mfq.max_offset:
                return f"phy_offset {start_phy_offset} is not this log's end {mfq.max_offset}"
            if start_phy_offset // size != (start_phy_offset + len(data) - 1) // size:
                return f"{len(data)} bytes at phy_offset {start_phy_offset} cross a segment end"
            try:
                mf = mfq.last_or_create(start_phy_offset)
            except OSError as e:
                LOG.error("cannot create a commitlog segment: %s", e)
                return f"cannot create a commitlog segment: {e}"
            mf.append(data)
        return None

    def prepare_next_segment(self) -> None:
        """Have the allocator prepare the segment after the one recovery ended in (the first, if
        none), so that the first put after a start does not wait for one."""
        if self.allocator is None:
            return
        mfq = self.mapped_file_queue
        last = mfq.last()
        next_offset = last.file_from_offset + last.file_size if last else 0
        self.allocator.request(
            mfq.store_dir / offset_to_file_name(next_offset), mfq.mapped_file_size_bytes
        )

    def wait_for_appends_in_progress(self) -> None:
        """Return once no append is half-way through (the caller has stopped new ones)."""
        with self._put_lock:
            pass

    def lock_held_ms(self) -> int:
        """How long the current put has held the lock (0 when free): RocketMQ's
        isOSPageCacheBusy measure."""
        begin = self._begin_time_in_lock_ms
        return time.time_ns() // 1_000_000 - begin if begin else 0

    # -- reading -------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.mapped_file_queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.mapped_file_queue.max_offset

    def read_record(self, phy_offset: int, size: int = 0) -> bytes | None:
        """The bytes of the record at ``phy_offset`` (its size is read from it when 0)."""
        mf = self.mapped_file_queue.find_by_offset(phy_offset)
        if mf is None:
            return None
        pos = phy_offset - mf.file_from_offset
        try:
            if size == 0:
                if pos + _I32_SIZE > mf.wrote_position:
                    return None
                size = int.from_bytes(mf.read(pos, _I32_SIZE), "big", signed=True)
            if size <= 0 or pos + size > mf.wrote_position:
                return None
            return mf.read(pos, size)
        except ValueError:  # the segment was deleted by retention while we read it
            return None

    def look_message_by_offset(self, phy_offset: int, size: int = 0) -> MessageExt | None:
        data = self.read_record(phy_offset, size)
        if data is None:
            return None
        try:
            return decode_message(data)
        except ValueError:
            return None  # a blank marker or a position inside a record

    def store_timestamp_of(self, phy_offset: int, size: int) -> int | None:
        mf = self.mapped_file_queue.find_by_offset(phy_offset)
        if mf is None:
            return None
        try:
            return read_store_timestamp(mf.buffer, phy_offset - mf.file_from_offset)
        except ValueError:
            return None

    # -- durability and life cycle -------------------------------------------------------------
    def flush(self) -> int:
        return self.mapped_file_queue.flush()

    def dirty_bytes(self) -> int:
        mfq = self.mapped_file_queue
        return mfq.max_offset - mfq.flushed_where

    @property
    def last_store_timestamp_ms(self) -> int:
        return self._last_store_timestamp_ms

    def set_last_store_timestamp(self, store_ts_ms: int) -> None:
        self._last_store_timestamp_ms = max(self._last_store_timestamp_ms, store_ts_ms)

    def close(self) -> None:
        self.mapped_file_queue.close()
