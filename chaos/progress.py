"""When a scenario's fault strikes: at points of the load's progress, once the sidecar spools, and
beside another fault, a storm of flow control.

- ``next_point``: on to a further seeded point of the load (a fraction of its messages answered).
- ``spooling``: until the outbox holds a seeded 5-15 % of the messages (or the load has ended), so
  that the fault that follows lands while the sidecar writes to its outbox.
- ``FlowControlStorm``: the broker's flow control forced on and off, each for a seeded 0.1-1 s, at
  each ``tick`` whose time has come: run beside a fault that takes seconds (a reshard, a
  failover), it makes the sidecar spool (puts) and drain (claims, sends, delivered marks) by
  turns all through it. ``end`` leaves flow control off.
"""

from __future__ import annotations

import random
import time

from chaos.stage import Stage

# A drain a scenario times a fault into must get this far within this long.
DRAIN_PROGRESS_DEADLINE_S = 300.0
STORM_PHASE_S_MIN = 0.1
STORM_PHASE_S_MAX = 1.0


def next_point(stage: Stage, rng: random.Random, low: float, high: float) -> None:
    """On to a further point of the load, ``low``..``high`` of it past the last one."""
    stage.progress_mark = min(1.0, stage.progress_mark + rng.uniform(low, high))
    stage.at_progress(stage.progress_mark)


def spooling(stage: Stage, rng: random.Random) -> None:
    """Until the outbox holds 5-15 % of the load's messages (or the load has ended): the fault
    that follows lands while the sidecar is writing to its outbox, not before it began."""
    load = stage.load
    assert load is not None
    target = max(1, round(len(stage.plan.messages) * rng.uniform(0.05, 0.15)))
    stage.wait_outbox(
        f"{target} entries spooled",
        lambda pending: pending >= target or load.done,
        DRAIN_PROGRESS_DEADLINE_S,
    )
    stage.event("spooling", target=target)
    stage.progress_mark = load.answered / len(stage.plan.messages)


class FlowControlStorm:
    """Flow control toggled at seeded intervals as ``tick`` is called; ``on``: as it is now."""

    def __init__(self, stage: Stage, rng: random.Random, *, on: bool) -> None:
        self._stage = stage
        self._rng = rng
        self.on = on
        self.toggles = 0
        self._next_s = time.monotonic() + self._phase_s()

    def _phase_s(self) -> float:
        return self._rng.uniform(STORM_PHASE_S_MIN, STORM_PHASE_S_MAX)

    def tick(self) -> None:
        """Toggle flow control if the current phase is over."""
        now_s = time.monotonic()
        if now_s < self._next_s:
            return
        self.on = not self.on
        self._stage.flow_control(self.on)
        self.toggles += 1
        self._next_s = now_s + self._phase_s()

    def end(self) -> None:
        if self.on:
            self._stage.flow_control(False)
            self.on = False
