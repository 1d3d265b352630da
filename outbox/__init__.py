"""The durable retry outbox: one contract (outbox/outbox.py), backends selected by URL."""

from outbox.entry import (
    DeliveryReceipt,
    EntryState,
    OutboxEntry,
    OutboxLimits,
    OutboxMessage,
    OutboxStats,
    SpoolCause,
)
from outbox.errors import (
    EntryTooLargeError,
    OutboxConfigError,
    OutboxError,
    OutboxFullError,
    OutboxNoSpaceError,
    OutboxNotFoundError,
    OutboxUnavailableError,
    OutboxUnconfirmedError,
)
from outbox.factory import open_outbox
from outbox.outbox import Outbox, OutboxFeatures

__all__ = [
    "DeliveryReceipt",
    "EntryState",
    "EntryTooLargeError",
    "Outbox",
    "OutboxConfigError",
    "OutboxEntry",
    "OutboxError",
    "OutboxFeatures",
    "OutboxFullError",
    "OutboxLimits",
    "OutboxMessage",
    "OutboxNoSpaceError",
    "OutboxNotFoundError",
    "OutboxStats",
    "OutboxUnavailableError",
    "OutboxUnconfirmedError",
    "SpoolCause",
    "open_outbox",
]
