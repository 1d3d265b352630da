"""``apache.rocketmq.v2.MessagingService``: the producer side (routes, telemetry, send,
transactions) here, the consumer side in consumer_activity.py. Thin: validate, convert, call the
domain; every reply carries a Status (spec §1).

A request refused as a whole (too many messages, a bad topic) is answered by its top-level
Status; SendMessage then also gives each message an entry with that status, unless there are
more than SEND_MESSAGES_MAX of them. RecallMessage and SyncLiteSubscription (newer features the
broker lacks) are answered NOT_IMPLEMENTED in the Status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from broker.errors import TopicNotFoundError
from broker.flow_control import FlowControlled
from broker.group_config import GroupConfigManager
from broker.grpc_service.client_registry import ClientRegistry
from broker.grpc_service.consumer_activity import ConsumerActivity
from broker.grpc_service.converter import peer_host, to_duration, to_inbound, to_pb_message
from broker.grpc_service.protocol import OK_STATUS, Code, ProtocolError, shown, status
from broker.grpc_service.pull_activity import PullActivity
from broker.grpc_service.request_limits import (
    SEND_MESSAGES_MAX,
    echoed_id,
    validate_message_id,
    validate_namespace,
)
from broker.grpc_service.validator import (
    validate_group,
    validate_message,
    validate_topic,
)
from broker.send_message import SendMessageService
from broker.store.codec.message import MessageExt
from broker.store.errors import MessageIllegalError
from broker.store.status import PutMessageResult, PutMessageStatus
from broker.topic_config import QUEUE_NUMS_MAX, TopicConfig, TopicMessageType
from broker.transaction_message import (
    Resolution,
    TransactionalMessageService,
    TransactionError,
)

LOG = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
CLIENT_ID_HEADER = "x-mq-client-id"
NAMESPACE_HEADER = "x-mq-namespace"

_ACCEPTS = {
    TopicMessageType.NORMAL: [pb.NORMAL],
    TopicMessageType.FIFO: [pb.FIFO],
    TopicMessageType.DELAY: [pb.DELAY],
    TopicMessageType.TRANSACTION: [pb.TRANSACTION],
    TopicMessageType.MIXED: [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}
# Proxy defaults (spec §3.4): producers retry 3 times, 10 ms growing to 1 s.
PRODUCER_MAX_ATTEMPTS = 3
RECEIVE_BATCH_SIZE = 32
# A client's Settings, which the reply echoes: about a thousand topics or subscriptions.
SETTINGS_BYTES_MAX = 64 * 1024
# An EndTransaction's transaction id: ours are 32 hex characters.
TRANSACTION_ID_LENGTH_MAX = 128
# RocketMQ's consumer retry schedule: 1s 5s 10s 30s 1m 2m ... 10m 20m 30m 1h 2h.
CONSUMER_BACKOFF_S = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)

# PUT_OK is answered OK_STATUS by _put_status itself, without a lookup.
_PUT_STATUS_CODE = {
    # Stored, but not durable in time: the proxy's code; clients see a timeout.
    PutMessageStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutMessageStatus.OS_PAGE_CACHE_BUSY: Code.TOO_MANY_REQUESTS,
    PutMessageStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
}


def metadata_value(context: Context, name: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode()
    return ""


class MessagingService(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]  # untyped stubs
    def __init__(
        self,
        sends: SendMessageService,
        transactions: TransactionalMessageService,
        clients: ClientRegistry,
        broker: pb.Broker,
        max_body_bytes: int,
        delay_max_ms: int,
        consumers: ConsumerActivity,
        groups: GroupConfigManager,
        long_polling_timeout_ms: int,
        pulls: PullActivity,
    ) -> None:
        self._pulls = pulls
        self._long_polling_ms = long_polling_timeout_ms
        self._consumers = consumers
        self._groups = groups
        self._sends = sends
        self._transactions = transactions
        self._clients = clients
        self._broker = broker
        self._max_body_bytes = max_body_bytes
        self._delay_max_ms = delay_max_ms

    # -- routes and client life cycle ----------------------------------------------------
    async def QueryRoute(  # noqa: N802 - the protocol's name
        self, request: spb.QueryRouteRequest, context: Context
    ) -> spb.QueryRouteResponse:
        name = request.topic.name
        try:
            # Consumers route to %DLQ%<group> too; sends to it are refused by send validation.
            validate_topic(name, allow_dead_letter=True)
            validate_namespace(request.topic, "topic", Code.ILLEGAL_TOPIC)
            tc = self._sends.topic_config(name)
        except ProtocolError as e:
            return spb.QueryRouteResponse(status=e.to_status())
        except TopicNotFoundError as e:
            return spb.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND, str(e)))
        except MessageIllegalError as e:
            return spb.QueryRouteResponse(status=status(Code.ILLEGAL_TOPIC, str(e)))
        resource = pb.Resource(resource_namespace=request.topic.resource_namespace, name=name)
        queues = [
            pb.MessageQueue(
                topic=resource,
                id=queue_id,
                permission=pb.READ_WRITE,
                broker=self._broker,
                accept_message_types=_ACCEPTS[tc.message_type],
            )
            for queue_id in range(tc.queue_nums)
        ]
        return spb.QueryRouteResponse(status=OK_STATUS, message_queues=queues)

    async def Heartbeat(  # noqa: N802 - the protocol's method name
        self, request: spb.HeartbeatRequest, context: Context
    ) -> spb.HeartbeatResponse:
        self._clients.touch(metadata_value(context, CLIENT_ID_HEADER))
        return spb.HeartbeatResponse(status=OK_STATUS)

    async def NotifyClientTermination(  # noqa: N802 - the protocol's method name
        self, request: spb.NotifyClientTerminationRequest, context: Context
    ) -> spb.NotifyClientTerminationResponse:
        self._clients.forget(metadata_value(context, CLIENT_ID_HEADER))
        return spb.NotifyClientTerminationResponse(status=OK_STATUS)

    async def Telemetry(  # noqa: N802 - the protocol's method name
        self,
        request_iterator: AsyncIterator[spb.TelemetryCommand],
        context: Context,
    ) -> AsyncIterator[spb.TelemetryCommand]:
        client_id = metadata_value(context, CLIENT_ID_HEADER)
        if not client_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{CLIENT_ID_HEADER} is required")
        session = self._clients.open(client_id)
        reader = asyncio.create_task(self._read_telemetry(request_iterator, session.client_id))
        getter: asyncio.Task[spb.TelemetryCommand] | None = None
        try:
            while True:
                getter = asyncio.create_task(session.outbound.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                error = reader.exception()
                if isinstance(error, ProtocolError):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, error.message)
                if error is not None and not isinstance(error, grpc.aio.BaseError):
                    raise error  # a fault: the server's guard answers INTERNAL and logs it
                return  # the client closed its side (or gRPC ended the call)
        finally:
            for task in (getter, reader):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            self._clients.close(session)

    async def _read_telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], client_id: str
    ) -> None:
        async for command in request_iterator:
            session = self._clients.get(client_id)
            if session is None:
                return
            session.last_seen_monotonic = asyncio.get_running_loop().time()
            if command.HasField("settings"):
                settings = command.settings
                _validate_settings(settings)
                session.settings = settings
                session.push(
                    spb.TelemetryCommand(status=OK_STATUS, settings=self._settings_reply(settings))
                )
            # thread stack traces and verify results are answers nobody asked for: ignored

    def _settings_reply(self, client: pb.Settings) -> pb.Settings:
        """The client's Settings merged with the broker's (spec §3.4)."""
        reply = pb.Settings()
        reply.CopyFrom(client)
        if client.HasField("publishing"):
            reply.backoff_policy.CopyFrom(
                pb.RetryPolicy(
                    max_attempts=PRODUCER_MAX_ATTEMPTS,
                    exponential_backoff=pb.ExponentialBackoff(
                        initial=to_duration(10), max=to_duration(1000), multiplier=2.0
                    ),
                )
            )
            reply.publishing.max_body_size = self._max_body_bytes
            reply.publishing.validate_message_type = True
        else:
            group = self._groups.find_or_create(client.subscription.group.name)
            reply.subscription.fifo = group.consume_message_orderly
            reply.backoff_policy.CopyFrom(
                pb.RetryPolicy(
                    max_attempts=group.max_delivery_attempts,
                    customized_backoff=pb.CustomizedBackoff(
                        next=[to_duration(s * 1000) for s in CONSUMER_BACKOFF_S]
                    ),
                )
            )
            reply.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            reply.subscription.long_polling_timeout.CopyFrom(to_duration(self._long_polling_ms))
        reply.metric.Clear()
        reply.metric.on = False
        return reply

    def request_transaction_check(self, topic: str, half: MessageExt, transaction_id: str) -> bool:
        """Ask a live producer of ``topic`` to resolve a transaction (RecoverOrphaned...)."""
        for session in self._clients.producers_of(topic):
            command = spb.TelemetryCommand(
                recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                    message=to_pb_message(half, topic=topic, message_type=pb.TRANSACTION),
                    transaction_id=transaction_id,
                )
            )
            if session.push(command):
                return True
        return False

    # -- sending -------------------------------------------------------------------------
    async def SendMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.SendMessageRequest, context: Context
    ) -> spb.SendMessageResponse:
        messages = list(request.messages)
        if len(messages) > SEND_MESSAGES_MAX:
            # One entry each would make the answer as large as the request could be.
            return spb.SendMessageResponse(
                status=status(
                    Code.BAD_REQUEST,
                    f"messages has {len(messages)} entries (limit {SEND_MESSAGES_MAX})",
                )
            )
        try:
            topic, kinds = self._validate_send(messages)
            born_host = peer_host(context.peer())
            inbound = [to_inbound(m, born_host, k) for m, k in zip(messages, kinds, strict=True)]
            results = await self._sends.send(topic, inbound)
        except ProtocolError as e:
            return self._send_failure(messages, e.to_status())
        except TopicNotFoundError as e:
            return self._send_failure(messages, status(Code.TOPIC_NOT_FOUND, str(e)))
        except FlowControlled as e:
            return self._send_failure(messages, status(Code.TOO_MANY_REQUESTS, str(e)))
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

    def _validate_send(self, messages: list[pb.Message]) -> tuple[str, list[TopicMessageType]]:
        """The request's topic and each message's type."""
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
        try:
            tc: TopicConfig | None = self._sends.topic_config(topic)
        except TopicNotFoundError:
            tc = None  # answered TOPIC_NOT_FOUND by the send itself
        queue_nums = tc.queue_nums if tc is not None else QUEUE_NUMS_MAX
        kinds = []
        for m in messages:
            kind = validate_message(m, self._max_body_bytes, self._delay_max_ms, queue_nums)
            if tc is not None and not tc.message_type.accepts(kind):
                raise ProtocolError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"topic {topic!r} accepts {tc.message_type.value} messages, not {kind.value}",
                )
            kinds.append(kind)
        return topic, kinds

    @staticmethod
    def _send_failure(messages: Iterable[pb.Message], st: pb.Status) -> spb.SendMessageResponse:
        entries = [
            spb.SendResultEntry(status=st, message_id=echoed_id(m.system_properties.message_id))
            for m in messages
        ]
        return spb.SendMessageResponse(status=st, entries=entries)

    # -- transactions --------------------------------------------------------------------
    async def EndTransaction(  # noqa: N802 - the protocol's method name
        self, request: spb.EndTransactionRequest, context: Context
    ) -> spb.EndTransactionResponse:
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

    # -- consuming: the consumer activity ----------------------------------------------------
    async def ReceiveMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        async for frame in self._consumers.receive_message(request, context):
            yield frame

    async def AckMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.AckMessageRequest, context: Context
    ) -> spb.AckMessageResponse:
        return await self._consumers.ack_message(request)

    async def ChangeInvisibleDuration(  # noqa: N802 - the protocol's method name
        self, request: spb.ChangeInvisibleDurationRequest, context: Context
    ) -> spb.ChangeInvisibleDurationResponse:
        return self._consumers.change_invisible_duration(request)

    async def ForwardMessageToDeadLetterQueue(  # noqa: N802 - the protocol's method name
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Context
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return await self._consumers.forward_to_dead_letter(request)

    async def QueryAssignment(  # noqa: N802 - the protocol's method name
        self, request: spb.QueryAssignmentRequest, context: Context
    ) -> spb.QueryAssignmentResponse:
        return self._consumers.query_assignment(request)

    # -- offset-based consumption: the pull activity ---------------------------------------
    async def PullMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.PullMessageRequest, context: Context
    ) -> AsyncIterator[spb.PullMessageResponse]:
        async for frame in self._pulls.pull_message(request, context):
            yield frame

    async def UpdateOffset(  # noqa: N802 - the protocol's method name
        self, request: spb.UpdateOffsetRequest, context: Context
    ) -> spb.UpdateOffsetResponse:
        return self._pulls.update_offset(request)

    async def GetOffset(  # noqa: N802 - the protocol's method name
        self, request: spb.GetOffsetRequest, context: Context
    ) -> spb.GetOffsetResponse:
        return self._pulls.get_offset(request)

    async def QueryOffset(  # noqa: N802 - the protocol's method name
        self, request: spb.QueryOffsetRequest, context: Context
    ) -> spb.QueryOffsetResponse:
        return self._pulls.query_offset(request)

    # -- newer features the broker lacks ------------------------------------------------------
    async def RecallMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.RecallMessageRequest, context: Context
    ) -> spb.RecallMessageResponse:
        return spb.RecallMessageResponse(
            status=status(Code.NOT_IMPLEMENTED, "RecallMessage: this broker cannot recall messages")
        )

    async def SyncLiteSubscription(  # noqa: N802 - the protocol's method name
        self, request: spb.SyncLiteSubscriptionRequest, context: Context
    ) -> spb.SyncLiteSubscriptionResponse:
        return spb.SyncLiteSubscriptionResponse(
            status=status(
                Code.NOT_IMPLEMENTED, "SyncLiteSubscription: this broker has no lite topics"
            )
        )


def _validate_settings(settings: pb.Settings) -> None:
    size = settings.ByteSize()
    if size > SETTINGS_BYTES_MAX:
        raise ProtocolError(
            Code.BAD_REQUEST, f"settings is {size} bytes (limit {SETTINGS_BYTES_MAX})"
        )
    if settings.HasField("subscription"):
        validate_group(settings.subscription.group.name)
    elif not settings.HasField("publishing"):
        raise ProtocolError(Code.BAD_REQUEST, "settings carry no publishing or subscription")


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
