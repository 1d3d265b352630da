"""The outbox's exceptions. Every backend translates its driver's errors (rocksdict, redis,
SQLAlchemy) into these at one place, chained with ``from``.

    OutboxError                      base; ``retriable`` says whether trying later can help
    ├── OutboxUnavailableError       the backend cannot be reached or written (retriable)
    │   └── OutboxNoSpaceError       its storage has no room for new entries (a full disk,
    │                                Redis at maxmemory): puts are refused, while what it
    │                                holds is still claimed and delivered (retriable)
    │   └── OutboxHeldError          a RocksDB outbox's lock is held by another process (its
    │                                holder file, outbox/holder.py, may say which)
    │   └── OutboxUnconfirmedError   the write was applied where it was sent, but the
    │                                replicas the outbox waits for did not confirm it in
    │                                time: it may or may not survive a failover (retriable)
    ├── OutboxFullError              ``outbox_entries_max`` / ``outbox_bytes_max`` reached
    │                                (retriable after ``retry_after_ms``)
    ├── OutboxConfigError            a bad URL or limit (not retriable)
    ├── OutboxNotFoundError          opened without ``create``: there is no outbox at the URL
    │                                (no RocksDB database, no MySQL table); not retriable
    └── EntryTooLargeError           one entry larger than the backend accepts (not retriable)
"""

from __future__ import annotations


class OutboxError(Exception):
    retriable = False


class OutboxUnavailableError(OutboxError):
    retriable = True


class OutboxNoSpaceError(OutboxUnavailableError):
    """The backend's storage is full: new entries are refused until it has room again, while
    claims and deliveries, which shrink the outbox, go on (each backend's docstring says how
    far). Not ``OutboxFullError``: no bound of ours was reached, the storage under it was."""


class OutboxHeldError(OutboxUnavailableError):
    """Another process holds the (single-process) outbox: RocksDB's LOCK."""


class OutboxUnconfirmedError(OutboxUnavailableError):
    """A write the primary applied that too few replicas confirmed in time (Redis's WAIT): the
    outbox may hold it and hand it out, or lose it in a failover. Retried with the same
    message ids, a put finds what it wrote (``put`` is idempotent by id)."""


class OutboxFullError(OutboxError):
    """The bound is reached: nothing of the refused put was written."""

    retriable = True

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class OutboxConfigError(OutboxError):
    retriable = False


class OutboxNotFoundError(OutboxError):
    """Only a writer (the sidecar) creates its outbox: a reader (an admin command) that finds
    none at the URL says so, rather than creating one and reporting it empty."""

    retriable = False


class EntryTooLargeError(OutboxError):
    retriable = False
