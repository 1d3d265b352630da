"""A spooled message's delivery budget: how long the resend pool keeps trying before it gives
up on it, as Kafka's ``delivery.timeout.ms`` bounds a record's delivery by time, not by a count
of retries.

The budget runs from when the entry became PENDING (``state_changed_ms``: its spool, or an
operator's requeue of it once it was DEAD, which grants a fresh budget). A message carries its own
(``Message.delivery_timeout``, kept in the outbox as ``OutboxMessage.delivery_timeout_ms``) or
takes the sidecar's (``ResendConfig.age_max_s``), read when the pool decides, so that an operator
who lengthens the sidecar's budget during a long outage lengthens it for the messages already
spooled. A failed resend never buries an entry inside its budget, however often it failed: only
a refusal no retry can change (the broker rejected the message) buries sooner.
"""

from __future__ import annotations

from outbox.entry import OutboxEntry
from sidecar.errors import SendRejectedError

DELIVERY_TIMEOUT_MS_MIN = 1_000
DELIVERY_TIMEOUT_MS_MAX = 365 * 24 * 3_600_000
_NANOS_PER_MS = 1_000_000


def delivery_timeout_ms_of(field: str, seconds: int, nanos: int) -> int:
    """A google.protobuf.Duration's fields as the budget in milliseconds, or REJECTED naming
    ``field`` and the limits."""
    if not 0 <= nanos < 1_000_000_000 or seconds < 0:
        raise SendRejectedError(
            field, f"is {seconds} s {nanos} ns; a duration has seconds >= 0, nanos 0..999,999,999"
        )
    timeout_ms = seconds * 1_000 + nanos // _NANOS_PER_MS
    if not DELIVERY_TIMEOUT_MS_MIN <= timeout_ms <= DELIVERY_TIMEOUT_MS_MAX:
        raise SendRejectedError(
            field,
            f"is {timeout_ms} ms; it must be {DELIVERY_TIMEOUT_MS_MIN:,} ms to "
            f"{DELIVERY_TIMEOUT_MS_MAX:,} ms (365 days)",
        )
    return timeout_ms


def budget_ms(entry: OutboxEntry, default_timeout_ms: int) -> int:
    """The entry's delivery budget: its message's own, or the sidecar's default."""
    timeout_ms = entry.message.delivery_timeout_ms
    return default_timeout_ms if timeout_ms is None else timeout_ms


def give_up_ms(entry: OutboxEntry, default_timeout_ms: int) -> int:
    """When the resend pool gives up on the PENDING ``entry``: when it became PENDING plus its
    budget."""
    return entry.state_changed_ms + budget_ms(entry, default_timeout_ms)
