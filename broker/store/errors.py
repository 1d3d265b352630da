"""Faults of the message store. Expected outcomes are status enums (status.py); these are faults.

    StoreError                      (retriable: bool)
    ├── StoreConfigError            a config value out of range; fix the config    (not retriable)
    ├── StoreLockedError            another process owns the store directory       (retriable)
    ├── StoreNotRunningError        the store is not started or is shut down       (retriable)
    ├── MessageIllegalError         bad input: names the field and the limit       (not retriable)
    └── StoreCorruptedError         on-disk data that recovery cannot repair       (not retriable)

OS errors (OSError from open, mmap, fallocate, fsync) are translated at the file layer
(mapped_file.py) into the status the caller sees, or re-raised chained with ``from``.
"""

from __future__ import annotations

from typing import ClassVar


class StoreError(Exception):
    """Base of every store fault. ``retriable`` says whether the same call may succeed later."""

    retriable: ClassVar[bool] = False


class StoreConfigError(StoreError):
    """A configuration value is out of its range."""


class StoreLockedError(StoreError):
    """The store directory is locked by another process: the commitlog has exactly one writer."""

    retriable: ClassVar[bool] = True


class StoreNotRunningError(StoreError):
    """The store is not started, or is shutting down."""

    retriable: ClassVar[bool] = True


class MessageIllegalError(StoreError):
    """A message the store will never accept as it is. Nothing of it was written."""

    def __init__(self, field: str, limit: str, detail: str) -> None:
        self.field = field
        self.limit = limit
        super().__init__(f"{field}: {detail} (limit: {limit})")


class StoreCorruptedError(StoreError):
    """On-disk data is inconsistent in a way recovery cannot repair by truncation."""
