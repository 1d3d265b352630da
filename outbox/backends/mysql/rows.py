"""The MySQL outbox's row codec: an entry as the row ``put`` inserts, and a row (or a claim's
narrower read of one) back as an entry. Tables: schema.py."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from outbox.backends.mysql.schema import (
    LAST_ERROR_CHARS_MAX,
)
from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry, OutboxMessage, SpoolCause


def as_stored(entry: OutboxEntry, seq: int) -> OutboxEntry:
    """A new entry as ``entry_to_row`` stored it, with the seq it got."""
    return replace(
        entry, seq=seq, lease_until_ms=0, last_error=entry.last_error[:LAST_ERROR_CHARS_MAX]
    )


def entry_to_row(entry: OutboxEntry) -> dict[str, Any]:
    """The row of a new (PENDING, unleased) entry: not leased, its last error cut to fit."""
    m = entry.message
    receipt = entry.receipt
    return {
        "message_id": m.message_id,
        "topic": m.topic,
        "message_group": m.message_group,
        "tag": m.tag,
        "keys_json": json.dumps(list(m.keys)) if m.keys else "[]",
        "properties_json": json.dumps(dict(m.properties)) if m.properties else "{}",
        "delivery_timestamp_ms": m.delivery_timestamp_ms,
        "born_timestamp_ms": m.born_timestamp_ms,
        "delivery_timeout_ms": m.delivery_timeout_ms,
        "body": m.body,
        "body_size": len(m.body),
        "state": entry.state.value,
        "cause": entry.cause.value,
        "maybe_stored": entry.maybe_stored,
        "attempts": entry.attempts,
        "last_error": entry.last_error[:LAST_ERROR_CHARS_MAX],
        "created_ms": entry.created_ms,
        "next_send_time_ms": entry.next_send_time_ms,
        "due_ms": entry.next_send_time_ms,
        "lease_owner": None,
        "lease_until_ms": 0,
        "state_changed_ms": entry.state_changed_ms,
        "queue_id": receipt.queue_id if receipt else None,
        "queue_offset": receipt.queue_offset if receipt else None,
        "delivered_ms": receipt.delivered_ms if receipt else None,
        "receipt_durable": receipt.durable if receipt else None,
    }


def row_to_entry(row: Any) -> OutboxEntry:
    """The entry a row (a mapping by column name, every column) holds."""
    receipt = None
    if row["queue_offset"] is not None:
        receipt = DeliveryReceipt(
            queue_id=int(row["queue_id"]),
            queue_offset=int(row["queue_offset"]),
            delivered_ms=int(row["delivered_ms"]),
            durable=bool(row["receipt_durable"]),
        )
    lease_until_ms = int(row["lease_until_ms"])
    return _entry(row, EntryState(row["state"]), row["lease_owner"], lease_until_ms, receipt)


def claimed_row_to_entry(row: Any, lease_owner: str, lease_until_ms: int) -> OutboxEntry:
    """The entry a claim read (CLAIM_COLUMNS), under the lease the claim wrote: maybe stored
    when it was taken over an expired lease, as ``claim_lease`` wrote it."""
    entry = _entry(row, EntryState.PENDING, lease_owner, lease_until_ms, None)
    if row["lease_owner"] is not None and not entry.maybe_stored:
        return replace(entry, maybe_stored=True)
    return entry


def _entry(
    row: Any,
    state: EntryState,
    lease_owner: str | None,
    lease_until_ms: int,
    receipt: DeliveryReceipt | None,
) -> OutboxEntry:
    keys_json, properties_json = row["keys_json"], row["properties_json"]
    message = OutboxMessage(
        topic=row["topic"],
        body=bytes(row["body"]),
        message_id=row["message_id"],
        tag=row["tag"],
        # Most messages have neither: what entry_to_row writes then is not worth a parse.
        keys=tuple(json.loads(keys_json)) if keys_json != "[]" else (),
        message_group=row["message_group"],
        delivery_timestamp_ms=row["delivery_timestamp_ms"],
        properties=json.loads(properties_json) if properties_json != "{}" else {},
        born_timestamp_ms=int(row["born_timestamp_ms"]),
        delivery_timeout_ms=row["delivery_timeout_ms"],
    )
    return OutboxEntry(
        message=message,
        cause=SpoolCause(row["cause"]),
        created_ms=int(row["created_ms"]),
        next_send_time_ms=int(row["next_send_time_ms"]),
        state=state,
        maybe_stored=bool(row["maybe_stored"]),
        attempts=int(row["attempts"]),
        last_error=row["last_error"],
        seq=int(row["seq"]),
        lease_owner=lease_owner,
        lease_until_ms=lease_until_ms,
        state_changed_ms=int(row["state_changed_ms"]),
        receipt=receipt,
    )
