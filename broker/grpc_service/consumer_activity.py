"""The consumer RPCs of apache.rocketmq.v2: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, QueryAssignment (the proxy's consumer activities).

ReceiveMessage answers with the proxy's stream shape (docs/rocketmq-protocol.md §8.5): ``status``
OK, one frame per message, a ``delivery_timestamp``; or ``MESSAGE_NOT_FOUND`` and a timestamp when
nothing came within the poll time. The poll never outlives the client's deadline. Messages taken for
a stream that breaks before they were written are made visible again at once.

Group, topic and receipt handles are checked before anything is looked up (request_limits.py):
an AckMessage refused as a whole (a bad group or topic, no entries or more than ACK_ENTRIES_MAX,
a malformed handle or message id) is answered by its top-level Status alone.

A broadcast group's calls act on the caller's member (broadcast_members.py), found by its
``x-mq-client-id``: a receive makes the client a member (CLIENT_ID_REQUIRED without the header,
TOO_MANY_REQUESTS past the members limit); an ack, change or forward by a client that is not a
member is answered INVALID_RECEIPT_HANDLE. QueryAssignment assigns every queue to every client,
which is what a broadcast member needs too: each member reads the whole topic.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.broadcast_members import MembersLimitError, progress_key
from broker.errors import TopicNotFoundError
from broker.group_config import GroupConfig, GroupConfigManager
from broker.grpc_service.client_activity import CLIENT_ID_HEADER, metadata_value
from broker.grpc_service.converter import to_pb_message, to_timestamp
from broker.grpc_service.protocol import OK_STATUS, Code, ProtocolError, status
from broker.grpc_service.request_limits import (
    ACK_ENTRIES_MAX,
    FILTER_EXPRESSION_LENGTH_MAX,
    RECEIPT_HANDLE_LENGTH_MAX,
    duration_ms_of,
    validate_entry_count,
    validate_message_id,
    validate_namespace,
    validate_receipt_handle,
)
from broker.grpc_service.route_activity import RouteActivity
from broker.grpc_service.validator import validate_group, validate_topic
from broker.pop_message import Delivery, PopMessageService
from broker.pop_state import InvalidReceiptHandleError
from broker.send_message import SendMessageService
from broker.store.codec.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from broker.topic_config import TopicConfig
from rocketbox_api.message_rules import DLQ_TOPIC_PREFIX, shown

Context = grpc.aio.ServicerContext[Any, Any]

RECEIVE_BATCH_MAX = 32
INVISIBLE_DURATION_MS_MAX = 12 * 3600 * 1000
AUTO_RENEW_INVISIBLE_MS = 60_000
# Answer this long before the client's deadline, so the stream ends before the client gives up.
DEADLINE_MARGIN_MS = 500
LONG_POLLING_MS_MAX = 20_000
_READABLE = (pb.READ, pb.READ_WRITE)


class ConsumerActivity:
    def __init__(
        self,
        pop: PopMessageService,
        groups: GroupConfigManager,
        sends: SendMessageService,
        routes: RouteActivity,
        invisible_duration_ms_min: int,
        long_polling_timeout_ms: int,
    ) -> None:
        self._long_polling_ms = long_polling_timeout_ms
        self._pop = pop
        self._groups = groups
        self._sends = sends
        self._routes = routes
        self._invisible_ms_min = invisible_duration_ms_min

    def _topic(self, name: str) -> TopicConfig:
        validate_topic(name, allow_dead_letter=True)
        try:
            return self._sends.resolve_topic(name)
        except TopicNotFoundError as e:
            raise ProtocolError(Code.TOPIC_NOT_FOUND, str(e)) from None

    async def receive_message(
        self, request: spb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        group = request.group.name
        topic = request.message_queue.topic.name
        try:
            validate_group(group)
            tc = self._topic(topic)
            validate_namespace(
                request.message_queue.topic, "message_queue.topic", Code.ILLEGAL_TOPIC
            )
            # Any queue id of the topic serves the whole topic (docs/rocketmq-protocol.md §6); -1 is
            # the proxy's "all".
            if not -1 <= request.message_queue.id < tc.queue_nums:
                raise ProtocolError(
                    Code.BAD_REQUEST,
                    f"message_queue.id {request.message_queue.id} is not a queue of topic "
                    f"{topic!r} (-1..{tc.queue_nums - 1})",
                )
            tags = filter_tags(request.filter_expression)
            invisible_ms = self._invisible_ms(request)
            batch = min(request.batch_size, RECEIVE_BATCH_MAX) if request.batch_size > 0 else 0
            if batch <= 0:
                raise ProtocolError(
                    Code.BAD_REQUEST, f"batch_size must be in 1..{RECEIVE_BATCH_MAX}"
                )
            poll_ms = long_polling_ms(request, self._long_polling_ms, context)
        except ProtocolError as e:
            yield spb.ReceiveMessageResponse(status=e.to_status())
            yield _closing_frame()
            return
        gc = self._groups.find_or_create(group)
        try:
            key = self._member_key(gc, context)
        except ProtocolError as e:
            yield spb.ReceiveMessageResponse(status=e.to_status())
            yield _closing_frame()
            return
        deliveries = await self._pop.receive(
            gc, topic, range(tc.queue_nums), tags, batch, invisible_ms, poll_ms, key
        )
        if not deliveries:
            yield spb.ReceiveMessageResponse(
                status=status(Code.MESSAGE_NOT_FOUND, "no new message")
            )
            yield _closing_frame()
            return
        namespace = request.message_queue.topic.resource_namespace
        sent = 0
        try:
            yield spb.ReceiveMessageResponse(status=OK_STATUS)
            for d in deliveries:
                yield spb.ReceiveMessageResponse(message=self._view(d, namespace))
                sent += 1
            yield _closing_frame()
        finally:
            for d in deliveries[sent:]:  # never written: visible again now, not after the timeout
                with contextlib.suppress(InvalidReceiptHandleError):
                    self._pop.change_invisible_duration(key, topic, d.receipt_handle, 0)

    def _member_key(self, gc: GroupConfig, context: Context) -> str:
        """Whose progress a receive takes from: the group's, or (broadcast) the caller's
        member's, made or adopted now."""
        if not gc.consume_broadcast_enable:
            return gc.group_name
        client_id = metadata_value(context, CLIENT_ID_HEADER)
        if not client_id:
            raise ProtocolError(
                Code.CLIENT_ID_REQUIRED,
                f"{CLIENT_ID_HEADER} is required: {gc.group_name!r} is a broadcast group",
            )
        try:
            member_id = self._pop.progress.members.member_of(gc.group_name, client_id)
        except MembersLimitError as e:
            raise ProtocolError(Code.TOO_MANY_REQUESTS, str(e)) from None
        return progress_key(gc.group_name, member_id)

    def _handle_key(self, group: str, context: Context) -> str:
        """Whose receipt handles an ack, change or forward names: the group's, or (broadcast)
        the caller's member's. InvalidReceiptHandleError when the caller is no member."""
        gc = self._groups.find(group)
        if gc is None or not gc.consume_broadcast_enable:
            return group
        client_id = metadata_value(context, CLIENT_ID_HEADER)
        member_id = self._pop.progress.members.find(group, client_id)
        if member_id is None:
            raise InvalidReceiptHandleError(
                f"client {client_id!r} is no member of broadcast group {group!r}: "
                "its receipt handles are unknown"
            )
        return progress_key(group, member_id)

    def _view(self, d: Delivery, namespace: str) -> pb.Message:
        view = to_pb_message(d.message, namespace=namespace)
        sp = view.system_properties
        sp.receipt_handle = d.receipt_handle
        sp.delivery_attempt = d.attempt
        props = d.message.properties
        if d.message.topic.startswith(DLQ_TOPIC_PREFIX) and PROPERTY_RETRY_TOPIC in props:
            sp.dead_letter_queue.CopyFrom(
                pb.DeadLetterQueue(
                    topic=props[PROPERTY_RETRY_TOPIC],
                    message_id=props.get(PROPERTY_ORIGIN_MESSAGE_ID, ""),
                )
            )
        return view

    def _invisible_ms(self, request: spb.ReceiveMessageRequest) -> int:
        if request.auto_renew:
            return AUTO_RENEW_INVISIBLE_MS
        if not request.HasField("invisible_duration"):
            raise ProtocolError(Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required")
        ms = duration_ms_of(
            request.invisible_duration, "invisible_duration", Code.ILLEGAL_INVISIBLE_TIME
        )
        if not self._invisible_ms_min <= ms <= INVISIBLE_DURATION_MS_MAX:
            raise ProtocolError(
                Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration {ms} ms is outside "
                f"{self._invisible_ms_min}..{INVISIBLE_DURATION_MS_MAX} ms",
            )
        return ms

    async def ack_message(
        self, request: spb.AckMessageRequest, context: Context
    ) -> spb.AckMessageResponse:
        group, topic = request.group.name, request.topic.name
        try:
            _validate_group_and_topic(request.group, request.topic)
            validate_entry_count(len(request.entries), "entries", ACK_ENTRIES_MAX)
            for i, entry in enumerate(request.entries):
                validate_receipt_handle(entry.receipt_handle, f"entries[{i}].receipt_handle")
                validate_message_id(entry.message_id, f"entries[{i}].message_id")
        except ProtocolError as e:
            return spb.AckMessageResponse(status=e.to_status())
        entries = []
        for entry in request.entries:
            try:
                self._pop.ack(self._handle_key(group, context), topic, entry.receipt_handle)
                st = OK_STATUS
            except InvalidReceiptHandleError as e:
                st = status(Code.INVALID_RECEIPT_HANDLE, str(e))
            entries.append(
                spb.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st
                )
            )
        codes = {e.status.code for e in entries}
        top = entries[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS)
        return spb.AckMessageResponse(status=top, entries=entries)

    def change_invisible_duration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Context
    ) -> spb.ChangeInvisibleDurationResponse:
        old = request.receipt_handle
        # Echo the old handle: Python stores whatever comes back, even on errors
        # (docs/rocketmq-protocol.md §8.6); but not one too long to be a handle, which would only
        # make the answer as large.
        echo = old if len(old) <= RECEIPT_HANDLE_LENGTH_MAX else ""
        try:
            _validate_group_and_topic(request.group, request.topic)
            validate_receipt_handle(old)
            ms = duration_ms_of(
                request.invisible_duration, "invisible_duration", Code.ILLEGAL_INVISIBLE_TIME
            )
            if ms > INVISIBLE_DURATION_MS_MAX:
                raise ProtocolError(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible_duration {ms} ms is outside 0..{INVISIBLE_DURATION_MS_MAX} ms",
                )
        except ProtocolError as e:
            return spb.ChangeInvisibleDurationResponse(status=e.to_status(), receipt_handle=echo)
        try:
            key = self._handle_key(request.group.name, context)
            d = self._pop.change_invisible_duration(key, request.topic.name, old, ms)
        except InvalidReceiptHandleError as e:
            return spb.ChangeInvisibleDurationResponse(
                status=status(Code.INVALID_RECEIPT_HANDLE, str(e)), receipt_handle=old
            )
        return spb.ChangeInvisibleDurationResponse(
            status=OK_STATUS, receipt_handle=d.receipt_handle
        )

    async def forward_to_dead_letter(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Context
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        try:
            _validate_group_and_topic(request.group, request.topic)
            validate_receipt_handle(request.receipt_handle)
        except ProtocolError as e:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=e.to_status())
        try:
            group = request.group.name
            await self._pop.forward_to_dead_letter(
                group,
                request.topic.name,
                request.receipt_handle,
                self._handle_key(group, context),
            )
        except InvalidReceiptHandleError as e:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(Code.INVALID_RECEIPT_HANDLE, str(e))
            )
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK_STATUS)

    async def query_assignment(
        self, request: spb.QueryAssignmentRequest
    ) -> spb.QueryAssignmentResponse:
        try:
            validate_group(request.group.name)
            validate_topic(request.topic.name, allow_dead_letter=True)
            validate_namespace(request.topic, "topic", Code.ILLEGAL_TOPIC)
            queues = await self._routes.message_queues(request.topic)
        except ProtocolError as e:
            return spb.QueryAssignmentResponse(status=e.to_status())
        except TopicNotFoundError as e:
            return spb.QueryAssignmentResponse(status=status(Code.TOPIC_NOT_FOUND, str(e)))
        # Pop consumption serves the whole topic whatever queue is asked for: one assignment
        # per readable queue (of every group, in a cluster) lets every client's balancer spread
        # its receives.
        assignments = [pb.Assignment(message_queue=q) for q in queues if q.permission in _READABLE]
        return spb.QueryAssignmentResponse(status=OK_STATUS, assignments=assignments)


def _validate_group_and_topic(group: pb.Resource, topic: pb.Resource) -> None:
    validate_group(group.name)
    validate_topic(topic.name, allow_dead_letter=True)


def _closing_frame() -> spb.ReceiveMessageResponse:
    """The stream's last frame: the broker's time (clients use it for latency metrics)."""
    return spb.ReceiveMessageResponse(delivery_timestamp=to_timestamp(time.time_ns() // 1_000_000))


def filter_tags(expression: pb.FilterExpression) -> frozenset[str] | None:
    """The tags a TAG expression accepts (``*``: all, None); SQL92 is refused."""
    if expression.type == pb.SQL:
        raise ProtocolError(
            Code.ILLEGAL_FILTER_EXPRESSION,
            "filter_expression: SQL92 filtering is not supported",
        )
    if len(expression.expression) > FILTER_EXPRESSION_LENGTH_MAX:
        raise ProtocolError(
            Code.ILLEGAL_FILTER_EXPRESSION,
            f"filter_expression is {len(expression.expression)} characters "
            f"(limit {FILTER_EXPRESSION_LENGTH_MAX})",
        )
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise ProtocolError(Code.ILLEGAL_FILTER_EXPRESSION, f"filter_expression {shown(text)}")
    return tags


def long_polling_ms(
    request: spb.ReceiveMessageRequest | spb.PullMessageRequest, default_ms: int, context: Context
) -> int:
    """How long a receive or pull may wait: the request's time (or the broker's default), at
    most the proxy's 20 s (docs/rocketmq-protocol.md §8.5), and ending before the client's deadline
    does. A time that is not a valid, non-negative Duration is refused with ILLEGAL_POLLING_TIME."""
    poll_ms = (
        duration_ms_of(
            request.long_polling_timeout, "long_polling_timeout", Code.ILLEGAL_POLLING_TIME
        )
        if request.HasField("long_polling_timeout")
        else default_ms
    )
    poll_ms = min(poll_ms, LONG_POLLING_MS_MAX)
    remaining = context.time_remaining()
    if remaining is not None:
        poll_ms = max(0, min(poll_ms, int(remaining * 1000) - DEADLINE_MARGIN_MS))
    return poll_ms
