"""Coalesced broker sends: plain messages accepted concurrently for one topic leave as one
multi-message SendMessage (a RocketMQ batch), formed from what accumulated while the topic's
previous request was in flight (sidecar/batcher.py). One call then carries many messages: the
broker's and the sidecar's cost per message falls with the batch.

Only plain messages coalesce. A FIFO message is sent alone (a RocketMQ 5 proxy honours the message
group only in a single-message request, so a batch could leave the group's queue), and so is a
delayed one (RocketMQ brokers refuse delay in a batch).

Each message keeps its own result:
- the producer answers a request per message (an entry-level error answers only its message)
  and retries the failed ones with RocketMQ's rules (sidecar/producer.py);
- a request refused as a whole by a terminal answer about one of its messages (the broker
  validates a batch as a whole, as a proxy does) is sent again one message a request, so only
  the message at fault is rejected. Topic-level refusals (unknown or illegal topic) are every
  message's answer as they are.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from outbox.entry import OutboxMessage, SpoolCause
from sidecar.batcher import InFlightBatcher
from sidecar.errors import SendFailedError, SendRejectedError
from sidecar.metrics import SidecarMetrics
from sidecar.producer import Producer, SendOutcome

LOG = logging.getLogger(__name__)
# A rocketbox or RocketMQ broker takes 4 MiB of bodies in a request (maxMessageSize).
COALESCE_BYTES_MAX_LIMIT = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CoalesceConfig:
    # Off: every message is its own SendMessage, as before coalescing (for comparison).
    enabled: bool = True
    # Messages and body bytes in one coalesced SendMessage.
    coalesce_messages_max: int = 128
    coalesce_bytes_max: int = COALESCE_BYTES_MAX_LIMIT
    # Coalesced requests of one topic out at once. One keeps batches largest, and beat two or four
    # in the sidecar bench (each request is cheap; what matters is how much it carries).
    coalesce_requests_in_flight_max: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.coalesce_messages_max <= 1_024:
            raise ValueError(
                f"coalesce_messages_max must be within 1..1024, got {self.coalesce_messages_max}"
            )
        if not 1 <= self.coalesce_bytes_max <= COALESCE_BYTES_MAX_LIMIT:
            raise ValueError(
                f"coalesce_bytes_max must be within 1..{COALESCE_BYTES_MAX_LIMIT}, "
                f"got {self.coalesce_bytes_max}"
            )
        if not 1 <= self.coalesce_requests_in_flight_max <= 64:
            raise ValueError(
                "coalesce_requests_in_flight_max must be within 1..64, "
                f"got {self.coalesce_requests_in_flight_max}"
            )


def coalescable(m: OutboxMessage) -> bool:
    """May share a SendMessage with other messages of its topic: neither FIFO nor delayed."""
    return not m.message_group and m.delivery_timestamp_ms is None


class SendCoalescer:
    def __init__(self, producer: Producer, config: CoalesceConfig, metrics: SidecarMetrics) -> None:
        self._producer = producer
        self._config = config
        self._metrics = metrics
        self._lanes: dict[str, InFlightBatcher[OutboxMessage, SendOutcome]] = {}

    async def send(self, message: OutboxMessage) -> SendOutcome:
        """The message's outcome (a receipt, or the error that answers it); never raises for a
        broker's answer."""
        if not self._config.enabled or not coalescable(message):
            return await self._send_alone(message)
        lane = self._lanes.get(message.topic)
        if lane is None:
            c = self._config
            topic = message.topic
            lane = self._lanes[topic] = InFlightBatcher(
                self._send_request,
                c.coalesce_messages_max,
                c.coalesce_bytes_max,
                c.coalesce_requests_in_flight_max,
                size_bytes=lambda m: len(m.body),
                # Topics come and go: only busy lanes are kept.
                on_idle=functools.partial(self._drop_lane, topic),
            )
        return await lane.submit(message)

    async def wait_idle(self) -> None:
        for lane in list(self._lanes.values()):
            await lane.wait_idle()

    def _drop_lane(self, topic: str) -> None:
        del self._lanes[topic]

    async def _send_request(self, messages: Sequence[OutboxMessage]) -> list[SendOutcome]:
        self._metrics.broker_send_messages.observe(len(messages))
        try:
            outcomes = await self._producer.send_many(messages)
        except Exception as e:  # a fault of ours, not the broker's answer: it answers each message
            LOG.exception("a coalesced send to %s failed in the sidecar", messages[0].topic)
            # Whether the request went out is unknown: a resend checks the broker's index first.
            failure = SendFailedError(SpoolCause.AMBIGUOUS, f"{type(e).__name__}: {e}", True)
            return [failure] * len(messages)
        if len(messages) > 1 and refused_as_a_whole(outcomes):
            # Which message is at fault is unknown: each is sent on its own, at once, so only
            # the culprit gets the refusal. Nothing of a refused request was stored.
            return list(await asyncio.gather(*(self._send_alone(m) for m in messages)))
        return outcomes

    async def _send_alone(self, message: OutboxMessage) -> SendOutcome:
        self._metrics.broker_send_messages.observe(1)
        [outcome] = await self._producer.send_many([message])
        return outcome


def refused_as_a_whole(outcomes: Sequence[SendOutcome]) -> bool:
    """Every message refused with one terminal answer that is not about the topic."""
    first = outcomes[0]
    if not isinstance(first, SendRejectedError) or first.field == "topic":
        return False
    return all(isinstance(o, SendRejectedError) and str(o) == str(first) for o in outcomes)
