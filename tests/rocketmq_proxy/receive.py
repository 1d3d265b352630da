"""ReceiveMessage, AckMessage and ChangeInvisibleDuration as an Apache RocketMQ 5 proxy answers.

ReceiveMessage (ReceiveActivity's rules, then the stream its writer produces):

- the client's Settings must have arrived on its Telemetry stream (the proxy reads the group's
  retry limit from them): without them the answer is INTERNAL_SERVER_ERROR;
- the polling time is the request's ``long_polling_timeout`` (else the time left minus half the
  client's request timeout), clamped to the proxy's 5-20 s; when the call's deadline leaves
  less than that, the time left, and below the minimum ILLEGAL_POLLING_TIME;
- the invisible duration must be within 10 s to 12 h (auto_renew: the proxy's 60 s instead);
  a batch over 32 is refused by the broker (INTERNAL_SERVER_ERROR); a TAG filter of ``*`` or
  ``a||b`` (anything else: ILLEGAL_FILTER_EXPRESSION);
- it pops from every queue of the broker the request's queue names (the queue id is ignored),
  waiting for the polling time when nothing is there;
- found: ``{status OK}``, one ``{message}`` each, ``{delivery_timestamp}``, end; nothing:
  ``{status MESSAGE_NOT_FOUND "no new message"}``, ``{delivery_timestamp}``, end; a refusal:
  ``{status}``, ``{delivery_timestamp}``, end. A message the stream could not write is visible
  again a second later.

AckMessage answers one entry per receipt handle (the top-level status their common code, or
MULTIPLE_RESULTS); ChangeInvisibleDuration answers the new receipt handle, or on an error the
old one.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

import grpc
from google.protobuf import timestamp_pb2
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from tests.rocketmq_proxy.config import (
    AUTO_RENEW_SLICE_MS,
    GROUP_NAME_BYTES_MAX,
    INVISIBLE_DURATION_MAX_MS,
    NAME_PATTERN,
    RECEIVE_BATCH_MAX,
    ProxyConfig,
)
from tests.rocketmq_proxy.groups import ConsumerGroups, Delivery, now_ms
from tests.rocketmq_proxy.send import ProxyError, ok_status, topic_name

# Clients older than this get BAD_REQUEST instead of ILLEGAL_POLLING_TIME (the code is newer).
ILLEGAL_POLLING_TIME_SINCE = "5.0.3"
# How long a message the stream failed to write stays invisible.
UNWRITTEN_INVISIBLE_MS = 1_000
STORE_HOST = "127.0.0.1:10911"


def group_name(resource: definition_pb2.Resource, namespace: str) -> str:
    name = resource.name
    if not name.strip():
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, "consumer group cannot be blank")
    if not NAME_PATTERN.match(name) or len(name.encode()) > GROUP_NAME_BYTES_MAX:
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {name!r} is illegal")
    namespace = namespace or resource.resource_namespace
    return f"{namespace}%{name}" if namespace else name


def _tags(expression: definition_pb2.FilterExpression) -> frozenset[str] | None:
    if expression.type not in (definition_pb2.TAG, definition_pb2.FILTER_TYPE_UNSPECIFIED):
        raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, "only TAG filter expressions are served")
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, f"filter expression {text!r} is illegal")
    return tags


def _now_timestamp() -> service_pb2.ReceiveMessageResponse:
    t = timestamp_pb2.Timestamp()
    t.FromMilliseconds(now_ms())
    return service_pb2.ReceiveMessageResponse(delivery_timestamp=t)


def _status(code: int, message: str) -> service_pb2.ReceiveMessageResponse:
    return service_pb2.ReceiveMessageResponse(
        status=definition_pb2.Status(code=code, message=message)
    )


class ReceiveService:
    def __init__(self, config: ProxyConfig, groups: ConsumerGroups) -> None:
        self._config = config
        self._groups = groups
        self._next_broker = 0

    async def receive(
        self,
        request: service_pb2.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext[object, object],
        settings: definition_pb2.Settings | None,
        namespace: str,
        client_version: str,
    ) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
        try:
            if settings is None:
                raise ProxyError(
                    Code.INTERNAL_SERVER_ERROR,
                    "no settings of this client yet (its Telemetry stream)",
                )
            polling_ms = self._polling_ms(request, context, settings, client_version)
            topic = topic_name(request.message_queue.topic, namespace)
            group = group_name(request.group, namespace)
            invisible_ms = self._invisible_ms(request)
            tags = _tags(request.filter_expression)
            if self._config.topic(topic) is None:
                raise ProxyError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
            self._groups.require(group)
            if request.batch_size > RECEIVE_BATCH_MAX:
                raise ProxyError(
                    Code.INTERNAL_SERVER_ERROR,
                    f"the broker pop message's num is greater than {RECEIVE_BATCH_MAX}",
                )
        except ProxyError as e:
            yield _status(e.code, e.message)
            yield _now_timestamp()
            return
        broker = self._broker(request.message_queue.broker.name)
        batch = max(1, request.batch_size)
        found = await self._poll(group, topic, broker, batch, invisible_ms, tags, polling_ms)
        if not found:
            yield _status(Code.MESSAGE_NOT_FOUND, "no new message")
            yield _now_timestamp()
            return
        written = 0
        try:
            yield service_pb2.ReceiveMessageResponse(status=ok_status())
            for d in found:
                yield service_pb2.ReceiveMessageResponse(message=_message_view(d, namespace))
                written += 1
            yield _now_timestamp()
        finally:
            if written < len(found):
                self._groups.release(group, found[written:], UNWRITTEN_INVISIBLE_MS)

    def _polling_ms(
        self,
        request: service_pb2.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext[object, object],
        settings: definition_pb2.Settings,
        client_version: str,
    ) -> int:
        remaining_s = context.time_remaining()
        remaining_ms = int(remaining_s * 1000) if remaining_s is not None else 1 << 40
        if request.HasField("long_polling_timeout"):
            polling_ms = int(request.long_polling_timeout.ToMilliseconds())
        else:
            polling_ms = remaining_ms - int(settings.request_timeout.ToMilliseconds()) // 2
        polling_ms = max(
            self._config.long_polling_min_ms, min(polling_ms, self._config.long_polling_max_ms)
        )
        if polling_ms > remaining_ms:
            if remaining_ms < self._config.long_polling_min_ms:
                code = (
                    Code.BAD_REQUEST
                    if _older(client_version, ILLEGAL_POLLING_TIME_SINCE)
                    else Code.ILLEGAL_POLLING_TIME
                )
                raise ProxyError(
                    code,
                    "The deadline time remaining is not enough for polling, "
                    "please check network condition",
                )
            polling_ms = remaining_ms
        return polling_ms

    def _invisible_ms(self, request: service_pb2.ReceiveMessageRequest) -> int:
        if request.auto_renew:
            return AUTO_RENEW_SLICE_MS
        invisible_ms = int(request.invisible_duration.ToMilliseconds())
        validate_invisible_ms(invisible_ms, self._config.invisible_duration_min_ms)
        return invisible_ms

    def _broker(self, name: str) -> str:
        if name in self._config.brokers:
            return name
        self._next_broker += 1
        return self._config.brokers[self._next_broker % len(self._config.brokers)]

    async def _poll(
        self,
        group: str,
        topic: str,
        broker: str,
        batch: int,
        invisible_ms: int,
        tags: frozenset[str] | None,
        polling_ms: int,
    ) -> list[Delivery]:
        deadline_ms = now_ms() + polling_ms
        while True:
            changed = self._groups.changed()
            found = self._groups.pop(group, topic, broker, batch, invisible_ms, tags)
            if found:
                return found
            wake_ms = deadline_ms
            due_ms = self._groups.next_due_ms(topic)
            if due_ms is not None:
                wake_ms = min(wake_ms, due_ms)
            if now_ms() >= deadline_ms:
                return []
            try:
                async with asyncio.timeout(max(0.0, (wake_ms - now_ms()) / 1000.0)):
                    await changed.wait()
            except TimeoutError:
                pass

    def ack(
        self, request: service_pb2.AckMessageRequest, namespace: str
    ) -> service_pb2.AckMessageResponse:
        try:
            topic = topic_name(request.topic, namespace)
            group = group_name(request.group, namespace)
        except ProxyError as e:
            return service_pb2.AckMessageResponse(status=e.status())
        entries = []
        for entry in request.entries:
            try:
                self._groups.ack(group, topic, entry.receipt_handle)
                status = ok_status()
            except ProxyError as e:
                status = e.status()
            entries.append(
                service_pb2.AckMessageResultEntry(
                    message_id=entry.message_id,
                    receipt_handle=entry.receipt_handle,
                    status=status,
                )
            )
        codes = {e.status.code for e in entries}
        if len(codes) > 1:
            top = definition_pb2.Status(code=Code.MULTIPLE_RESULTS, message="MULTIPLE_RESULTS")
        elif codes:
            top = entries[0].status
        else:
            top = definition_pb2.Status(code=Code.INTERNAL_SERVER_ERROR, message="no entry to ack")
        return service_pb2.AckMessageResponse(status=top, entries=entries)

    def change_invisible_duration(
        self, request: service_pb2.ChangeInvisibleDurationRequest, namespace: str
    ) -> service_pb2.ChangeInvisibleDurationResponse:
        try:
            topic = topic_name(request.topic, namespace)
            group = group_name(request.group, namespace)
            invisible_ms = int(request.invisible_duration.ToMilliseconds())
            validate_invisible_ms(invisible_ms, 0)
            handle = self._groups.change_invisible_duration(
                group, topic, request.receipt_handle, invisible_ms
            )
        except ProxyError as e:
            return service_pb2.ChangeInvisibleDurationResponse(
                status=e.status(), receipt_handle=request.receipt_handle
            )
        return service_pb2.ChangeInvisibleDurationResponse(
            status=ok_status(), receipt_handle=handle
        )


def validate_invisible_ms(invisible_ms: int, minimum_ms: int) -> None:
    if not minimum_ms <= invisible_ms <= INVISIBLE_DURATION_MAX_MS:
        raise ProxyError(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"the invisible time {invisible_ms} ms is "
            f"not within {minimum_ms}..{INVISIBLE_DURATION_MAX_MS} ms",
        )


def _older(version: str, than: str) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))

    return not version or parts(version) < parts(than)


def _message_view(d: Delivery, namespace: str) -> definition_pb2.Message:
    """The message as the proxy delivers it (GrpcConverter's fields)."""
    m = d.message
    name = m.topic.split("%", 1)[1] if namespace and "%" in m.topic else m.topic
    view = definition_pb2.Message(body=m.body, user_properties=m.properties)
    view.topic.name = name
    view.topic.resource_namespace = namespace
    system = view.system_properties
    if m.tag is not None:
        system.tag = m.tag
    system.keys.extend(m.keys)
    system.message_id = m.message_id
    system.body_digest.type = definition_pb2.MD5
    system.body_digest.checksum = hashlib.md5(m.body).hexdigest().upper()
    system.body_encoding = definition_pb2.IDENTITY
    system.message_type = definition_pb2.MessageType.Value(m.message_type)
    system.born_timestamp.FromMilliseconds(m.born_timestamp_ms)
    system.born_host = m.born_host
    system.store_timestamp.FromMilliseconds(m.store_timestamp_ms)
    system.store_host = STORE_HOST
    if m.delivery_timestamp_ms is not None:
        system.delivery_timestamp.FromMilliseconds(m.delivery_timestamp_ms)
    system.receipt_handle = d.receipt_handle
    system.queue_id = m.queue_id
    system.queue_offset = m.queue_offset
    system.delivery_attempt = d.attempt
    if m.message_group is not None:
        system.message_group = m.message_group
    if m.trace_context is not None:
        system.trace_context = m.trace_context
    return view
