"""The resend pool's view of the broker: taking sends, or in an outage and probed.

While the broker takes nothing, resending every due entry only to reschedule it costs one outbox
write per entry per back-off, for as long as the outage lasts, and competes with the spools the
sidecar must absorb meanwhile. So once sends fail with nothing stored for ``evidence_window_ms``,
the pool is in an outage: it claims one entry (the probe) per probe interval and leaves every other
entry as it is, due. A stored send, the probe's or intake's, ends the outage, and the pool claims
full batches again at once: the backlog is due, so it drains at the broker's pace, whatever the
outage's length or its entries' history.

The probe interval grows, with jitter, from the resend back-off's first step to
``probe_interval_max_ms`` with each probe that fails, and a probe is out at most once at a time:
a flapping broker sees at most one probe per interval until a send is stored.

The window: a send stored within it is evidence that the broker takes sends, and a failure then is
taken as the failed message's or topic's own (its entry backs off alone). Without it, one topic
whose sends fail would throttle the drain of every other topic to the probe's pace.

Runs on the event loop: no locks.
"""

from __future__ import annotations

import logging
import time

from sidecar.backoff import Backoff

LOG = logging.getLogger(__name__)


class BrokerOutage:
    def __init__(self, probe_backoff: Backoff, evidence_window_ms: int) -> None:
        if evidence_window_ms < 0:
            raise ValueError(f"evidence_window_ms must be >= 0, got {evidence_window_ms}")
        self._probe_backoff = probe_backoff
        self._evidence_window_s = evidence_window_ms / 1000.0
        self._last_stored_s = float("-inf")
        self.failing = False
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
        self._probes_failed = 0

    def failed(self) -> None:
        """A send failed (intake's or a resend, whatever the cause): an outage begins unless a
        send was stored within the window."""
        now_s = time.monotonic()
        if self.failing or now_s - self._last_stored_s < self._evidence_window_s:
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
        if self._probe_out or time.monotonic() < self._next_probe_s:
            return 0
        self._probe_out = True
        self.probes += 1
        return 1

    def probe_ended(self) -> None:
        """The probe's resend is over (stored, failed, or nothing was due to probe with): unless
        it was stored, the next probe waits one interval longer."""
        self._probe_out = False
        if self.failing:
            self._probes_failed += 1
            delay_ms = self._probe_backoff.delay_ms(self._probes_failed)
            self._next_probe_s = time.monotonic() + delay_ms / 1000.0

    def wait_s(self) -> float:
        """Until the next probe may go: 0 when not failing or a probe is due, infinite while
        the probe is out (its end wakes the pool)."""
        if not self.failing:
            return 0.0
        if self._probe_out:
            return float("inf")
        return max(0.0, self._next_probe_s - time.monotonic())
