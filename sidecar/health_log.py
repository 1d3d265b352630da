"""The sidecar's state lines: what an operator must see in its log during an outage, one line per
change of state, never one per message.

Two small trackers, fed by the signals of the paths where the facts are known (intake, the resend
pool, readiness), which call no logger themselves:

    BrokerStateLog   SENDING ──a send failed──► SPOOLING          WARNING, with the cause
                     SPOOLING ──a send stored──► DRAINING         INFO, "draining N entries"
                     DRAINING ──nothing PENDING──► SENDING        INFO, "drained"
                     DRAINING ──a send failed──► SPOOLING         WARNING again

    OutboxStateLog   READY ⇄ OUTBOX_UNAVAILABLE / OUTBOX_NO_SPACE, from the readiness check:
                     WARNING with what to do when it is lost, INFO when it is back

On the hot path (``stored`` per message stored, ``failed`` per send failed) a tracker costs a
comparison, and a counter while it is not in its normal state. While a state other than the
normal one lasts, a repeat line comes at most every ``state_log_interval_ms`` with the counts
since the last line. Lines carry structured fields for the JSON log format (rocketbox/logs.py):
``component`` (broker, outbox), ``state``, ``previous_state`` and the counts.

"Draining N entries" is the outbox's PENDING count when the drain was first looked at plus what the
resend pool delivered since the broker came back: what was waiting when it did. "Drained" is
when the outbox has nothing PENDING (entries of other sidecars sharing it included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from outbox.entry import SpoolCause
from rocketbox_api.deadlines import wait_event
from sidecar.errors import SendFailedError
from sidecar.metrics import OUTBOX_NO_SPACE, READY

LOG = logging.getLogger(__name__)
# How often a state other than the normal one is said again (with counts since the last line):
# often enough to see an outage go on, rarely enough that a long one costs a few lines an hour.
STATE_LOG_INTERVAL_MS_DEFAULT = 30_000
# How often the outbox is asked whether a drain is over (its stats: not per message).
DRAIN_CHECK_INTERVAL_MS = 1_000

SENDING, SPOOLING, DRAINING = "SENDING", "SPOOLING", "DRAINING"
# What a failed send says about the broker, by cause.
BROKER_FAULTS = {
    SpoolCause.UNAVAILABLE: "broker unreachable",
    SpoolCause.THROTTLED: "broker throttling sends (system busy)",
    SpoolCause.AMBIGUOUS: "broker not answering in time",
    SpoolCause.UNAUTHORIZED: "broker refusing the sidecar's credentials (UNAUTHORIZED)",
    SpoolCause.FORBIDDEN: "broker refusing the sidecar's rights on the topic (FORBIDDEN)",
}
SPOOLED, RESCHEDULED = "spooled", "rescheduled"


class BrokerStateLog:
    def __init__(
        self,
        pending_count: Callable[[], Awaitable[int]] | None = None,
        interval_ms: int = STATE_LOG_INTERVAL_MS_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``pending_count``: the outbox's PENDING entries (None: drains are not followed, the
        broker's return is the last line)."""
        if interval_ms < 1:
            raise ValueError(f"state_log_interval_ms must be >= 1, got {interval_ms}")
        self._pending_count = pending_count
        self._interval_s = interval_ms / 1000.0
        self._clock = clock
        self.state = SENDING
        self._fault = ""
        self._counts = {SPOOLED: 0, RESCHEDULED: 0}
        self._delivered = 0  # by the resend pool since the last line
        self._drain_delivered = 0  # since the broker came back
        self._drain_size: int | None = None  # announced once its count is known
        self._last_line_s = 0.0
        self._since_s = 0.0  # when the state began
        # While DRAINING, between two checks.
        self._stored_since_check = 0
        self._failed_since_check = 0
        self._changed = asyncio.Event()

    # -- signals (the hot path) ----------------------------------------------------------------
    def stored(self) -> None:
        """Intake's send was stored."""
        if self.state is SENDING:
            return
        if self.state is SPOOLING:
            self._enter(DRAINING)
        self._stored_since_check += 1

    def delivered(self, n: int) -> None:
        """The resend pool's request stored ``n`` entries."""
        if self.state is SENDING:
            return
        if self.state is SPOOLING:
            self._enter(DRAINING)
        self._delivered += n
        self._drain_delivered += n
        self._stored_since_check += n

    def failed(self, failure: SendFailedError, outcome: str) -> None:
        """A send failed and the message was ``outcome`` (SPOOLED by intake, RESCHEDULED by the
        resend pool)."""
        self._counts[outcome] += 1
        if self.state is SPOOLING:
            return
        # The producer's detail often starts with the code already: say it once.
        detail = failure.detail
        said = detail if detail.startswith(failure.cause.value) else str(failure)
        self._fault = f"{BROKER_FAULTS.get(failure.cause, 'broker failing')} ({said})"
        if self.state is DRAINING:
            # Back to SPOOLING only if a whole check found failures and nothing stored (check):
            # a send that was in flight when the broker came back may fail just after.
            self._failed_since_check += 1
            return
        self._enter(SPOOLING)

    # -- lines ------------------------------------------------------------------------------------
    def _enter(self, state: str) -> None:
        previous, self.state = self.state, state
        self._since_s = self._clock()
        if state is SPOOLING:
            self._line(
                logging.WARNING, previous, "%s: spooling messages to the outbox; they are resent "
                "once the broker takes messages again", self._fault,
            )  # fmt: skip
        elif state is DRAINING:
            self._drain_delivered = 0
            self._drain_size = None
            self._stored_since_check = self._failed_since_check = 0
            if self._pending_count is None:
                self._line(logging.INFO, previous, "broker back: the resend pool drains the outbox")
                self.state = SENDING
        self._changed.set()

    def _line(self, level: int, previous: str, msg: str, *args: object) -> None:
        """One line about the state, with the counts since the last line (then reset)."""
        fields: dict[str, Any] = {
            "component": "broker", "state": self.state, "previous_state": previous,
            **self._counts, "delivered": self._delivered,
        }  # fmt: skip
        LOG.log(level, msg, *args, extra=fields)
        self._counts = dict.fromkeys(self._counts, 0)
        self._delivered = 0
        self._last_line_s = self._clock()

    async def run(self) -> None:
        """Announce drains and their end, and repeat a lasting state; until cancelled."""
        while True:
            if self.state is SENDING:
                await self._changed.wait()
            self._changed.clear()
            with contextlib.suppress(Exception):  # the outbox's own line says why it failed
                await self.check()
            await wait_event(self._changed, DRAIN_CHECK_INTERVAL_MS / 1000.0)

    async def check(self) -> None:
        """One look: a drain's size or end, or a repeat line when it is due."""
        pending = 0
        if self.state is DRAINING:
            failed_only = self._failed_since_check and not self._stored_since_check
            self._stored_since_check = self._failed_since_check = 0
            if failed_only:
                self._enter(SPOOLING)
                return
        if self.state is DRAINING and self._pending_count is not None:
            pending = await self._pending_count()
            if self.state is not DRAINING:  # a failure came meanwhile
                return
            if self._drain_size is None:
                self._drain_size = pending + self._drain_delivered
                self._line(
                    logging.INFO, SPOOLING, "broker back: draining %d outbox entries",
                    self._drain_size,
                )  # fmt: skip
            if pending == 0:
                self.state = SENDING
                self._line(
                    logging.INFO, DRAINING, "drained: the outbox has nothing pending (%d "
                    "delivered since the broker came back)", self._drain_delivered,
                )  # fmt: skip
                return
        if self.state is SENDING or self._clock() - self._last_line_s < self._interval_s:
            return
        if self.state is SPOOLING:
            self._line(
                logging.WARNING, SPOOLING, "%s for %d s now: %d spooled, %d resends rescheduled "
                "since the last line", self._fault, self._clock() - self._since_s,
                self._counts[SPOOLED], self._counts[RESCHEDULED],
            )  # fmt: skip
        else:
            self._line(
                logging.INFO, DRAINING, "still draining: %d outbox entries pending, %d "
                "delivered since the last line", pending, self._delivered,
            )  # fmt: skip


class OutboxStateLog:
    """The outbox's readiness as lines: what is wrong, where (the URL without its password),
    what it means and what to do; then a repeat at most every ``interval_ms``; then one line
    when it is back."""

    def __init__(
        self,
        where: str,
        interval_ms: int = STATE_LOG_INTERVAL_MS_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._where = where
        self._interval_s = interval_ms / 1000.0
        self._clock = clock
        self.state = ""  # none yet: the first check says READY or why not
        self._failures = 0  # failed checks and outbox calls since the last line
        self._last_line_s = 0.0

    def call_failed(self) -> None:
        """An outbox call failed (a claim, a purge): counted, said in the next line."""
        self._failures += 1

    def checked(self, reason: str, detail: str) -> None:
        """The readiness check's answer: READY, or why not and the error."""
        previous, self.state = self.state, reason
        if reason == READY:
            if previous == READY:
                return
            what = "reachable again" if previous else "writable"
            self._line(logging.INFO, previous, "outbox %s %s: the sidecar is READY", self._where,
                       what)  # fmt: skip
            return
        self._failures += 1
        if reason == previous:
            if self._clock() - self._last_line_s >= self._interval_s:
                self._line(
                    logging.WARNING, previous, "outbox %s still %s: %d failed outbox calls since "
                    "the last line; last: %s", self._where, _state_words(reason), self._failures,
                    detail,
                )  # fmt: skip
            return
        # A backend's errors name its URL already (without the password): said once.
        subject = "outbox" if self._where in detail else f"outbox {self._where}"
        self._line(
            logging.WARNING, previous, "%s %s (%s): the sidecar is NOT READY (gRPC health "
            "NOT_SERVING) and %s. %s", subject, _state_words(reason), detail,
            _consequence(reason), _remedy(reason),
        )  # fmt: skip

    def _line(self, level: int, previous: str, msg: str, *args: object) -> None:
        fields = {
            "component": "outbox", "state": self.state, "previous_state": previous or None,
            "outbox": self._where, "failures": self._failures,
        }  # fmt: skip
        LOG.log(level, msg, *args, extra=fields)
        self._failures = 0
        self._last_line_s = self._clock()


def _state_words(reason: str) -> str:
    return "has no space" if reason == OUTBOX_NO_SPACE else "unreachable"


def _consequence(reason: str) -> str:
    if reason == OUTBOX_NO_SPACE:
        return "refuses spools (UNAVAILABLE); the resend pool still drains what it holds"
    return (
        "cannot spool: a message the broker does not take is refused UNAVAILABLE; nothing is "
        "resent until the outbox is back"
    )


def _remedy(reason: str) -> str:
    if reason == OUTBOX_NO_SPACE:
        return "Free space on the outbox's storage (or raise Redis' maxmemory)."
    return "Start the outbox's server or correct --outbox; the sidecar keeps trying."
