"""The producer RPCs of apache.rocketmq.v2: SendMessage and EndTransaction (the proxy's
SendMessageActivity and TransactionActivity).

SendMessage resolves its topic once (``SendMessageService.resolve_topic``, which auto-creates it
when the broker is configured so) and hands that TopicConfig to the message checks and to the
send: validation only checks. A request refused as a whole (too many messages, a bad topic) is
answered by its top-level Status; each message then also gets an entry with that status, unless
there are more than SEND_MESSAGES_MAX of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.errors import TopicNotFoundError
from broker.flow_control import FlowControlled
from broker.grpc_service.converter import peer_host, to_inbound
from broker.grpc_service.protocol import OK_STATUS, Code, ProtocolError, status
from broker.grpc_service.request_limits import (
    SEND_MESSAGES_MAX,
    echoed_id,
    validate_message_id,
)
from broker.grpc_service.validator import validate_message, validate_topic
from broker.send_message import SendMessageService
from broker.store.status import PutMessageResult, PutMessageStatus
from broker.topic_config import QUEUE_NUMS_MAX, TopicConfig, TopicMessageType
from broker.transaction_message import (
    Resolution,
    TransactionalMessageService,
    TransactionError,
)
from rocketbox_api.message_rules import shown

Context = grpc.aio.ServicerContext[Any, Any]

# An EndTransaction's transaction id: ours are 32 hex characters.
TRANSACTION_ID_LENGTH_MAX = 128

# PUT_OK is answered OK_STATUS by _put_status itself, without a lookup.
_PUT_STATUS_CODE = {
    # Stored, but not durable in time: the proxy's code; clients see a timeout.
    PutMessageStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutMessageStatus.OS_PAGE_CACHE_BUSY: Code.TOO_MANY_REQUESTS,
    PutMessageStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
}


class SendActivity:
    def __init__(
        self,
        sends: SendMessageService,
        transactions: TransactionalMessageService,
        body_bytes_max: int,
        delay_ms_max: int,
        write_refusal: str | None = None,
    ) -> None:
        """``write_refusal``: why this broker takes no sends (a SLAVE), answered FORBIDDEN, the
        code for a broker without write permission: clients and the sidecar try another
        broker, and no message is rejected for it."""
        self._write_refusal = (
            None if write_refusal is None else status(Code.FORBIDDEN, write_refusal)
        )
        self._sends = sends
        self._transactions = transactions
        self._max_body_bytes = body_bytes_max
        self._delay_max_ms = delay_ms_max

    async def send_message(
        self, request: spb.SendMessageRequest, context: Context
    ) -> spb.SendMessageResponse:
        messages = list(request.messages)
        if self._write_refusal is not None:
            return _send_failure(messages[:SEND_MESSAGES_MAX], self._write_refusal)
        if len(messages) > SEND_MESSAGES_MAX:
            # One entry each would make the answer as large as the request could be.
            return spb.SendMessageResponse(
                status=status(
                    Code.BAD_REQUEST,
                    f"messages has {len(messages)} entries (limit {SEND_MESSAGES_MAX})",
                )
            )
        try:
            tc, kinds = self._resolve_and_validate(messages)
            born_host = peer_host(context.peer())
            inbound = [to_inbound(m, born_host, k) for m, k in zip(messages, kinds, strict=True)]
            results = await self._sends.send(tc, inbound)
        except ProtocolError as e:
            return _send_failure(messages, e.to_status())
        except TopicNotFoundError as e:
            return _send_failure(messages, status(Code.TOPIC_NOT_FOUND, str(e)))
        except FlowControlled as e:
            return _send_failure(messages, status(Code.TOO_MANY_REQUESTS, str(e)))
        entries = [
            spb.SendResultEntry(
                status=_put_status(r.result),
                message_id=m.system_properties.message_id,
                transaction_id=r.transaction_id,
                offset=r.result.append.queue_offset if r.result.append else 0,
            )
            for m, r in zip(messages, results, strict=True)
        ]
        return spb.SendMessageResponse(status=_common_status(entries), entries=entries)

    def _resolve_and_validate(
        self, messages: list[pb.Message]
    ) -> tuple[TopicConfig, list[TopicMessageType]]:
        """The request's topic, resolved once, and each message's type."""
        topic = _request_topic(messages)
        try:
            tc = self._sends.resolve_topic(topic)
        except TopicNotFoundError:
            # As the proxy, which checks messages before it routes them: a bad message is
            # answered as such even when its topic is missing too.
            self._message_types(messages, None)
            raise
        return tc, self._message_types(messages, tc)

    def _message_types(
        self, messages: list[pb.Message], tc: TopicConfig | None
    ) -> list[TopicMessageType]:
        """Each message checked against its topic (``None``: a topic that does not exist)."""
        queue_nums = tc.queue_nums if tc is not None else QUEUE_NUMS_MAX
        kinds = []
        for m in messages:
            kind = validate_message(m, self._max_body_bytes, self._delay_max_ms, queue_nums)
            if tc is not None and not tc.message_type.accepts(kind):
                raise ProtocolError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"topic {tc.topic_name!r} accepts {tc.message_type.value} messages, "
                    f"not {kind.value}",
                )
            kinds.append(kind)
        return kinds

    async def end_transaction(
        self, request: spb.EndTransactionRequest
    ) -> spb.EndTransactionResponse:
        if self._write_refusal is not None:
            return spb.EndTransactionResponse(status=self._write_refusal)
        try:
            _validate_end_transaction(request)
        except ProtocolError as e:
            return spb.EndTransactionResponse(status=e.to_status())
        if request.resolution == pb.TRANSACTION_RESOLUTION_UNSPECIFIED:
            return spb.EndTransactionResponse(status=OK_STATUS)  # left pending, as the proxy does
        resolution = Resolution.COMMIT if request.resolution == pb.COMMIT else Resolution.ROLLBACK
        try:
            await self._transactions.end_transaction(
                request.topic.name, request.message_id, request.transaction_id, resolution
            )
        except TransactionError as e:
            if e.invalid_id:
                code = Code.INVALID_TRANSACTION_ID
            elif e.retriable:
                code = Code.INTERNAL_SERVER_ERROR
            else:
                code = Code.NOT_FOUND
            return spb.EndTransactionResponse(status=status(code, str(e)))
        return spb.EndTransactionResponse(status=OK_STATUS)


def _request_topic(messages: list[pb.Message]) -> str:
    """The one topic of a request's messages, checked as a name (nothing is looked up)."""
    if not messages:
        raise ProtocolError(Code.MESSAGE_CORRUPTED, "messages is empty (1 message at least)")
    topics = {m.topic.name for m in messages}
    if len(topics) != 1:
        shown_topics = ", ".join(shown(t) for t in sorted(topics)[:3])
        raise ProtocolError(
            Code.MESSAGE_CORRUPTED,
            f"messages are of {len(topics)} topics ({shown_topics}…), not one",
        )
    topic: str = messages[0].topic.name
    validate_topic(topic)
    return topic


def _send_failure(messages: Iterable[pb.Message], st: pb.Status) -> spb.SendMessageResponse:
    entries = [
        spb.SendResultEntry(status=st, message_id=echoed_id(m.system_properties.message_id))
        for m in messages
    ]
    return spb.SendMessageResponse(status=st, entries=entries)


def _validate_end_transaction(request: spb.EndTransactionRequest) -> None:
    validate_topic(request.topic.name)
    validate_message_id(request.message_id)
    tid = request.transaction_id
    if not tid.strip() or len(tid) > TRANSACTION_ID_LENGTH_MAX:
        raise ProtocolError(
            Code.INVALID_TRANSACTION_ID,
            f"transaction_id is {len(tid)} characters (1..{TRANSACTION_ID_LENGTH_MAX}, not blank)",
        )
    if request.resolution not in (pb.TRANSACTION_RESOLUTION_UNSPECIFIED, pb.COMMIT, pb.ROLLBACK):
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"resolution {request.resolution}: "
            "COMMIT, ROLLBACK or TRANSACTION_RESOLUTION_UNSPECIFIED",
        )


def _put_status(result: PutMessageResult) -> pb.Status:
    if result.status is PutMessageStatus.PUT_OK:  # the common case, without an enum lookup
        return OK_STATUS
    code = _PUT_STATUS_CODE.get(result.status, Code.INTERNAL_SERVER_ERROR)
    return status(code, result.detail or result.status.value)


def _common_status(entries: list[spb.SendResultEntry]) -> pb.Status:
    codes = {e.status.code for e in entries}
    if len(codes) == 1:
        return entries[0].status
    return status(Code.MULTIPLE_RESULTS)
