"""The send path of the broker, below the protocol edge (RocketMQ's SendMessageProcessor).

Picks each message's queue (a message group always hashes to the same queue, so a group's
messages keep their order; others go round robin), routes delayed messages to the timer and
transactional ones to the half topic, and stores a request's messages in one put through the
flow-controlled send queue.
"""

from __future__ import annotations

import itertools
import time
import zlib
from dataclasses import dataclass

from broker.errors import TopicNotFoundError
from broker.flow_control import FlowControlled, FlowControlReason, ForcedFlowControl, SendQueue
from broker.metrics import BrokerMetrics
from broker.store.codec.message import MessageExtBrokerInner
from broker.store.message_store import DefaultMessageStore
from broker.store.status import PutMessageResult
from broker.timer_message import TimerMessageService
from broker.topic_config import (
    TopicConfig,
    TopicConfigManager,
    TopicMessageType,
)
from broker.transaction_message import TransactionalMessageService, make_transaction_id
from rocketbox_api.message_rules import is_system_topic


@dataclass(slots=True)
class InboundMessage:
    """A sent message in the store's model, with what the broker must do with it."""

    inner: MessageExtBrokerInner
    kind: TopicMessageType
    message_id: str
    message_group: str | None
    deliver_ms: int | None  # set for delayed messages


@dataclass(slots=True)
class SendResult:
    result: PutMessageResult
    queue_id: int  # the message's queue in its real topic
    transaction_id: str = ""


class SendMessageService:
    def __init__(
        self,
        store: DefaultMessageStore,
        topics: TopicConfigManager,
        forced: ForcedFlowControl,
        send_queue: SendQueue,
        timer: TimerMessageService,
        transactions: TransactionalMessageService,
        auto_create_topic: bool,
        metrics: BrokerMetrics,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._topics = topics
        self._forced = forced
        self._send_queue = send_queue
        self._timer = timer
        self._transactions = transactions
        self._auto_create_topic = auto_create_topic
        self._round_robin: dict[str, itertools.count[int]] = {}

    def resolve_topic(self, topic: str) -> TopicConfig:
        """The one place a request's topic is looked up, and auto-created when the broker is
        configured so: callers resolve once per request and pass the TopicConfig on."""
        tc = self._topics.find(topic)
        if tc is not None:
            return tc
        if is_system_topic(topic):
            # A dead-letter queue a consumer asks for before any message was dead-lettered:
            # system topics are created by the broker when it needs them, never on first use.
            raise TopicNotFoundError(f"topic {topic!r} does not exist (yet): a system topic")
        if self._auto_create_topic:
            return self._topics.create(topic, exist_ok=True)
        raise TopicNotFoundError(f"topic {topic!r} does not exist and auto-create is off")

    def select_queue(self, tc: TopicConfig, message_group: str | None) -> int:
        if message_group is not None:
            return zlib.crc32(message_group.encode()) % tc.queue_nums
        counter = self._round_robin.setdefault(tc.topic_name, itertools.count())
        return next(counter) % tc.queue_nums

    async def send(self, tc: TopicConfig, messages: list[InboundMessage]) -> list[SendResult]:
        """Store every message of one request (all of the topic ``tc``, as resolve_topic gave
        it); raises FlowControlled without storing anything."""
        try:
            return await self._send(tc, messages)
        except FlowControlled as e:
            self._metrics.observe_flow_control(e.reason)
            raise

    async def _send(self, tc: TopicConfig, messages: list[InboundMessage]) -> list[SendResult]:
        topic = tc.topic_name
        self._forced.check(topic)
        now_ms = time.time_ns() // 1_000_000
        queue_ids = []
        for m in messages:
            queue_id = self.select_queue(tc, m.message_group)
            queue_ids.append(queue_id)
            if m.kind is TopicMessageType.TRANSACTION:
                self._transactions.wrap_half(m.inner, queue_id)
            elif m.deliver_ms is not None and m.deliver_ms > now_ms:
                if self._timer.is_full:
                    raise FlowControlled(
                        f"{self._timer.pending_count} delayed messages pending (timer_pending_max)",
                        FlowControlReason.TIMER_FULL,
                    )
                self._timer.wrap(m.inner, queue_id)
            else:
                m.inner.queue_id = queue_id
        inners = [m.inner for m in messages]

        async def put() -> list[PutMessageResult]:
            started_s = time.perf_counter()
            results = await self._store.async_put_messages(inners)
            self._metrics.observe_put(topic, results, time.perf_counter() - started_s)
            return results

        results = await self._send_queue.submit(put)
        out = []
        for m, queue_id, r in zip(messages, queue_ids, results, strict=True):
            tid = ""
            if m.kind is TopicMessageType.TRANSACTION and r.append is not None:
                tid = make_transaction_id(r.append.wrote_offset, m.message_id)
            out.append(SendResult(r, queue_id, tid))
        return out
