"""A MySQL outbox transaction that InnoDB rolled back as a deadlock's victim is run again
(outbox/backends/mysql/deadlocks.py): the driver's error 1213, as the outbox chains it, is a
victim; any other error is not and is raised at once; the tries are bounded, and then the
caller gets the outbox's (retriable) error."""

from __future__ import annotations

import pytest
from sqlalchemy import exc as sa_exc

from outbox import OutboxUnavailableError
from outbox.backends.mysql.deadlocks import (
    DEADLOCK_ATTEMPTS_MAX,
    ER_LOCK_DEADLOCK,
    deadlock_victim,
    retried_on_deadlock,
)

LOCK_WAIT_TIMEOUT = 1205


def outbox_error(code: int) -> OutboxUnavailableError:
    """What the outbox raises for the driver's ``code``: its error, chained from it."""
    # The driver's error carries the server's code first, as pymysql's does.
    driver = Exception(code, "from the server")
    try:
        raise sa_exc.OperationalError("UPDATE …", {}, driver)
    except sa_exc.OperationalError as e:
        try:
            raise OutboxUnavailableError("MySQL outbox …: requeue failed") from e
        except OutboxUnavailableError as outer:
            return outer


def test_only_the_deadlock_error_is_a_victim() -> None:
    assert deadlock_victim(outbox_error(ER_LOCK_DEADLOCK))
    assert not deadlock_victim(outbox_error(LOCK_WAIT_TIMEOUT))
    assert not deadlock_victim(OutboxUnavailableError("closed"))


def test_a_victim_runs_again_until_it_passes_or_the_tries_are_spent() -> None:
    calls: list[int] = []

    @retried_on_deadlock
    def change(fails: int) -> str:
        calls.append(1)
        if len(calls) <= fails:
            raise outbox_error(ER_LOCK_DEADLOCK)
        return "done"

    assert change(DEADLOCK_ATTEMPTS_MAX - 1) == "done"
    assert len(calls) == DEADLOCK_ATTEMPTS_MAX
    calls.clear()
    with pytest.raises(OutboxUnavailableError):
        change(DEADLOCK_ATTEMPTS_MAX)
    assert len(calls) == DEADLOCK_ATTEMPTS_MAX


def test_any_other_error_is_raised_at_once() -> None:
    calls: list[int] = []

    @retried_on_deadlock
    def change() -> None:
        calls.append(1)
        raise outbox_error(LOCK_WAIT_TIMEOUT)

    with pytest.raises(OutboxUnavailableError):
        change()
    assert calls == [1]
