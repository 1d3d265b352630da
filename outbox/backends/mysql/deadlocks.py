"""A transaction InnoDB chose as a deadlock's victim is run again.

InnoDB answers a deadlock by rolling one of its transactions back whole (error 1213), and says
to run it again. Each outbox change that can meet another in a cycle (range-locking bulk changes
beside claims and settlements of other sidecars) is one transaction per call of the functions
decorated here, so running the call again is the same change, never half of one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

import tenacity
from sqlalchemy import exc as sa_exc

# MySQL's ER_LOCK_DEADLOCK.
ER_LOCK_DEADLOCK = 1213
# Tries of one transaction, the first included: a deadlock met again after that is the caller's
# (an OutboxUnavailableError, retriable).
DEADLOCK_ATTEMPTS_MAX = 4
# The pause before a try again: random, so that the two sides do not meet again in step.
DEADLOCK_PAUSE_MAX_S = 0.05

_P = ParamSpec("_P")
_T = TypeVar("_T")


def deadlock_victim(e: BaseException) -> bool:
    """``e`` (an outbox error chained from the driver's, or the driver's) is InnoDB's 1213."""
    for error in (e, e.__cause__):
        if isinstance(error, sa_exc.DBAPIError):
            args: tuple[object, ...] = getattr(error.orig, "args", ())
            return bool(args) and args[0] == ER_LOCK_DEADLOCK
    return False


def retried_on_deadlock(function: Callable[_P, _T]) -> Callable[_P, _T]:
    """``function``, run again when InnoDB rolled it back as a deadlock's victim."""
    retried: Callable[_P, _T] = tenacity.retry(
        retry=tenacity.retry_if_exception(deadlock_victim),
        stop=tenacity.stop_after_attempt(DEADLOCK_ATTEMPTS_MAX),
        wait=tenacity.wait_random(0, DEADLOCK_PAUSE_MAX_S),
        reraise=True,
    )(function)
    return retried
