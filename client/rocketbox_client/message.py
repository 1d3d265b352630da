"""What an app hands over (``Message``) and what it is told back (``Stored`` or ``Spooled``).

A rejected message is not a result but an exception (errors.py): ``send`` raises it, and
``send_batch`` puts it in the message's slot of the results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})


def _no_properties() -> Mapping[str, str]:
    return _NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Message:
    """A message, as a RocketMQ producer would send it; the sidecar checks it against RocketMQ's
    limits (rocketbox/v1/sidecar.proto names them) and rejects it naming the field.

    ``message_id``: when None, the client stamps one before the first attempt (message_id.py),
    so that every retry carries the same id; give your own (1..128 characters, no whitespace or
    control characters) to make it a business key.
    """

    topic: str
    body: bytes
    tag: str | None = None
    keys: tuple[str, ...] = ()
    # FIFO: one (topic, message_group)'s messages are stored in send order.
    message_group: str | None = None
    # Delayed delivery, epoch milliseconds; at most 24 hours ahead and 30 days in the past,
    # never with message_group.
    delivery_time_ms: int | None = None
    # Excluded from the hash: a caller may pass a plain dict.
    properties: Mapping[str, str] = field(default_factory=_no_properties, hash=False)
    message_id: str | None = None


@dataclass(frozen=True, slots=True)
class Stored:
    """The broker stored the message. ``durable`` False: stored, but not flushed or replicated
    within the broker's deadline; it is not resent (that would duplicate it)."""

    message_id: str
    # Empty when the sidecar sent to a proxy in front of several brokers, which picked one.
    broker_name: str
    # -1: the broker picked the queue and its answer did not say which (sidecar.proto's Stored).
    queue_id: int
    # The broker's offset in the queue it picked.
    queue_offset: int
    durable: bool
    # Send attempts it took inside the sidecar (1 .. 1 + its retry_times_when_send_failed).
    attempts: int


@dataclass(frozen=True, slots=True)
class Spooled:
    """The broker did not take it now; it is durably in the sidecar's outbox and will be sent
    with the same message id.

    ``cause``: THROTTLED (the broker's flow control), UNAVAILABLE (no broker reachable),
    AMBIGUOUS (a send timed out after it went out; ``maybe_stored`` is then true) or FIFO_FENCE
    (an earlier message of its FIFO group waits in the outbox; this one waits behind it).
    """

    message_id: str
    cause: str
    # The broker's or the network's words.
    detail: str
    next_attempt_time_ms: int
    maybe_stored: bool


SendResult = Stored | Spooled
