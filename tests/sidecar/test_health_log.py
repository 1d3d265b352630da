"""The state trackers behind the sidecar's outage lines (sidecar/health_log.py), on a clock the
test moves:

- a thousand failed sends are one WARNING; a repeat comes only once the interval has passed, with
  the counts since the last line; stores while sending cost no line;
- the broker's return is one "draining N" (what was pending plus what was delivered before the
  look) and one "drained" once nothing is pending; a failure during a drain returns to SPOOLING
  only when a whole check saw failures and no store;
- the outbox's loss is one line naming what to do, repeats are rate-limited with the failures
  counted, and its return is one line; the lines carry structured fields for the JSON format.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from outbox.entry import SpoolCause
from sidecar.errors import SendFailedError
from sidecar.health_log import (
    DRAINING,
    RESCHEDULED,
    SENDING,
    SPOOLED,
    SPOOLING,
    BrokerStateLog,
    OutboxStateLog,
)
from sidecar.metrics import OUTBOX_UNAVAILABLE, READY

INTERVAL_MS = 30_000
DOWN = SendFailedError(SpoolCause.UNAVAILABLE, "connection refused")


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


class Pending:
    def __init__(self, n: int) -> None:
        self.n = n

    async def __call__(self) -> int:
        return self.n


def check(log: BrokerStateLog) -> None:
    asyncio.run(log.check())


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sidecar.health_log"]


def test_a_cause_whose_detail_names_its_code_says_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    log = BrokerStateLog(Pending(0), INTERVAL_MS, Clock())
    log.failed(SendFailedError(SpoolCause.UNAVAILABLE, "UNAVAILABLE: failed to connect"), SPOOLED)
    check(log)
    assert lines(caplog)[0].startswith("broker unreachable (UNAVAILABLE: failed to connect)")


def test_an_outage_is_one_line_and_repeats_wait_for_the_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock, pending = Clock(), Pending(0)
    log = BrokerStateLog(pending, INTERVAL_MS, clock)
    for _ in range(1_000):
        log.stored()
    assert lines(caplog) == []
    for _ in range(600):
        log.failed(DOWN, SPOOLED)
    for _ in range(400):
        log.failed(DOWN, RESCHEDULED)
    check(log)
    assert log.state == SPOOLING
    assert len(lines(caplog)) == 1
    assert lines(caplog)[0].startswith("broker unreachable (UNAVAILABLE: connection refused)")
    record = caplog.records[-1]
    assert record.levelno == logging.WARNING
    assert (record.component, record.state, record.previous_state) == ("broker", SPOOLING, SENDING)  # type: ignore[attr-defined]  # fields from extra

    clock.now_s += INTERVAL_MS / 1000 - 1
    log.failed(DOWN, SPOOLED)
    check(log)
    assert len(lines(caplog)) == 1
    clock.now_s += 1
    check(log)
    still = "for 30 s now: 600 spooled, 400 resends rescheduled since the last line"
    assert lines(caplog)[-1].endswith(still)
    assert caplog.records[-1].spooled == 600  # type: ignore[attr-defined]  # fields from extra


def test_the_return_is_draining_n_then_drained(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    pending = Pending(7)
    log = BrokerStateLog(pending, INTERVAL_MS, Clock())
    log.failed(DOWN, SPOOLED)
    log.delivered(3)
    assert log.state == DRAINING
    check(log)
    assert lines(caplog)[-1] == "broker back: draining 10 outbox entries"
    log.delivered(4)
    pending.n = 3
    check(log)
    assert len(lines(caplog)) == 2
    pending.n = 0
    log.delivered(3)
    check(log)
    assert lines(caplog)[-1].startswith("drained: the outbox has nothing pending (10 delivered")
    assert log.state == SENDING
    log.delivered(5)
    check(log)
    assert len(lines(caplog)) == 3


def test_a_failure_while_draining_waits_for_a_check_without_stores(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    log = BrokerStateLog(Pending(5), INTERVAL_MS, Clock())
    log.failed(DOWN, SPOOLED)
    log.delivered(1)
    check(log)  # draining 6
    log.failed(DOWN, RESCHEDULED)  # a resend that was in flight when the broker came back
    log.delivered(1)
    check(log)
    assert log.state == DRAINING
    log.failed(DOWN, RESCHEDULED)
    check(log)
    assert log.state == SPOOLING
    assert sum("broker unreachable" in line for line in lines(caplog)) == 2


def test_the_outbox_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    log = OutboxStateLog("redis://:***@127.0.0.1:1/0", INTERVAL_MS, clock)
    log.checked(OUTBOX_UNAVAILABLE, "ConnectionError: refused")
    for _ in range(50):
        log.call_failed()
        log.checked(OUTBOX_UNAVAILABLE, "ConnectionError: refused")
    assert len(lines(caplog)) == 1
    first = lines(caplog)[0]
    assert "outbox redis://:***@127.0.0.1:1/0 unreachable (ConnectionError: refused)" in first
    assert "NOT READY" in first
    assert "correct --outbox" in first
    clock.now_s += INTERVAL_MS / 1000
    log.checked(OUTBOX_UNAVAILABLE, "ConnectionError: refused")
    assert "still unreachable: 101 failed outbox calls since the last line" in lines(caplog)[-1]
    log.checked(READY, "")
    log.checked(READY, "")
    assert lines(caplog)[-1].endswith("reachable again: the sidecar is READY")
    assert len(lines(caplog)) == 3
    assert caplog.records[-1].state == READY  # type: ignore[attr-defined]  # fields from extra


def test_the_interval_is_checked() -> None:
    with pytest.raises(ValueError, match="state_log_interval_ms"):
        BrokerStateLog(interval_ms=0)


# Only reached if the cancel was lost: the loop would then run on until the test gives up.
RUN_ENDED_DEADLINE_S = 5.0


@pytest.mark.parametrize("turns", range(4))
def test_run_ends_on_a_stop_that_meets_the_broker_coming_back(turns: int) -> None:
    """The sidecar's stop cancels ``run``; a delivery that wakes it just before (the broker came
    back as SIGTERM arrived) must not keep it running: the stop would wait on it for ever."""

    async def main() -> bool:
        log = BrokerStateLog(Pending(2), INTERVAL_MS, Clock())
        log.failed(DOWN, SPOOLED)
        task = asyncio.create_task(log.run())
        for _ in range(3):
            await asyncio.sleep(0)  # sleep: turns in which it checks once, then waits
        log.delivered(1)  # SPOOLING -> DRAINING: the change it waits for
        for _ in range(turns):
            await asyncio.sleep(0)  # sleep: the turns between the change and the cancel
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=RUN_ENDED_DEADLINE_S)
        if not done:
            task.cancel()
        return bool(done) and task.cancelled()

    assert asyncio.run(main())
