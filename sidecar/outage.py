"""The resend pool's view of the broker: taking sends, or in an outage and probed.

While the broker takes nothing, resending every due entry only to reschedule it costs one outbox
write per entry per back-off, for as long as the outage lasts, and competes with the spools the
sidecar must absorb meanwhile. So once sends fail with nothing stored for ``evidence_window_ms``
(or many fail with none stored between them), the broker is in an outage: one send (the probe: an
entry the pool claims, or a message intake sends) goes per probe interval, and every other entry
is left as it is, due. Intake spools what apps send without trying the broker
(sidecar/intake.py), so a spool costs the outbox write alone.
A stored send, the probe's or any other, ends the outage, and the pool claims full batches again
at once: the backlog is due, so it drains at the broker's pace, whatever the outage's length or its
entries' history.

The probe interval grows, with jitter, from the resend back-off's first step to
``probe_interval_max_ms`` with each probe that fails, and a probe is out at most once at a time:
a flapping broker sees at most one probe per interval until a send is stored.

The window: a send stored within it is evidence that the broker takes sends, and a failure then is
taken as the failed message's or topic's own (its entry backs off alone). Without it, one topic
whose sends fail would throttle the drain of every other topic to the probe's pace. But
``OUTAGE_FAILURES_MIN`` failed messages with no stored send between them begin an outage at once:
that is a broker gone mid-drain, not one topic's trouble among healthy ones.

Runs on the event loop: no locks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from outbox.entry import SpoolCause
from sidecar.backoff import Backoff

LOG = logging.getLogger(__name__)
# Messages whose sends failed with none stored since that make an outage, however recent the last
# stored send: a broker killed mid-drain fails every resend in flight at once, and waiting out the
# window would resend the whole due backlog, once per back-off, meanwhile.
OUTAGE_FAILURES_MIN = 64


class BrokerOutage:
    def __init__(
        self,
        probe_backoff: Backoff,
        evidence_window_ms: int,
        on_probe: Callable[[], None] | None = None,
    ) -> None:
        """``on_probe`` hears of each probe taken (a metric)."""
        if evidence_window_ms < 0:
            raise ValueError(f"evidence_window_ms must be >= 0, got {evidence_window_ms}")
        self._probe_backoff = probe_backoff
        self._on_probe = on_probe
        self._evidence_window_s = evidence_window_ms / 1000.0
        self._last_stored_s = float("-inf")
        self._failures_since_stored = 0
        self.failing = False
        # The latest failure's cause: what intake tells an app whose message it spools without
        # a send while the broker is probed.
        self.cause = SpoolCause.UNAVAILABLE
        self._probes_failed = 0
        self._probe_out = False
        self._next_probe_s = 0.0
        # Outages begun, and probes sent, since the pool started (also in the metrics).
        self.outages = 0
        self.probes = 0

    def stored(self) -> None:
        """A send was stored (intake's or a resend): the broker takes sends."""
        self._last_stored_s = time.monotonic()
        if self.failing:
            LOG.info("the broker takes sends again after %d failed probes", self._probes_failed)
        self.failing = False
        self._failures_since_stored = 0
        self._probes_failed = 0

    def failed(self, cause: SpoolCause | None = None) -> None:
        """A send failed (intake's or a resend's message, of ``cause`` when known): an outage
        begins unless a send was stored within the window and fewer than
        ``OUTAGE_FAILURES_MIN`` failed since."""
        if cause is not None:
            # A message spooled unsent in the outage was not sent at all: it is no ambiguous
            # one, whatever the probes met (a live connection cut ends as AMBIGUOUS).
            self.cause = SpoolCause.UNAVAILABLE if cause is SpoolCause.AMBIGUOUS else cause
        self._failures_since_stored += 1
        now_s = time.monotonic()
        if self.failing or (
            now_s - self._last_stored_s < self._evidence_window_s
            and self._failures_since_stored < OUTAGE_FAILURES_MIN
        ):
            return
        self.failing = True
        self.outages += 1
        self._next_probe_s = now_s + self._probe_backoff.delay_ms(1) / 1000.0
        LOG.info("sends fail and none was stored lately: resends are held, one probe at a time")

    def claim_limit(self, batch_max: int) -> int:
        """How many entries the pool may claim now: a batch, one (the probe: the caller owes
        ``probe_ended``), or none (wait ``wait_s``)."""
        if not self.failing:
            return batch_max
        return 1 if self.take_probe() else 0

    def take_probe(self) -> bool:
        """In an outage, True when a probe may go now, and it is the caller's (who owes
        ``probe_ended``): the pool's claim or a message intake sends. False otherwise."""
        if not self.failing or self._probe_out or time.monotonic() < self._next_probe_s:
            return False
        self._probe_out = True
        self.probes += 1
        if self._on_probe is not None:
            self._on_probe()
        return True

    def probe_ended(self) -> None:
        """The probe's resend is over (stored, failed, or nothing was due to probe with): unless
        it was stored, the next probe waits one interval longer."""
        self._probe_out = False
        if self.failing:
            self._probes_failed += 1
            delay_ms = self._probe_backoff.delay_ms(self._probes_failed)
            self._next_probe_s = time.monotonic() + delay_ms / 1000.0

    def probe_unused(self) -> None:
        """The probe taken found nothing to send (no entry due): it is given back with its time
        unchanged, so that the next message intake sends can be the probe."""
        self._probe_out = False

    def wait_s(self) -> float:
        """Until the next probe may go: 0 when not failing or a probe is due, infinite while
        the probe is out (its end wakes the pool)."""
        if not self.failing:
            return 0.0
        if self._probe_out:
            return float("inf")
        return max(0.0, self._next_probe_s - time.monotonic())
