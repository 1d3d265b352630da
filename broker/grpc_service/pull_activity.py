"""Offset-based consumption of apache.rocketmq.v2: PullMessage, UpdateOffset, GetOffset,
QueryOffset. The official clients do not call these (docs/rocketmq-protocol.md §2.1); they serve
pull consumers such as the reconciliation tooling and any client written against the protocol.

PullMessage streams ``status``, the messages, then ``next_offset`` (where to pull from next).
With nothing to read at the offset it long-polls (woken by an arrival) until
``long_polling_timeout`` or the client's deadline, then answers MESSAGE_NOT_FOUND. An offset
below the queue's first or beyond its end is answered MESSAGE_NOT_FOUND with the corrected
``next_offset``; a negative one is refused (BAD_REQUEST), as are a malformed Timestamp and an
unknown query_offset_policy.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.arrival import MessageArrivalNotifier
from broker.consumer_offset import ConsumerOffsetManager
from broker.errors import TopicNotFoundError
from broker.grpc_service.consumer_activity import RECEIVE_BATCH_MAX, filter_tags, long_polling_ms
from broker.grpc_service.converter import to_pb_message
from broker.grpc_service.protocol import OK_STATUS, Code, ProtocolError, status
from broker.grpc_service.request_limits import timestamp_ms_of, validate_namespace
from broker.grpc_service.validator import validate_group, validate_topic
from broker.send_message import SendMessageService
from broker.store.message_store import DefaultMessageStore
from broker.store.status import GetMessageStatus

Context = grpc.aio.ServicerContext[Any, Any]

_WAIT_FOR_MORE = {
    GetMessageStatus.OFFSET_OVERFLOW_ONE,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
}


class PullActivity:
    def __init__(
        self,
        store: DefaultMessageStore,
        sends: SendMessageService,
        arrivals: MessageArrivalNotifier,
        offsets: ConsumerOffsetManager,
        long_polling_timeout_ms: int,
    ) -> None:
        self._store = store
        self._sends = sends
        self._arrivals = arrivals
        self._offsets = offsets
        self._long_polling_ms = long_polling_timeout_ms

    def _queue(self, mq: pb.MessageQueue) -> tuple[str, int]:
        topic = mq.topic.name
        validate_topic(topic, allow_dead_letter=True)
        try:
            tc = self._sends.resolve_topic(topic)
        except TopicNotFoundError as e:
            raise ProtocolError(Code.TOPIC_NOT_FOUND, str(e)) from None
        if not 0 <= mq.id < tc.queue_nums:
            raise ProtocolError(
                Code.BAD_REQUEST, f"message_queue.id {mq.id} is outside 0..{tc.queue_nums - 1}"
            )
        return topic, int(mq.id)

    async def pull_message(
        self, request: spb.PullMessageRequest, context: Context
    ) -> AsyncIterator[spb.PullMessageResponse]:
        try:
            validate_group(request.group.name)
            topic, queue_id = self._queue(request.message_queue)
            validate_namespace(
                request.message_queue.topic, "message_queue.topic", Code.ILLEGAL_TOPIC
            )
            tags = filter_tags(request.filter_expression)
            if not 0 < request.batch_size <= RECEIVE_BATCH_MAX:
                raise ProtocolError(
                    Code.BAD_REQUEST, f"batch_size {request.batch_size}: 1..{RECEIVE_BATCH_MAX}"
                )
            if request.offset < 0:
                raise ProtocolError(Code.BAD_REQUEST, f"offset {request.offset} is negative")
            poll_ms = long_polling_ms(request, self._long_polling_ms, context)
        except ProtocolError as e:
            yield spb.PullMessageResponse(status=e.to_status())
            return
        deadline = time.monotonic() + poll_ms / 1000
        offset = int(request.offset)
        while True:
            got = self._store.get_message(topic, queue_id, offset, request.batch_size, tags)
            if got.status is GetMessageStatus.FOUND:
                yield spb.PullMessageResponse(status=OK_STATUS)
                namespace = request.message_queue.topic.resource_namespace
                for m in got.messages:
                    yield spb.PullMessageResponse(message=to_pb_message(m, namespace=namespace))
                yield spb.PullMessageResponse(next_offset=got.next_begin_offset)
                return
            remaining_s = deadline - time.monotonic()
            if got.status not in _WAIT_FOR_MORE or remaining_s <= 0:
                why = f"{got.status.value} at offset {offset}"
                yield spb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, why))
                yield spb.PullMessageResponse(next_offset=got.next_begin_offset)
                return
            await self._arrivals.wait(topic, remaining_s)

    def update_offset(self, request: spb.UpdateOffsetRequest) -> spb.UpdateOffsetResponse:
        try:
            validate_group(request.group.name)
            topic, queue_id = self._queue(request.message_queue)
            if request.offset < 0:
                raise ProtocolError(Code.BAD_REQUEST, f"offset {request.offset} is negative")
        except ProtocolError as e:
            return spb.UpdateOffsetResponse(status=e.to_status())
        self._offsets.commit(request.group.name, topic, queue_id, int(request.offset))
        return spb.UpdateOffsetResponse(status=OK_STATUS)

    def get_offset(self, request: spb.GetOffsetRequest) -> spb.GetOffsetResponse:
        try:
            validate_group(request.group.name)
            topic, queue_id = self._queue(request.message_queue)
        except ProtocolError as e:
            return spb.GetOffsetResponse(status=e.to_status())
        committed = self._offsets.query(request.group.name, topic, queue_id)
        if committed is None:
            return spb.GetOffsetResponse(
                status=status(
                    Code.NOT_FOUND,
                    f"group {request.group.name!r} has committed no offset for {topic} "
                    f"queue {queue_id}: start with QueryOffset (first, last or a timestamp)",
                )
            )
        return spb.GetOffsetResponse(status=OK_STATUS, offset=committed)

    def query_offset(self, request: spb.QueryOffsetRequest) -> spb.QueryOffsetResponse:
        try:
            topic, queue_id = self._queue(request.message_queue)
        except ProtocolError as e:
            return spb.QueryOffsetResponse(status=e.to_status())
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            offset = self._store.get_min_offset_in_queue(topic, queue_id)
        elif policy == pb.END:
            offset = self._store.get_max_offset_in_queue(topic, queue_id)
        elif policy == pb.TIMESTAMP:
            try:
                if not request.HasField("timestamp"):
                    raise ProtocolError(Code.BAD_REQUEST, "timestamp is required with TIMESTAMP")
                ms = timestamp_ms_of(request.timestamp, "timestamp", Code.BAD_REQUEST)
            except ProtocolError as e:
                return spb.QueryOffsetResponse(status=e.to_status())
            offset = self._store.get_offset_in_queue_by_time(topic, queue_id, ms)
        else:
            return spb.QueryOffsetResponse(
                status=status(
                    Code.BAD_REQUEST,
                    f"query_offset_policy {policy}: BEGINNING, END or TIMESTAMP",
                )
            )
        return spb.QueryOffsetResponse(status=OK_STATUS, offset=offset)
