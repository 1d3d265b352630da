"""Faults of the reconciliation, and the exit codes of ``rocketbox reconcile``, in one table.

    ReconcileError                  (exit_code: int; retriable: bool)
    ├── InputError                  an input cannot be read as what it claims to be   (exit 3)
    └── JobError                    Spark failed to run the job                        (exit 4)

Spark's exceptions (Py4J errors, ``PySparkException``, the Arrow worker's failures) are
translated in one place, ``session.translate_errors``, and chained with ``from``. What a run finds
(lost, duplicated, …) is its result, not a fault; a run that could not read the whole commitlog
is no fault either, but it is no verdict (unread.py): its summary is written, and it exits with
its own code (5, 6, 7), never 0. ``EXIT_CODES`` is the table the command line documents
(``rocketbox reconcile --help``, the README) and exits by (rocketbox/reconcile_cli.py).
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ExitCode(IntEnum):
    NOTHING_LOST = 0
    LOST = 1
    USAGE = 2
    INPUT = 3
    JOB = 4
    READ_IN_PART = 5
    NOT_A_COMMITLOG = 6
    NO_RECORDS = 7


# What each exit code means, in the order the help lists them.
EXIT_CODES: tuple[tuple[ExitCode, str], ...] = (
    (ExitCode.NOTHING_LOST, "nothing acknowledged was lost (the whole commitlog read)"),
    (ExitCode.LOST, "acknowledged messages are missing from the commitlog"),
    (ExitCode.USAGE, "usage: an option missing or wrong"),
    (ExitCode.INPUT, "an input is missing or cannot be read: nothing reconciled"),
    (ExitCode.JOB, "the Spark job failed (a rerun may pass)"),
    (ExitCode.READ_IN_PART, "no verdict: the commitlog was read only in part"),
    (ExitCode.NOT_A_COMMITLOG, "no verdict: a segment file is not a commitlog segment"),
    (ExitCode.NO_RECORDS, "no verdict: no commitlog record read, yet other inputs name messages"),
)


class ReconcileError(Exception):
    """Base of every reconciliation fault."""

    exit_code: ClassVar[int] = ExitCode.JOB
    retriable: ClassVar[bool] = False


class InputError(ReconcileError):
    """A commitlog directory, ledger or outbox export is missing or unreadable."""

    exit_code: ClassVar[int] = ExitCode.INPUT


class JobError(ReconcileError):
    """The Spark job failed (a lost executor or an out-of-memory may pass on a rerun)."""

    exit_code: ClassVar[int] = ExitCode.JOB
    retriable: ClassVar[bool] = True
