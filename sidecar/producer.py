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
rocketbox broker's admin service when the broker offers it (a real RocketMQ cluster does not).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import socket
import time
from dataclasses import dataclass

import grpc
from google.protobuf import timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from outbox.entry import OutboxMessage, SpoolCause
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from sidecar.channels import Channels, Endpoint
from sidecar.errors import SendFailedError
from sidecar.latency_fault import LatencyFaultTolerance
from sidecar.route import TopicRoute, TopicRouteCache, WritableQueue
from sidecar.send_status import check_send_status, classify_rpc_error

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    access_points: tuple[Endpoint, ...]
    namespace: str = ""
    # RocketMQ DefaultMQProducer's names and defaults.
    retry_times_when_send_failed: int = 2
    send_msg_timeout_ms: int = 3_000
    send_latency_fault_enable: bool = True
    route_refresh_interval_ms: int = 30_000
    tls: bool = False

    def __post_init__(self) -> None:
        if not self.access_points:
            raise ValueError("access_points: at least one broker endpoint is required")
        if not 0 <= self.retry_times_when_send_failed <= 16:
            raise ValueError("retry_times_when_send_failed must be within 0..16")
        if self.send_msg_timeout_ms < 1:
            raise ValueError("send_msg_timeout_ms must be >= 1")


@dataclass(frozen=True, slots=True)
class SendReceipt:
    message_id: str
    broker_name: str
    # The queue the sidecar addressed. A RocketMQ proxy (and rocketbox's broker) may store a
    # non-FIFO message on another queue of the same broker: queue_offset is the broker's own.
    queue_id: int
    queue_offset: int
    durable: bool
    attempts: int


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
        self._channels = Channels(config.namespace, config.tls)
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

    async def close(self) -> None:
        await self._channels.close()

    async def send(self, message: OutboxMessage) -> SendReceipt:
        """Send with retries; raises SendRejectedError or SendFailedError."""
        deadline_s = time.monotonic() + self.config.send_msg_timeout_ms / 1000.0
        route = await self._routes.get(message.topic, deadline_s)
        attempts_max = 1 + self.config.retry_times_when_send_failed
        maybe_stored = False
        failure: SendFailedError | None = None
        last_broker: str | None = None
        for attempt in range(1, attempts_max + 1):
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                break
            queue = self._select_queue(route, message, last_broker)
            started_s = time.monotonic()
            try:
                response = await self._channels.stub(queue.endpoint).SendMessage(
                    service_pb2.SendMessageRequest(messages=[self._to_wire(message, queue)]),
                    timeout=remaining_s,
                    metadata=self._channels.metadata(),
                )
            except Exception as e:  # grpc.aio.AioRpcError; classified in one place
                failure = classify_rpc_error(e)
            else:
                status = response.status
                entry = response.entries[0] if len(response.entries) == 1 else None
                if entry is not None and status.code == entry.status.code:
                    status = entry.status
                try:
                    durable = check_send_status(status.code, status.message)
                except SendFailedError as e:
                    failure = e
                else:
                    latency_ms = (time.monotonic() - started_s) * 1000.0
                    self._fault.update(queue.broker_name, latency_ms, failed=False)
                    return SendReceipt(
                        message_id=message.message_id,
                        broker_name=queue.broker_name,
                        queue_id=queue.queue_id,
                        queue_offset=entry.offset if entry is not None else -1,
                        durable=durable,
                        attempts=attempt,
                    )
            latency_ms = (time.monotonic() - started_s) * 1000.0
            self._fault.update(queue.broker_name, latency_ms, failed=True)
            maybe_stored = maybe_stored or failure.maybe_stored
            last_broker = queue.broker_name
            LOG.debug(
                "send of %s to %s (%s) attempt %d failed: %s",
                message.message_id, message.topic, queue.broker_name, attempt, failure,
            )  # fmt: skip
            if failure.cause is SpoolCause.THROTTLED:
                break
            if attempt == 1:
                # The route may be what is stale (a broker moved); the next send asks again.
                self._routes.invalidate(message.topic)
        if failure is None:
            failure = SendFailedError(SpoolCause.AMBIGUOUS, "send timeout spent", maybe_stored)
        cause = (
            SpoolCause.AMBIGUOUS
            if maybe_stored and failure.cause is not SpoolCause.THROTTLED
            else failure.cause
        )
        raise SendFailedError(cause, failure.detail, maybe_stored=maybe_stored)

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
        born = timestamp_pb2.Timestamp()
        born.FromMilliseconds(m.born_timestamp_ms or int(time.time() * 1000))
        system = definition_pb2.SystemProperties(
            keys=list(m.keys),
            message_id=m.message_id,
            body_encoding=definition_pb2.IDENTITY,
            born_timestamp=born,
            born_host=self._born_host,
            queue_id=queue.queue_id,
        )
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
        return definition_pb2.Message(
            topic=definition_pb2.Resource(name=m.topic, resource_namespace=self.config.namespace),
            user_properties=dict(m.properties),
            system_properties=system,
            body=m.body,
        )

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
                    broker_admin_pb2.GetMessageRequest(message_id=message_id), timeout=timeout_s
                )
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return NOT_STORED
                if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                    self._admin_offered[endpoint] = False
                    continue
                raise classify_rpc_error(e) from e
            self._admin_offered[endpoint] = True
            for copy in response.messages:
                # A delayed message waits under a system topic, its own in REAL_TOPIC.
                if topic in (copy.topic, copy.system_properties.get("REAL_TOPIC")):
                    return StoredLookup(True, StoredCopy(copy.queue_id, copy.queue_offset))
            return NOT_STORED
        return NOT_OFFERED
