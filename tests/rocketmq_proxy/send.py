"""SendMessage as an Apache RocketMQ 5 proxy answers it.

- The request is refused as a whole, its top-level status naming the first rule broken, no
  entries: no messages or mixed topics (MESSAGE_CORRUPTED), a bad topic name (ILLEGAL_TOPIC), a
  message without id (ILLEGAL_MESSAGE_ID), an empty or too large body, a bad tag, key or message
  group, reserved or too many property keys, a delivery time too far ahead, a topic that does
  not exist (TOPIC_NOT_FOUND), a message type the topic does not take
  (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE), and the broker's flow control (TOO_MANY_REQUESTS).
- The proxy, not the client, picks the queue: the queue the client addressed
  (``system_properties.queue_id``) is ignored. A lone message with a message group goes to the
  write queue a consistent hash of the group picks (the same queue every time); anything else to
  the next write queue of the stand-in's own round robin over both brokers. The messages of one
  request are stored together on that one queue, at consecutive queue offsets.
- Each stored message gets an OK entry with its message id, its queue offset and, for a
  TRANSACTION message (kept as a half message: EndTransaction is not served), a transaction id.

The message's type is what its properties make it, as the broker reads it: a transaction flag
makes TRANSACTION, a delivery time DELAY, a message group FIFO, nothing NORMAL.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from tests.rocketmq_proxy.config import (
    BODY_BYTES_MAX,
    DELIVERY_AHEAD_MAX_MS,
    FLOW_CONTROL_FILE,
    NAME_PATTERN,
    TOPIC_NAME_BYTES_MAX,
    ProxyConfig,
    Topic,
)
from tests.rocketmq_proxy.store import ProxyStore, StoredMessage

MESSAGE_GROUP_BYTES_MAX = 64
PROPERTIES_MAX = 128
PROPERTIES_BYTES_MAX = 16 * 1024
# Property names the broker keeps for itself (a subset of RocketMQ's MessageConst names).
RESERVED_PROPERTY_KEYS = frozenset(
    {
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "SHARDING_KEY",
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "CLUSTER",
        "__STARTDELIVERTIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "MSG_TYPE",
        "TRACE_CONTEXT",
    }
)
FLOW_CONTROL_ANSWER = "[REJECTREQUEST]system busy, start flow control for a while"
_MASK_64 = (1 << 64) - 1


class ProxyError(Exception):
    """A refusal, answered as a Status{code, message} inside a normal response."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> definition_pb2.Status:
        return definition_pb2.Status(code=self.code, message=self.message)


def ok_status() -> definition_pb2.Status:
    return definition_pb2.Status(code=Code.OK, message=Code.Name(Code.OK))


def topic_name(resource: definition_pb2.Resource, namespace: str) -> str:
    """The topic as stored (NAMESPACE%NAME in a namespace), after the proxy's name rule."""
    name = resource.name
    if not name.strip():
        raise ProxyError(Code.ILLEGAL_TOPIC, "topic name cannot be blank")
    if not NAME_PATTERN.match(name) or len(name.encode()) > TOPIC_NAME_BYTES_MAX:
        raise ProxyError(
            Code.ILLEGAL_TOPIC,
            f"topic name {name!r} is illegal: at most "
            f"{TOPIC_NAME_BYTES_MAX} bytes of [%|a-zA-Z0-9_-]",
        )
    if name.startswith(("rmq_sys_", "RMQ_SYS_", "%RETRY%", "%DLQ%")):
        raise ProxyError(Code.ILLEGAL_TOPIC, f"topic {name!r} is a system topic")
    namespace = namespace or resource.resource_namespace
    return f"{namespace}%{name}" if namespace else name


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: the proxy hashes a message group by it."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def consistent_bucket(key: int, buckets: int) -> int:
    """Jump consistent hash (Lamping and Veach): a key keeps its bucket while buckets stay."""
    state = key & _MASK_64
    chosen, candidate = -1, 0
    while candidate < buckets:
        chosen = candidate
        state = (state * 2862933555777941757 + 1) & _MASK_64
        candidate = int((chosen + 1) * ((1 << 31) / ((state >> 33) + 1)))
    return chosen


class SendService:
    def __init__(
        self, config: ProxyConfig, store: ProxyStore, data_dir: Path, on_stored: Callable[[], None]
    ) -> None:
        self._config = config
        self._store = store
        self._flow_control_file = data_dir / FLOW_CONTROL_FILE
        self._on_stored = on_stored
        self._round_robin = itertools.count()

    def send(
        self, request: service_pb2.SendMessageRequest, namespace: str
    ) -> service_pb2.SendMessageResponse:
        try:
            entries = self._send(request, namespace)
        except ProxyError as e:
            return service_pb2.SendMessageResponse(status=e.status())
        return service_pb2.SendMessageResponse(status=ok_status(), entries=entries)

    def _send(
        self, request: service_pb2.SendMessageRequest, namespace: str
    ) -> list[service_pb2.SendResultEntry]:
        if not request.messages:
            raise ProxyError(Code.MESSAGE_CORRUPTED, "no message to send")
        first = request.messages[0].topic
        if any(m.topic != first for m in request.messages):
            raise ProxyError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
        name = topic_name(first, namespace)
        now_ms = int(time.time() * 1000)
        for m in request.messages:
            _validate(m, now_ms)
        topic = self._config.topic(name)
        if topic is None:
            raise ProxyError(Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        for m in request.messages:
            kind = message_type_of(m)
            if not topic.message_type.takes(kind):
                raise ProxyError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"current message type {definition_pb2.MessageType.Name(kind)} "
                    f"not match with topic accept message types "
                    f"{topic.message_type.value}",
                )
        if self._config.flow_control or self._flow_control_file.exists():
            raise ProxyError(Code.TOO_MANY_REQUESTS, FLOW_CONTROL_ANSWER)
        broker, queue_id = self._select_queue(topic, request)
        offset = self._store.next_offset(name, broker, queue_id)
        stored = [
            _stored(m, name, broker, queue_id, offset + i, now_ms)
            for i, m in enumerate(request.messages)
        ]
        self._store.put(stored)
        self._on_stored()
        return [
            service_pb2.SendResultEntry(
                status=ok_status(),
                message_id=s.message_id,
                transaction_id=s.transaction_id or "",
                offset=s.queue_offset,
            )
            for s in stored
        ]

    def _select_queue(
        self, topic: Topic, request: service_pb2.SendMessageRequest
    ) -> tuple[str, int]:
        write_queues = [(b, q) for b in self._config.brokers for q in range(topic.queues)]
        group = request.messages[0].system_properties.message_group
        if len(request.messages) == 1 and group:
            return write_queues[consistent_bucket(java_string_hash(group), len(write_queues))]
        return write_queues[next(self._round_robin) % len(write_queues)]


def message_type_of(m: definition_pb2.Message) -> int:
    system = m.system_properties
    if system.message_type == definition_pb2.TRANSACTION:
        return int(definition_pb2.TRANSACTION)
    if system.HasField("delivery_timestamp"):
        return int(definition_pb2.DELAY)
    if system.message_group:
        return int(definition_pb2.FIFO)
    return int(definition_pb2.NORMAL)


def _validate(m: definition_pb2.Message, now_ms: int) -> None:
    system = m.system_properties
    if not system.message_id.strip():
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    if not m.body:
        raise ProxyError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(m.body) > BODY_BYTES_MAX:
        raise ProxyError(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"message body cannot exceed the max {BODY_BYTES_MAX} bytes",
        )
    if system.HasField("tag") and (
        not system.tag.strip() or "|" in system.tag or _has_control(system.tag)
    ):
        raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, f"tag {system.tag!r} is illegal")
    for key in system.keys:
        if not key.strip() or _has_control(key):
            raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} is illegal")
    group = system.message_group
    if group and (len(group.encode()) >= MESSAGE_GROUP_BYTES_MAX or _has_control(group)):
        raise ProxyError(
            Code.ILLEGAL_MESSAGE_GROUP,
            f"message group {group!r} is illegal: "
            f"under {MESSAGE_GROUP_BYTES_MAX} bytes, no control characters",
        )
    _validate_properties(m)
    if system.HasField("delivery_timestamp"):
        delivery_ms = system.delivery_timestamp.ToMilliseconds()
        if delivery_ms - now_ms > DELIVERY_AHEAD_MAX_MS:
            raise ProxyError(
                Code.ILLEGAL_DELIVERY_TIME,
                f"delivery time {delivery_ms} is more than {DELIVERY_AHEAD_MAX_MS} ms ahead",
            )


def _validate_properties(m: definition_pb2.Message) -> None:
    properties = m.user_properties
    if len(properties) > PROPERTIES_MAX:
        raise ProxyError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"message properties count cannot exceed {PROPERTIES_MAX}",
        )
    size = sum(len(k.encode()) + len(v.encode()) for k, v in properties.items())
    size += len(m.system_properties.tag.encode()) + sum(
        len(k.encode()) for k in m.system_properties.keys
    )
    if size > PROPERTIES_BYTES_MAX:
        raise ProxyError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"message properties size cannot exceed {PROPERTIES_BYTES_MAX} bytes",
        )
    for key, value in properties.items():
        if key in RESERVED_PROPERTY_KEYS:
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}"
            )
        if not key.strip() or _has_control(key) or _has_control(value):
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {key!r} is illegal")


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def _stored(
    m: definition_pb2.Message, topic: str, broker: str, queue_id: int, offset: int, now_ms: int
) -> StoredMessage:
    system = m.system_properties
    kind = message_type_of(m)
    return StoredMessage(
        topic=topic,
        broker_name=broker,
        queue_id=queue_id,
        queue_offset=offset,
        message_id=system.message_id,
        body=m.body,
        message_type=definition_pb2.MessageType.Name(kind),
        store_timestamp_ms=now_ms,
        born_timestamp_ms=system.born_timestamp.ToMilliseconds(),
        born_host=system.born_host,
        tag=system.tag if system.HasField("tag") else None,
        keys=tuple(system.keys),
        message_group=system.message_group or None,
        delivery_timestamp_ms=(
            system.delivery_timestamp.ToMilliseconds()
            if system.HasField("delivery_timestamp")
            else None
        ),
        transaction_id=uuid.uuid4().hex.upper() if kind == definition_pb2.TRANSACTION else None,
        trace_context=system.trace_context or None,
        properties=dict(m.user_properties),
    )
