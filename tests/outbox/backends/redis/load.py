"""A load on one Redis outbox for the failover and reshard tests, and what it was told.

Two outbox instances on one URL, as two sidecars: a putter thread puts entries one at a time
(every fourth in one of a few FIFO groups), and a deliverer thread claims due entries, "sends"
each to a stand-in broker (a count of sends per message id) and marks them delivered in one
call, as the resend pool does; an entry claimed maybe stored is first looked up in the broker
(the resend pool's index check) and only marked delivered when it is there. A third thread checks
the outbox as the sidecar's readiness does, once a second. Every call's answer
is recorded with the time it came, so a test can say exactly which acknowledged writes a
failover lost and which entries were sent twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from outbox import DeliveryReceipt, OutboxEntry, OutboxError, open_outbox
from tests.outbox.entries import entry

LOG = logging.getLogger(__name__)
LEASE_MS = 1_500
CLAIM_LIMIT = 100
GROUPS = 4
# The putter's pace: a few hundred puts a second, so that a failover of some seconds has a few
# thousand under it and the drain after it is short. It paces the load; no condition is awaited.
PUT_INTERVAL_S = 0.002
# The deliverer's pause when nothing was due.
IDLE_POLL_S = 0.01
READINESS_INTERVAL_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Record:
    """What the load was told. Times are time.monotonic()."""

    acked_puts: dict[str, float] = field(default_factory=dict)
    refused_puts: dict[str, str] = field(default_factory=dict)
    sends: Counter[str] = field(default_factory=Counter)
    first_sent: dict[str, float] = field(default_factory=dict)
    # Entries claimed maybe stored that the broker had: marked delivered, not sent again.
    found_in_index: set[str] = field(default_factory=set)
    acked_marks: dict[str, float] = field(default_factory=dict)
    refused_marks: set[str] = field(default_factory=set)
    refused_claims: int = 0
    refused_checks: int = 0
    # message group → message ids in the order of their first send.
    group_order: dict[str, list[str]] = field(default_factory=dict)
    put_order: dict[str, list[str]] = field(default_factory=dict)

    def duplicated(self) -> set[str]:
        return {m for m, n in self.sends.items() if n > 1}

    def calls(self) -> int:
        return len(self.acked_puts) + len(self.refused_puts) + len(self.sends)


class OutboxLoad:
    def __init__(self, url: str) -> None:
        self.url = url
        self.putter = open_outbox(url)
        self.deliverer = open_outbox(url)
        self.record = Record()
        self._lock = threading.Lock()
        self._puts_stopped = threading.Event()
        self._stopped = threading.Event()
        self._threads = [
            threading.Thread(target=self._put_loop, name="load-putter", daemon=True),
            threading.Thread(target=self._deliver_loop, name="load-deliverer", daemon=True),
            threading.Thread(target=self._check_loop, name="load-readiness", daemon=True),
        ]
        self.failures: list[BaseException] = []

    def __enter__(self) -> OutboxLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._puts_stopped.set()
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self.putter.close()
        self.deliverer.close()

    def wait_for(self, what: str, condition: Callable[[Record], bool], deadline_s: float) -> None:
        """Return once ``condition(record)`` holds (checked under the load's lock)."""
        deadline = time.monotonic() + deadline_s
        while True:
            assert not self.failures, f"the load failed: {self.failures!r}"
            with self._lock:
                if condition(self.record):
                    return
            assert time.monotonic() < deadline, f"timed out after {deadline_s} s: {what}"
            time.sleep(IDLE_POLL_S)

    def stop_puts(self) -> None:
        self._puts_stopped.set()
        self._threads[0].join(timeout=60)

    def drain(self, deadline_s: float) -> None:
        """Wait until nothing is pending (all delivered, or lost), then stop the deliverer."""
        self.stop_puts()
        self.wait_for("the outbox to have nothing pending", lambda _: self._drained(), deadline_s)
        self._stopped.set()
        for thread in self._threads[1:]:
            thread.join(timeout=60)

    def _drained(self) -> bool:
        try:
            return self.deliverer.stats(now_ms()).pending == 0
        except OutboxError:
            return False

    def _check_loop(self) -> None:
        """The sidecar's readiness check, once a second on each instance (on Sentinel it is
        what drops connections to a master the Sentinels no longer name)."""
        try:
            while not self._stopped.wait(READINESS_INTERVAL_S):
                for outbox in (self.putter, self.deliverer):
                    try:
                        outbox.check_writable()
                    except OutboxError:
                        with self._lock:
                            self.record.refused_checks += 1
        except BaseException as e:  # reported by wait_for
            self.failures.append(e)

    def _put_loop(self) -> None:
        n = 0
        try:
            while not self._puts_stopped.wait(PUT_INTERVAL_S):
                n += 1
                item = entry(n, group=f"g{n % GROUPS}" if n % 4 == 0 else None)
                try:
                    self.putter.put([item])
                except OutboxError as e:
                    with self._lock:
                        self.record.refused_puts[item.message_id] = str(e)
                    continue
                with self._lock:
                    self.record.acked_puts[item.message_id] = time.monotonic()
                    if item.message.message_group:
                        group = self.record.put_order.setdefault(item.message.message_group, [])
                        group.append(item.message_id)
        except BaseException as e:  # reported by wait_for
            self.failures.append(e)

    def _deliver_loop(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    claimed = self.deliverer.claim_due(now_ms(), CLAIM_LIMIT, LEASE_MS, "load")
                except OutboxError:
                    with self._lock:
                        self.record.refused_claims += 1
                    claimed = []
                if not claimed:
                    self._stopped.wait(IDLE_POLL_S)
                    continue
                self._deliver(claimed)
        except BaseException as e:  # reported by wait_for
            self.failures.append(e)

    def _deliver(self, claimed: list[OutboxEntry]) -> None:
        with self._lock:
            for e in claimed:
                if e.maybe_stored and e.message_id in self.record.sends:
                    self.record.found_in_index.add(e.message_id)
                    continue
                self.record.sends[e.message_id] += 1
                if e.message_id not in self.record.first_sent:
                    self.record.first_sent[e.message_id] = time.monotonic()
                    if e.message.message_group:
                        group = self.record.group_order.setdefault(e.message.message_group, [])
                        group.append(e.message_id)
        receipt = DeliveryReceipt(queue_id=0, queue_offset=0, delivered_ms=now_ms())
        try:
            self.deliverer.mark_delivered_many([(e.message_id, receipt) for e in claimed])
        except OutboxError:
            with self._lock:
                self.record.refused_marks.update(e.message_id for e in claimed)
            return
        with self._lock:
            for e in claimed:
                self.record.acked_marks[e.message_id] = time.monotonic()


def summary(record: Record, window: tuple[float, float]) -> str:
    """What the load saw, for the test's log."""
    return (
        f"puts acknowledged {len(record.acked_puts)}, refused {len(record.refused_puts)}; "
        f"sent {len(record.sends)}, sent twice {len(record.duplicated())}; "
        f"delivered marks refused {len(record.refused_marks)}; claims refused "
        f"{record.refused_claims}; found in the index (not resent) {len(record.found_in_index)}; "
        f"window {window[1] - window[0]:.1f} s"
    )
