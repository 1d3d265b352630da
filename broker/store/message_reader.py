"""The store's read side (RocketMQ's DefaultMessageStore get/query methods).

Reads go through consume queues and the index to the commitlog, which answers for the content:
index hits are hash matches and are confirmed against the record; tag filtering compares the
entry's tag code, then the exact tag. Every call is bounded (``*_MAX``).
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.store.codec.message import MessageExt, tags_string_to_tags_code
from broker.store.commit_log import CommitLog
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.index_service import IndexService
from broker.store.status import GetMessageResult, GetMessageStatus

# One get_message call reads at most this many consume-queue entries, matching or not
# (RocketMQ's maxFilterMessageCount): a selective tag filter cannot turn one call into a scan of
# the whole queue.
GET_MESSAGE_SCAN_ENTRIES_MAX = 16_000
GET_MESSAGE_NUMS_MAX = 1_024
QUERY_MESSAGE_NUMS_MAX = 1_024
_FAR_FUTURE_MS = 2**62


class MessageReader:
    """Read methods of the store; DefaultMessageStore provides the three parts."""

    commit_log: CommitLog
    consume_queue_store: ConsumeQueueStore
    index_service: IndexService

    def get_message(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_msg_nums: int,
        tags: Iterable[str] | None = None,
    ) -> GetMessageResult:
        """Up to ``max_msg_nums`` messages of one queue from ``queue_offset``, keeping those whose
        tag is in ``tags`` (None: every message). Filters by the entry's tag code first and
        confirms the exact tag from the log, as RocketMQ does."""
        if not 0 < max_msg_nums <= GET_MESSAGE_NUMS_MAX:
            raise ValueError(f"max_msg_nums must be in 1..{GET_MESSAGE_NUMS_MAX}")
        cq = self.consume_queue_store.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_offset, max_offset = cq.min_offset_in_queue, cq.max_offset_in_queue
        if max_offset == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
        if queue_offset < min_offset:
            status = GetMessageStatus.OFFSET_TOO_SMALL
            return GetMessageResult(status, min_offset, min_offset, max_offset)
        if queue_offset == max_offset:
            status = GetMessageStatus.OFFSET_OVERFLOW_ONE
            return GetMessageResult(status, queue_offset, min_offset, max_offset)
        if queue_offset > max_offset:
            status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            return GetMessageResult(status, max_offset, min_offset, max_offset)
        wanted = frozenset(tags) if tags is not None else None
        codes = {tags_string_to_tags_code(t) for t in wanted} if wanted is not None else None
        result = GetMessageResult(
            GetMessageStatus.NO_MATCHED_MESSAGE, queue_offset, min_offset, max_offset
        )
        removed = 0
        for entry in cq.iter_entries(queue_offset, GET_MESSAGE_SCAN_ENTRIES_MAX):
            result.next_begin_offset = entry.queue_offset + 1
            if codes is not None and entry.tag_code not in codes:
                continue
            msg = self.commit_log.look_message_by_offset(entry.phy_offset, entry.size)
            if msg is None:
                removed += 1
                continue
            if wanted is not None and msg.tags not in wanted:
                continue
            result.messages.append(msg)
            if len(result.messages) >= max_msg_nums:
                break
        if result.messages:
            result.status = GetMessageStatus.FOUND
        elif removed:
            result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
        return result

    def look_message_by_offset(self, phy_offset: int, size: int = 0) -> MessageExt | None:
        return self.commit_log.look_message_by_offset(phy_offset, size)

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int = _FAR_FUTURE_MS,
    ) -> list[MessageExt]:
        """Messages of ``topic`` carrying business key ``key``, newest first."""
        max_num = min(max_num, QUERY_MESSAGE_NUMS_MAX)
        offsets = self.index_service.query_by_key(
            topic, key, max_num, begin_timestamp_ms, end_timestamp_ms
        )
        found = []
        for phy_offset in offsets:
            msg = self.commit_log.look_message_by_offset(phy_offset)
            # The index holds hashes: confirm, and drop entries the log no longer holds.
            if msg is not None and msg.topic == topic and key in msg.keys:
                found.append(msg)
        return found

    def query_message_by_id(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """Every stored copy of the message with this id (more than one means a duplicate)."""
        found = []
        for phy_offset in self.index_service.query_by_uniq_key(msg_id, QUERY_MESSAGE_NUMS_MAX):
            msg = self.commit_log.look_message_by_offset(phy_offset)
            if msg is not None and msg.msg_id == msg_id and (topic is None or msg.topic == topic):
                found.append(msg)
        return found

    def look_message_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt | None:
        copies = self.query_message_by_id(msg_id, topic)
        return copies[0] if copies else None

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queue_store.find(topic, queue_id)
        return cq.min_offset_in_queue if cq else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queue_store.find(topic, queue_id)
        return cq.max_offset_in_queue if cq else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.consume_queue_store.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp_ms, self.commit_log.store_timestamp_of)

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset
