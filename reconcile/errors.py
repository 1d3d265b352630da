"""Faults of the reconciliation. What it finds (lost, duplicated, …) is its result, not a fault.

    ReconcileError                  (exit_code: int; retriable: bool)
    ├── InputError                  an input cannot be read as what it claims to be   (exit 3)
    └── JobError                    Spark failed to run the job                        (exit 4)

Spark's exceptions (Py4J errors, ``PySparkException``, the Arrow worker's failures) are
translated in one place, ``session.translate_errors``, and chained with ``from``. Exit codes 0
(nothing lost), 1 (something lost) and 2 (usage) belong to the command line
(rocketbox/reconcile_cli.py).
"""

from __future__ import annotations

from typing import ClassVar


class ReconcileError(Exception):
    """Base of every reconciliation fault."""

    exit_code: ClassVar[int] = 4
    retriable: ClassVar[bool] = False


class InputError(ReconcileError):
    """A commitlog directory, ledger or outbox export is missing or unreadable."""

    exit_code: ClassVar[int] = 3


class JobError(ReconcileError):
    """The Spark job failed (a lost executor or an out-of-memory may pass on a rerun)."""

    exit_code: ClassVar[int] = 4
    retriable: ClassVar[bool] = True
