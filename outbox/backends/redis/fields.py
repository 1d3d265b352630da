"""The Redis outbox's entry hash (outbox/backends/redis/outbox.py has the key layout): the
fields ``put`` hands its script, and an entry read back from an ``HGETALL``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from outbox.entry import (
    DeliveryReceipt,
    EntryState,
    OutboxEntry,
    OutboxMessage,
    SpoolCause,
)


def group_name(topic: str, message_group: str) -> str:
    # The topic's length first, so that no (topic, group) pair reads as another.
    return f"{len(topic)}:{topic}:{message_group}"


def group_of_name(name: str) -> tuple[str, str]:
    """The (topic, message group) that ``group_name`` named."""
    length, _, rest = name.partition(":")
    topic_chars = int(length)
    assert rest[topic_chars : topic_chars + 1] == ":", name
    return rest[:topic_chars], rest[topic_chars + 1 :]


def put_fields(entry: OutboxEntry) -> list[Any]:
    """The put script's fields of one entry; numbers as strings, for Lua's sake."""
    m = entry.message
    group = m.message_group
    meta = [
        m.topic,
        m.tag,
        list(m.keys),
        group,
        m.delivery_timestamp_ms,
        dict(m.properties),
        m.born_timestamp_ms,
        entry.cause.value,
        entry.maybe_stored,
        m.delivery_timeout_ms,
    ]
    return [
        m.message_id,
        str(entry.next_send_time_ms),
        str(entry.created_ms),
        str(entry.attempts),
        str(entry.state_changed_ms),
        # An empty group is no group (OutboxEntry.fifo_group).
        group_name(m.topic, group) if group else "",
        entry.last_error,
        json.dumps(meta, separators=(",", ":")),
    ]


def pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def entry_from_hash(fields: dict[bytes, bytes]) -> OutboxEntry:
    # An entry put before messages had a delivery timeout has no tenth item.
    topic, tag, keys, group, delivery_ts, properties, born_ms, cause, put_maybe_stored, *timeout = (
        json.loads(fields[b"meta"])
    )
    owner = fields[b"owner"].decode()
    receipt = None
    if b"q_off" in fields:
        receipt = DeliveryReceipt(
            queue_id=int(fields[b"q_id"]),
            queue_offset=int(fields[b"q_off"]),
            delivered_ms=int(fields[b"d_ms"]),
            durable=fields[b"durable"] == b"1",
        )
    return OutboxEntry(
        message=OutboxMessage(
            topic=topic,
            body=fields.get(b"body", b""),
            message_id=fields[b"id"].decode(),
            tag=tag,
            keys=tuple(keys),
            message_group=group,
            delivery_timestamp_ms=delivery_ts,
            properties=properties,
            born_timestamp_ms=born_ms,
            delivery_timeout_ms=timeout[0] if timeout else None,
        ),
        cause=SpoolCause(cause),
        created_ms=int(fields[b"created"]),
        next_send_time_ms=int(fields[b"nst"]),
        state=EntryState(fields[b"state"].decode()),
        maybe_stored=put_maybe_stored or fields.get(b"ms") == b"1",
        attempts=int(fields[b"attempts"]),
        last_error=fields[b"err"].decode(),
        seq=int(fields[b"seq"]),
        lease_owner=owner or None,
        lease_until_ms=int(fields[b"lease"]) if owner else 0,
        state_changed_ms=int(fields[b"changed"]),
        receipt=receipt,
    )
