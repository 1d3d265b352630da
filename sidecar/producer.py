"""The producer: sends one message to the broker with RocketMQ's retry rules.

- One budget: every attempt, route lookup included, must finish within ``send_msg_timeout_ms``
  of the call (RocketMQ's sendMsgTimeout covers the whole send, not each try).
- ``retry_times_when_send_failed`` more attempts after the first, each on the next queue of
  another broker when there is one (latency fault avoidance orders the brokers), with the same
  message id, so a broker that deduplicates by id sees one message.
- A throttled answer (TOO_MANY_REQUESTS) is never retried at once: the broker asked for less.
- A terminal answer is raised as SendRejectedError; every retriable failure ends as one
  SendFailedError whose cause is the last one seen, marked ``maybe_stored`` if any attempt may
  have reached the broker.
- FIFO messages go to one queue chosen by a stable hash of the message group (the same queue on
  every attempt: moving would break the group's order).

It talks ``apache.rocketmq.v2`` only, as an official client does; ``lookup_stored`` uses the
rocketbox broker's admin service when the broker offers it (a real RocketMQ cluster does not),
else, when configured, RocketMQ's brokers by unique key over remoting (sidecar/remoting/).

A receipt says what the broker answered, never what the sidecar asked (``SendReceipt``): the
SendResultEntry's message id, queue offset and transaction id. It names no queue, and the broker
picks the queue itself (a RocketMQ proxy with its own selector, possibly on another broker behind
it; rocketbox's broker by round robin, or by a hash of the message group), so a receipt's
``queue_id`` is ``QUEUE_ID_UNKNOWN``, and its ``broker_name`` is the addressed queue's broker only
where the route puts no other broker behind that endpoint.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from outbox.entry import OutboxMessage, SpoolCause
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from rocketbox_api.credentials import Credentials
from rocketbox_api.names import namespaced
from sidecar.channels import Channels, Endpoint
from sidecar.clock import now_ms
from sidecar.errors import SendFailedError, SendRejectedError, SidecarError
from sidecar.latency_fault import LatencyFaultTolerance
from sidecar.remoting import UniqKeyLookup, UniqKeyLookupConfig, Verdict
from sidecar.route import TopicRoute, TopicRouteCache, WritableQueue
from sidecar.security import broker_channel_credentials
from sidecar.send_status import check_send_status, classify_rpc_error

LOG = logging.getLogger(__name__)
# Failures not retried at once: the broker asked for less, or refused the sidecar itself (its
# credentials or rights: another broker of the cluster would refuse them too).
NO_RETRY_CAUSES = frozenset({SpoolCause.THROTTLED, SpoolCause.UNAUTHORIZED, SpoolCause.FORBIDDEN})


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    access_points: tuple[Endpoint, ...]
    namespace: str = ""
    # RocketMQ DefaultMQProducer's names and defaults.
    retry_times_when_send_failed: int = 2
    send_msg_timeout_ms: int = 3_000
    send_latency_fault_enable: bool = True
    route_refresh_interval_ms: int = 30_000
    # TLS to the brokers, verified against tls_ca_file (a private CA), else the system roots.
    tls: bool = False
    tls_ca_file: Path | None = None
    # The sidecar's own access key, its requests signed as the official clients sign theirs.
    credentials: Credentials | None = None
    # Where no access point offers rocketbox's index, ask RocketMQ's brokers over their remoting
    # protocol instead (sidecar/remoting/, --lookup-namesrv); None: resend unchecked.
    uniq_key_lookup: UniqKeyLookupConfig | None = None

    def __post_init__(self) -> None:
        if self.tls_ca_file is not None and not self.tls:
            raise ValueError("tls_ca_file (--broker-tls-ca) needs tls (--broker-tls)")
        if not self.access_points:
            raise ValueError("access_points: at least one broker endpoint is required")
        if not 0 <= self.retry_times_when_send_failed <= 16:
            raise ValueError("retry_times_when_send_failed must be within 0..16")
        if self.send_msg_timeout_ms < 1:
            raise ValueError("send_msg_timeout_ms must be >= 1")


# A receipt's queue_id: the answer to SendMessage names no queue, and the broker chose it
# (module docstring). RocketMQ's own word for "no queue".
QUEUE_ID_UNKNOWN = -1
# A receipt's broker_name when the endpoint fronts several brokers and picked one itself.
BROKER_NAME_UNKNOWN = ""
# What a stored answer without an entry per message tells of each: no id, no offset.
NO_ENTRY = service_pb2.SendResultEntry(offset=-1)


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """What the broker answered for one stored message (its SendResultEntry)."""

    message_id: str
    # The broker that stored it; BROKER_NAME_UNKNOWN when the endpoint addressed fronts several
    # brokers of the route (a proxy picks one itself).
    broker_name: str
    # QUEUE_ID_UNKNOWN: the answer names no queue (module docstring).
    queue_id: int
    # The broker's offset in the queue it chose; -1 when its answer had no entry per message.
    queue_offset: int
    durable: bool
    attempts: int
    # The broker's transaction id for the message, as answered ("" for none).
    transaction_id: str = ""


SendOutcome = SendReceipt | SendFailedError | SendRejectedError


@dataclass(frozen=True, slots=True)
class StoredCopy:
    queue_id: int
    queue_offset: int


@dataclass(frozen=True, slots=True)
class StoredLookup:
    """What the broker's index says of a message id (``lookup_stored``)."""

    # False: no broker offers the query (a real RocketMQ cluster); ``copy`` means nothing then.
    offered: bool
    copy: StoredCopy | None = None


NOT_OFFERED = StoredLookup(offered=False)
NOT_STORED = StoredLookup(offered=True)


class Producer:
    def __init__(self, config: ProducerConfig) -> None:
        self.config = config
        self._channels = Channels(
            config.namespace,
            broker_channel_credentials(config.tls_ca_file) if config.tls else None,
            config.credentials,
        )
        self._routes = TopicRouteCache(
            self._channels,
            config.access_points,
            config.namespace,
            config.route_refresh_interval_ms,
            config.send_msg_timeout_ms,
        )
        self._fault = LatencyFaultTolerance(config.send_latency_fault_enable)
        self._round_robin = itertools.count()
        self._born_host = socket.gethostname()
        self._admin_offered: dict[Endpoint, bool] = {}
        # Its connections to RocketMQ's NameServers and brokers stay open between lookups.
        self._uniq_key_lookup = (
            UniqKeyLookup(config.uniq_key_lookup, config.credentials)
            if config.uniq_key_lookup is not None
            else None
        )

    @property
    def channels(self) -> Channels:
        """The channels to the brokers, shared with the RocketMQ front's forwarded calls."""
        return self._channels

    async def close(self) -> None:
        if self._uniq_key_lookup is not None:
            await self._uniq_key_lookup.close()
        await self._channels.close()

    async def send(self, message: OutboxMessage) -> SendReceipt:
        """Send with retries; raises SendRejectedError or SendFailedError."""
        [outcome] = await self.send_many([message])
        if isinstance(outcome, SidecarError):
            raise outcome
        return outcome

    async def send_many(self, messages: Sequence[OutboxMessage]) -> list[SendOutcome]:
        """Send messages of one topic as one SendMessage request (a RocketMQ batch: one queue),
        with the retry rules of ``send``; one outcome per message, in order. A retry carries only
        the messages whose attempt failed, so one failing message never holds back the others'
        results."""
        topic = messages[0].topic
        assert all(m.topic == topic for m in messages), "a batch is of one topic"
        assert len(messages) == 1 or not any(m.message_group for m in messages), (
            "a FIFO message is sent alone"
        )
        deadline_s = time.monotonic() + self.config.send_msg_timeout_ms / 1000.0
        outcomes: list[SendOutcome | None] = [None] * len(messages)
        maybe_stored = [False] * len(messages)
        last_failure: list[SendFailedError | None] = [None] * len(messages)
        try:
            route = await self._routes.get(topic, deadline_s)
        except (SendFailedError, SendRejectedError) as e:
            return [e] * len(messages)
        last_broker: str | None = None
        for attempt in range(1, 2 + self.config.retry_times_when_send_failed):
            pending = [i for i, o in enumerate(outcomes) if o is None]
            remaining_s = deadline_s - time.monotonic()
            if not pending or remaining_s <= 0:
                break
            queue = self._select_queue(route, messages[pending[0]], last_broker)
            started_s = time.monotonic()
            request = service_pb2.SendMessageRequest(
                messages=[self._to_wire(messages[i], queue) for i in pending]
            )
            try:
                response = await self._channels.stub(queue.endpoint).SendMessage(
                    request, timeout=remaining_s, metadata=self._channels.metadata()
                )
            except Exception as e:  # grpc.aio.AioRpcError; classified in one place
                answers: list[SendOutcome] = [classify_rpc_error(e)] * len(pending)
            else:
                answers = self._answers(response, route, queue, attempt, messages, pending)
            failed = False
            throttled = False
            for i, answer in zip(pending, answers, strict=True):
                if isinstance(answer, SendFailedError):
                    failed = True
                    throttled = throttled or answer.cause in NO_RETRY_CAUSES
                    maybe_stored[i] = maybe_stored[i] or answer.maybe_stored
                    last_failure[i] = answer
                else:
                    outcomes[i] = answer
            latency_ms = (time.monotonic() - started_s) * 1000.0
            self._fault.update(queue.broker_name, latency_ms, failed=failed)
            if not failed:
                break
            last_broker = queue.broker_name
            LOG.debug("send to %s (%s) attempt %d failed", topic, queue.broker_name, attempt)
            if throttled:
                break  # RocketMQ's rule: the broker asked for less, not for a retry
            if attempt == 1:
                # The route may be what is stale (a broker moved); the next send asks again.
                self._routes.invalidate(topic)
        for i, o in enumerate(outcomes):
            if o is None:
                failure = last_failure[i] or SendFailedError(
                    SpoolCause.UNAVAILABLE, "no time left in send_msg_timeout_ms"
                )
                cause = (
                    SpoolCause.AMBIGUOUS
                    if maybe_stored[i] and failure.cause is not SpoolCause.THROTTLED
                    else failure.cause
                )
                outcomes[i] = SendFailedError(cause, failure.detail, maybe_stored=maybe_stored[i])
        return [o for o in outcomes if o is not None]

    def _answers(
        self,
        response: service_pb2.SendMessageResponse,
        route: TopicRoute,
        queue: WritableQueue,
        attempt: int,
        messages: Sequence[OutboxMessage],
        pending: list[int],
    ) -> list[SendOutcome]:
        """Per message: a receipt of what its entry says, or the error its status means. A
        response without one entry per message is answered by its top-level status for all."""
        broker_name = _answering_broker(route, queue)
        count = len(pending)
        entries = list(response.entries) if len(response.entries) == count else [None] * count
        answers: list[SendOutcome] = []
        for i, entry in zip(pending, entries, strict=True):
            status = entry.status if entry is not None else response.status
            try:
                durable = check_send_status(status.code, status.message)
            except (SendFailedError, SendRejectedError) as e:
                answers.append(e)
                continue
            answered = entry if entry is not None else NO_ENTRY
            answers.append(
                SendReceipt(
                    message_id=answered.message_id or messages[i].message_id,
                    broker_name=broker_name,
                    queue_id=QUEUE_ID_UNKNOWN,
                    queue_offset=answered.offset,
                    durable=durable,
                    attempts=attempt,
                    transaction_id=answered.transaction_id,
                )
            )
        return answers

    def _select_queue(
        self, route: TopicRoute, message: OutboxMessage, last_broker: str | None
    ) -> WritableQueue:
        queues = route.queues
        if message.message_group:
            digest = hashlib.sha256(message.message_group.encode()).digest()
            return queues[int.from_bytes(digest[:8], "big") % len(queues)]
        brokers = self._fault.order(route.broker_names)
        if last_broker is not None and len(brokers) > 1 and brokers[0] == last_broker:
            brokers = brokers[1:] + brokers[:1]
        preferred = brokers[0]
        candidates = [q for q in queues if q.broker_name == preferred]
        return candidates[next(self._round_robin) % len(candidates)]

    def _to_wire(self, m: OutboxMessage, queue: WritableQueue) -> definition_pb2.Message:
        # Fields are set in place: building the submessages with keyword arguments and copying
        # them in cost several times as much, on every message of every request.
        wire = definition_pb2.Message(body=m.body)
        wire.topic.name = m.topic
        wire.topic.resource_namespace = self.config.namespace
        if m.properties:
            wire.user_properties.update(m.properties)
        system = wire.system_properties
        if m.keys:
            system.keys.extend(m.keys)
        system.message_id = m.message_id
        system.body_encoding = definition_pb2.IDENTITY
        born_ms = m.born_timestamp_ms or now_ms()
        system.born_timestamp.seconds = born_ms // 1000
        system.born_timestamp.nanos = born_ms % 1000 * 1_000_000
        system.born_host = self._born_host
        system.queue_id = queue.queue_id
        if m.tag is not None:
            system.tag = m.tag
        if m.message_group:
            system.message_type = definition_pb2.FIFO
            system.message_group = m.message_group
        elif m.delivery_timestamp_ms is not None:
            system.message_type = definition_pb2.DELAY
            system.delivery_timestamp.FromMilliseconds(m.delivery_timestamp_ms)
        else:
            system.message_type = definition_pb2.NORMAL
        return wire

    @property
    def index_lookup_missing(self) -> tuple[Endpoint, ...]:
        """The access points found not to offer ``lookup_stored``'s query (it answered
        UNIMPLEMENTED there: a RocketMQ proxy, which serves apache.rocketmq.v2 alone)."""
        return tuple(e for e, offered in self._admin_offered.items() if not offered)

    async def lookup_stored(self, message_id: str, topic: str) -> StoredLookup:
        """Ask the broker's index whether it holds ``message_id`` of ``topic``. When no broker
        offers the query the caller resends and accepts a possible duplicate (at least once)."""
        timeout_s = self.config.send_msg_timeout_ms / 1000.0
        for endpoint in self.config.access_points:
            if self._admin_offered.get(endpoint) is False:
                continue
            stub = broker_admin_pb2_grpc.BrokerAdminStub(self._channels.channel(endpoint))
            try:
                response = await stub.GetMessage(
                    broker_admin_pb2.GetMessageRequest(message_id=message_id),
                    timeout=timeout_s,
                    metadata=self._channels.metadata(),
                )
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return NOT_STORED
                if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                    self._admin_offered[endpoint] = False
                    continue
                raise classify_rpc_error(e) from e
            self._admin_offered[endpoint] = True
            # The admin service names topics as stored: a namespaced one NAMESPACE%TOPIC.
            stored_topic = namespaced(self.config.namespace, topic)
            for copy in response.messages:
                # A delayed message waits under a system topic, its own in REAL_TOPIC.
                if stored_topic in (copy.topic, copy.system_properties.get("REAL_TOPIC")):
                    return StoredLookup(True, StoredCopy(copy.queue_id, copy.queue_offset))
            return NOT_STORED
        if self._uniq_key_lookup is not None:
            return await self._lookup_by_uniq_key(self._uniq_key_lookup, message_id, topic)
        return NOT_OFFERED

    async def _lookup_by_uniq_key(
        self, uniq_key_lookup: UniqKeyLookup, message_id: str, topic: str
    ) -> StoredLookup:
        """RocketMQ's brokers asked by unique key: FOUND and NOT_FOUND mean what the admin
        lookup's answers do; UNKNOWN (a broker unreachable, an index behind) is NOT_OFFERED,
        resent unchecked."""
        stored_topic = namespaced(self.config.namespace, topic)
        result = await uniq_key_lookup.lookup(stored_topic, message_id)
        if result.verdict is Verdict.FOUND:
            return StoredLookup(True, StoredCopy(result.queue_id, result.queue_offset))
        return NOT_STORED if result.verdict is Verdict.NOT_FOUND else NOT_OFFERED


def _answering_broker(route: TopicRoute, queue: WritableQueue) -> str:
    """The broker a send to ``queue`` is stored on, as far as the route tells: the queue's own,
    unless the route puts other brokers' queues behind the same endpoint, which then picks one
    itself (a RocketMQ proxy in front of several brokers)."""
    for q in route.queues:
        if q.endpoint == queue.endpoint and q.broker_name != queue.broker_name:
            return BROKER_NAME_UNKNOWN
    return queue.broker_name
