"""Consumer groups with RocketMQ's pop semantics: receive, invisible duration, receipt handle, ack.

- A group exists when the stand-in was started with it, or, with ``auto_create_group`` (the
  broker's ``autoCreateSubscriptionGroup``, on by default), once it is first used; otherwise a
  receive is answered CONSUMER_GROUP_NOT_FOUND, as the proxy maps the broker's
  SUBSCRIPTION_GROUP_NOT_EXIST.
- A new group starts at each queue's first message: a broker does so while that message is
  still in memory, as it is in any store a test writes.
- A received message is invisible to its group for the invisible duration and carries a
  receipt handle. Ack with the current handle removes it for the group (durably);
  ChangeInvisibleDuration restarts its clock and issues a new handle, the old one now invalid. A
  handle past its invisible time, replaced, or never issued is INVALID_RECEIPT_HANDLE. Once the
  time passes unacknowledged the message is delivered again, its attempt count one higher; past
  ``RETRY_MAX_TIMES + 1`` attempts it goes to the group's dead letters instead.
- Messages the group's tag filter does not take are consumed without delivery (the broker
  skips them by their tag hash). Half (TRANSACTION) messages are never delivered; DELAY
  messages only from their delivery time.

Receipt handles and in-flight state live in memory only: after a restart every unacknowledged
message is visible again and old handles are unknown.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

from rocketmq.grpc_protocol import Code

from tests.rocketmq_proxy.config import RETRY_MAX_TIMES, ProxyConfig
from tests.rocketmq_proxy.send import ProxyError
from tests.rocketmq_proxy.store import ProxyStore, StoredMessage

MessageKey = tuple[str, str, int, int]  # topic, broker, queue id, queue offset


@dataclass
class Delivery:
    """One delivery of a message to a group: what the receive stream carries."""

    message: StoredMessage
    receipt_handle: str
    attempt: int
    invisible_until_ms: int


def now_ms() -> int:
    return int(time.time() * 1000)


def key_of(m: StoredMessage) -> MessageKey:
    return (m.topic, m.broker_name, m.queue_id, m.queue_offset)


class ConsumerGroups:
    def __init__(self, config: ProxyConfig, store: ProxyStore) -> None:
        self._config = config
        self._store = store
        # The latest delivery of each message to each group, and deliveries by handle.
        self._deliveries: dict[tuple[str, MessageKey], Delivery] = {}
        self._handles: dict[str, tuple[str, MessageKey]] = {}
        self.dead_letters: dict[str, list[StoredMessage]] = {}
        self._changed = asyncio.Event()

    # -- waking long polls --------------------------------------------------------------------
    def notify(self) -> None:
        """Something may have become receivable: every waiting poll looks again."""
        self._changed.set()
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        """The event the next ``notify`` sets; take it before looking, then wait on it."""
        return self._changed

    def next_due_ms(self, topic: str) -> int | None:
        """When the next message of ``topic`` turns receivable by time alone, if any will."""
        times = [
            d.invisible_until_ms for (_, key), d in self._deliveries.items() if key[0] == topic
        ]
        times += [
            m.delivery_timestamp_ms
            for m in self._store.messages
            if m.topic == topic and m.delivery_timestamp_ms is not None
        ]
        later = [t for t in times if t > now_ms()]
        return min(later) if later else None

    # -- groups -------------------------------------------------------------------------------
    def require(self, group: str) -> None:
        if group in self._config.groups or group in self._store.created_groups:
            return
        if not self._config.auto_create_group:
            raise ProxyError(
                Code.CONSUMER_GROUP_NOT_FOUND, f"subscription group [{group}] does not exist"
            )
        self._store.create_group(group)

    # -- pop ----------------------------------------------------------------------------------
    def pop(
        self,
        group: str,
        topic: str,
        broker: str,
        batch: int,
        invisible_ms: int,
        tags: frozenset[str] | None,
    ) -> list[Delivery]:
        """Up to ``batch`` messages of ``topic`` on ``broker`` receivable by ``group`` now,
        each made invisible for ``invisible_ms``. ``tags`` None: every tag."""
        found: list[Delivery] = []
        now = now_ms()
        for m in self._store.messages:
            if len(found) >= batch:
                break
            if m.topic != topic or m.broker_name != broker or not self._receivable(group, m, now):
                continue
            if tags is not None and (m.tag or "") not in tags:
                self._store.ack(group, m)
                continue
            previous = self._deliveries.get((group, key_of(m)))
            attempt = previous.attempt + 1 if previous is not None else 1
            if attempt > RETRY_MAX_TIMES + 1:
                self._forget(group, m)
                self._store.ack(group, m)
                self.dead_letters.setdefault(group, []).append(m)
                continue
            found.append(self._deliver(group, m, attempt, now + invisible_ms))
        return found

    def _receivable(self, group: str, m: StoredMessage, now: int) -> bool:
        if m.transaction_id is not None or self._store.is_acked(group, m):
            return False
        if m.delivery_timestamp_ms is not None and m.delivery_timestamp_ms > now:
            return False
        previous = self._deliveries.get((group, key_of(m)))
        return previous is None or previous.invisible_until_ms <= now

    def _deliver(self, group: str, m: StoredMessage, attempt: int, until_ms: int) -> Delivery:
        self._forget(group, m)
        handle = f"{m.broker_name}:{m.queue_id}:{m.queue_offset}:{secrets.token_hex(12)}"
        delivery = Delivery(m, handle, attempt, until_ms)
        self._deliveries[(group, key_of(m))] = delivery
        self._handles[handle] = (group, key_of(m))
        return delivery

    def _forget(self, group: str, m: StoredMessage) -> None:
        previous = self._deliveries.pop((group, key_of(m)), None)
        if previous is not None:
            self._handles.pop(previous.receipt_handle, None)

    # -- ack and change -----------------------------------------------------------------------
    def _current(self, group: str, topic: str, handle: str) -> Delivery:
        if not handle.strip():
            raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "receipt handle cannot be empty")
        owner = self._handles.get(handle)
        if owner is None or owner[0] != group or owner[1][0] != topic:
            raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is invalid")
        delivery = self._deliveries[owner]
        if delivery.invisible_until_ms <= now_ms():
            raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
        return delivery

    def ack(self, group: str, topic: str, handle: str) -> None:
        delivery = self._current(group, topic, handle)
        self._forget(group, delivery.message)
        self._store.ack(group, delivery.message)

    def change_invisible_duration(
        self, group: str, topic: str, handle: str, invisible_ms: int
    ) -> str:
        """The new receipt handle; the message is visible again ``invisible_ms`` from now."""
        delivery = self._current(group, topic, handle)
        again = self._deliver(group, delivery.message, delivery.attempt, now_ms() + invisible_ms)
        self.notify()
        return again.receipt_handle

    def release(self, group: str, deliveries: list[Delivery], after_ms: int) -> None:
        """Deliveries the stream could not write: visible again ``after_ms`` from now."""
        for d in deliveries:
            current = self._deliveries.get((group, key_of(d.message)))
            if current is d:
                d.invisible_until_ms = now_ms() + after_ms
