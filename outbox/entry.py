"""What the outbox holds: one entry per spooled message, identified by its message id.

An entry's life::

    put ──► PENDING ──claim_due──► leased ──mark_delivered──► DELIVERED (a tombstone, no body)
               ▲                     │  ├──reschedule──► PENDING, attempts + 1, later next send
               │                     │  └──bury────────► DEAD (last error kept)
               │                     ├──release──► PENDING, unchanged
               │                     └──lease expires, expire_leases──► PENDING, maybe_stored
               └──────────── requeue ◄── DEAD

An expired lease's holder may have sent the message before it died: the entry is
``maybe_stored`` from then on, and its resend asks the broker's index first.

``seq`` is assigned by the backend at ``put``, increasing: it orders a FIFO group's entries, and
``scan``/``export`` page by it.
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from outbox.errors import OutboxFullError

# A lease long enough for a send with its whole timeout budget and retries; the resend pool
# passes its own.
LEASE_MS_DEFAULT = 30_000


class EntryState(enum.StrEnum):
    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    DEAD = "DEAD"


class SpoolCause(enum.StrEnum):
    """Why a message is in the outbox rather than at the broker (docs/design.md §4.2)."""

    # TOO_MANY_REQUESTS / system busy: no immediate retry.
    THROTTLED = "THROTTLED"
    # Connection refused, broker down, no route: retried elsewhere first, then spooled.
    UNAVAILABLE = "UNAVAILABLE"
    # The request went out and no answer came: the broker may hold it (maybe_stored).
    AMBIGUOUS = "AMBIGUOUS"
    # Its (topic, message group) already had entries in the outbox: it waits behind them.
    FIFO_FENCE = "FIFO_FENCE"
    # The broker refused the sidecar's credentials (UNAUTHORIZED) or their rights (FORBIDDEN):
    # the sidecar's configuration, not the message, so it waits until an operator fixes it.
    # (Last: the RocksDB codec stores a cause as its index here.)
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """The message as the broker must receive it on every resend (same message id)."""

    topic: str
    body: bytes
    message_id: str
    tag: str | None = None
    keys: tuple[str, ...] = ()
    message_group: str | None = None
    delivery_timestamp_ms: int | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    born_timestamp_ms: int = 0
    # The app's own delivery budget for this message, from its entry's ``created_ms``: past it,
    # the resend pool gives up (DEAD). None: the sidecar's default (``age_max_s``).
    delivery_timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class DeliveryReceipt:
    """What the broker answered when it finally stored the message."""

    queue_id: int
    queue_offset: int
    delivered_ms: int
    # False when the broker answered a weak store (flush or replica timeout): stored all the
    # same, and never resent (that would duplicate it).
    durable: bool = True


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    message: OutboxMessage
    cause: SpoolCause
    created_ms: int
    next_send_time_ms: int
    state: EntryState = EntryState.PENDING
    # An ambiguous send, or a lease that ended with no outcome recorded: check the broker's
    # index by message id before resending.
    maybe_stored: bool = False
    attempts: int = 0
    last_error: str = ""
    seq: int = 0
    lease_owner: str | None = None
    lease_until_ms: int = 0
    # When the state last changed: retention of tombstones and of the dead counts from here.
    state_changed_ms: int = 0
    receipt: DeliveryReceipt | None = None

    @property
    def message_id(self) -> str:
        return self.message.message_id

    @property
    def fifo_group(self) -> tuple[str, str] | None:
        """(topic, message group) for a FIFO message, whose entries leave in ``seq`` order."""
        group = self.message.message_group
        return (self.message.topic, group) if group else None

    @property
    def body_bytes(self) -> int:
        """What the entry counts against ``outbox_bytes_max`` (tombstones hold no body)."""
        return 0 if self.state is EntryState.DELIVERED else len(self.message.body)

    def leased(self, now_ms: int) -> bool:
        return self.lease_owner is not None and self.lease_until_ms > now_ms

    def to_bytes(self) -> bytes:
        """A self-describing encoding for backends that store an entry as one value."""
        return json.dumps(entry_to_dict(self, with_body=True), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> OutboxEntry:
        return entry_from_dict(json.loads(data))

    def delivered(self, receipt: DeliveryReceipt) -> OutboxEntry:
        """The tombstone: the body is dropped, the receipt is what the audit needs."""
        return evolve(
            self,
            message=evolve(self.message, body=b""),
            state=EntryState.DELIVERED,
            receipt=receipt,
            lease_owner=None,
            lease_until_ms=0,
            state_changed_ms=receipt.delivered_ms,
        )


_Slotted = TypeVar("_Slotted", OutboxMessage, OutboxEntry)
_FIELDS = {cls: frozenset(cls.__slots__) for cls in (OutboxMessage, OutboxEntry)}


def evolve(obj: _Slotted, **changes: Any) -> _Slotted:
    """``dataclasses.replace`` for an OutboxMessage or OutboxEntry at a third of its cost (no
    ``__init__`` call, no field introspection; they have no ``__post_init__`` to skip): a drain
    does it a few times per message, on the thread every claim and delivery waits for."""
    cls = type(obj)
    assert changes.keys() <= _FIELDS[cls], changes.keys()
    new = object.__new__(cls)
    for name in cls.__slots__:
        object.__setattr__(new, name, changes[name] if name in changes else getattr(obj, name))
    return new


def entry_to_dict(entry: OutboxEntry, *, with_body: bool) -> dict[str, Any]:
    """The entry as plain JSON values; also the export schema (outbox/export.py)."""
    m = entry.message
    out: dict[str, Any] = {
        "message_id": m.message_id,
        "topic": m.topic,
        "tag": m.tag,
        "keys": list(m.keys),
        "message_group": m.message_group,
        "delivery_timestamp_ms": m.delivery_timestamp_ms,
        "properties": dict(m.properties),
        "born_timestamp_ms": m.born_timestamp_ms,
        "delivery_timeout_ms": m.delivery_timeout_ms,
        "body_size": len(m.body),
        "state": entry.state.value,
        "cause": entry.cause.value,
        "maybe_stored": entry.maybe_stored,
        "attempts": entry.attempts,
        "last_error": entry.last_error,
        "seq": entry.seq,
        "created_ms": entry.created_ms,
        "next_send_time_ms": entry.next_send_time_ms,
        "state_changed_ms": entry.state_changed_ms,
        "lease_owner": entry.lease_owner,
        "lease_until_ms": entry.lease_until_ms,
        "queue_id": entry.receipt.queue_id if entry.receipt else None,
        "queue_offset": entry.receipt.queue_offset if entry.receipt else None,
        "delivered_ms": entry.receipt.delivered_ms if entry.receipt else None,
        "durable": entry.receipt.durable if entry.receipt else None,
    }
    if with_body:
        out["body"] = base64.b64encode(m.body).decode("ascii")
    return out


def entry_from_dict(d: Mapping[str, Any]) -> OutboxEntry:
    receipt = None
    if d.get("queue_offset") is not None:
        receipt = DeliveryReceipt(
            queue_id=int(d["queue_id"]),
            queue_offset=int(d["queue_offset"]),
            delivered_ms=int(d["delivered_ms"]),
            durable=bool(d.get("durable", True)),
        )
    message = OutboxMessage(
        topic=d["topic"],
        body=base64.b64decode(d.get("body", "")),
        message_id=d["message_id"],
        tag=d.get("tag"),
        keys=tuple(d.get("keys", ())),
        message_group=d.get("message_group"),
        delivery_timestamp_ms=d.get("delivery_timestamp_ms"),
        properties=dict(d.get("properties", {})),
        born_timestamp_ms=int(d.get("born_timestamp_ms", 0)),
        delivery_timeout_ms=d.get("delivery_timeout_ms"),
    )
    return OutboxEntry(
        message=message,
        cause=SpoolCause(d["cause"]),
        created_ms=int(d["created_ms"]),
        next_send_time_ms=int(d["next_send_time_ms"]),
        state=EntryState(d["state"]),
        maybe_stored=bool(d["maybe_stored"]),
        attempts=int(d["attempts"]),
        last_error=d.get("last_error", ""),
        seq=int(d["seq"]),
        lease_owner=d.get("lease_owner"),
        lease_until_ms=int(d.get("lease_until_ms", 0)),
        state_changed_ms=int(d.get("state_changed_ms", 0)),
        receipt=receipt,
    )


@dataclass(frozen=True, slots=True)
class OutboxLimits:
    """The outbox's bound. PENDING and DEAD entries count; delivered tombstones do not."""

    outbox_entries_max: int = 1_000_000
    outbox_bytes_max: int = 1024 * 1024 * 1024
    # What OutboxFullError tells a caller to wait before trying again.
    full_retry_after_ms: int = 1_000

    def __post_init__(self) -> None:
        if self.outbox_entries_max < 1:
            raise ValueError(f"outbox_entries_max must be >= 1, got {self.outbox_entries_max}")
        if self.outbox_bytes_max < 1:
            raise ValueError(f"outbox_bytes_max must be >= 1, got {self.outbox_bytes_max}")

    def refusal(self, entries_after: int, bytes_after: int) -> OutboxFullError | None:
        """The error refusing a put after which the outbox would hold this much, or None when
        it fits: the one bound check every backend makes."""
        if entries_after > self.outbox_entries_max or bytes_after > self.outbox_bytes_max:
            return self.full_error(entries_after, bytes_after)
        return None

    def full_error(self, entries_after: int, bytes_after: int) -> OutboxFullError:
        return OutboxFullError(
            f"outbox full: {entries_after} entries / {bytes_after} bytes would pass "
            f"{self.outbox_entries_max} / {self.outbox_bytes_max}",
            self.full_retry_after_ms,
        )


@dataclass(frozen=True, slots=True)
class OutboxStats:
    pending: int
    # PENDING entries under a live lease (a resend in flight).
    in_flight: int
    delivered: int
    dead: int
    # Body bytes of PENDING and DEAD entries: what counts against outbox_bytes_max.
    bytes: int
    oldest_pending_created_ms: int | None
    next_due_ms: int | None
