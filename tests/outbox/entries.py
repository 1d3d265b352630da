"""Entries for the outbox tests: ``entry(n)`` is the n-th test message, its fields derived from n.

Times are realistic milliseconds since the epoch (NOW_MS and around it), so that every backend
is exercised with 13-digit values.
"""

from __future__ import annotations

from dataclasses import replace

from outbox import DeliveryReceipt, OutboxEntry, OutboxMessage, SpoolCause

NOW_MS = 1_700_000_000_000
LEASE_MS = 30_000
TOPIC = "OrderTopic"


def message_id(n: int) -> str:
    """A RocketMQ-shaped 34-hex id, unique per n."""
    return f"7F00000100{n:024X}"


def entry(
    n: int,
    *,
    next_send_time_ms: int = NOW_MS,
    group: str | None = None,
    topic: str = TOPIC,
    body: bytes | None = None,
    created_ms: int | None = None,
) -> OutboxEntry:
    return OutboxEntry(
        message=OutboxMessage(
            topic=topic,
            body=body if body is not None else f"body-{n}".encode(),
            message_id=message_id(n),
            message_group=group,
        ),
        cause=SpoolCause.UNAVAILABLE,
        created_ms=created_ms if created_ms is not None else NOW_MS - 1_000,
        next_send_time_ms=next_send_time_ms,
    )


def receipt(n: int, delivered_ms: int = NOW_MS) -> DeliveryReceipt:
    return DeliveryReceipt(queue_id=n % 4, queue_offset=1_000 + n, delivered_ms=delivered_ms)


def ids(entries: list[OutboxEntry]) -> list[str]:
    return [e.message_id for e in entries]


def unleased(e: OutboxEntry) -> OutboxEntry:
    return replace(e, lease_owner=None, lease_until_ms=0)
