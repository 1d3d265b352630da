"""Latency-based fault avoidance: RocketMQ's ``sendLatencyFaultEnable``.

After each send the producer records how long the broker took (or that it failed). A broker whose
last send was slow is avoided for a while that grows with the latency, by RocketMQ's table::

    latency  >=   50  100   550   1000   2000   3000   15000 ms
    avoid for      0    0  30 s   60 s  120 s  180 s  600 s

A failed send counts as 3000 ms (180 s avoided) — RocketMQ 5 shortened its 30 s "isolation" — so a
broker that fails is skipped in favour of others. Avoidance only orders the choice: when every
broker is avoided the least recently failed one is used anyway, so a single-broker cluster is
never refused by the producer's own bookkeeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

LATENCY_MAX_MS: tuple[int, ...] = (50, 100, 550, 1_000, 2_000, 3_000, 15_000)
NOT_AVAILABLE_DURATION_MS: tuple[int, ...] = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
FAILURE_LATENCY_MS = 3_000


def not_available_duration_ms(latency_ms: float) -> int:
    for threshold_ms, duration_ms in zip(
        reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_DURATION_MS), strict=True
    ):
        if latency_ms >= threshold_ms:
            return duration_ms
    return 0


@dataclass(slots=True)
class _FaultItem:
    latency_ms: float
    available_from_s: float


class LatencyFaultTolerance:
    """Which brokers to prefer; thread-safe (the resend pool's workers share it)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._items: dict[str, _FaultItem] = {}
        self._lock = threading.Lock()

    def update(self, broker_name: str, latency_ms: float, failed: bool) -> None:
        if not self.enabled:
            return
        effective_ms = max(latency_ms, FAILURE_LATENCY_MS) if failed else latency_ms
        until_s = time.monotonic() + not_available_duration_ms(effective_ms) / 1000.0
        with self._lock:
            self._items[broker_name] = _FaultItem(effective_ms, until_s)

    def available(self, broker_name: str) -> bool:
        with self._lock:
            item = self._items.get(broker_name)
        return item is None or item.available_from_s <= time.monotonic()

    def order(self, broker_names: Sequence[str]) -> list[str]:
        """The brokers, available ones first (in the given order), then the avoided ones, the
        one available soonest first."""
        if not self.enabled:
            return list(broker_names)
        now_s = time.monotonic()
        with self._lock:
            items = {b: self._items.get(b) for b in broker_names}
        ready = [b for b, i in items.items() if i is None or i.available_from_s <= now_s]
        avoided = sorted(
            (b for b, i in items.items() if i is not None and i.available_from_s > now_s),
            key=lambda b: items[b].available_from_s,  # type: ignore[union-attr]  # the comprehension above keeps only entries that are not None
        )
        return ready + avoided
