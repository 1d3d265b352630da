"""requeue, retry_now and purge, checked against every backend.

Each test runs on memory (the reference), RocksDB, Redis and MySQL, and proves one promise of
the contract (outbox/outbox.py):
- requeue and purge do what they say, and purge refuses PENDING;
- retry_now makes entries due later due now, but never one leased, one whose FIFO group has an
  entry in flight, nor a DEAD or DELIVERED one.
"""

from __future__ import annotations

import pytest

from outbox import (
    EntryState,
    Outbox,
)
from tests.outbox.conformance.processes import claim
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, message_id, receipt


def test_requeue_makes_dead_entries_pending_and_due_now(outbox: Outbox) -> None:
    outbox.put([entry(n) for n in (1, 2, 3)])
    claim(outbox)
    for n in (1, 2, 3):
        assert outbox.reschedule(message_id(n), "w1", NOW_MS, "busy", NOW_MS, maybe_stored=False)
    claim(outbox)
    for n in (1, 2):
        assert outbox.bury(message_id(n), "w1", "dead", NOW_MS)
    assert outbox.requeue([message_id(1), message_id(3), message_id(999)], NOW_MS + 50) == 1
    got = outbox.get(message_id(1))
    assert got is not None
    assert (got.state, got.attempts, got.next_send_time_ms) == (EntryState.PENDING, 0, NOW_MS + 50)
    assert got.message.body == entry(1).message.body
    assert outbox.requeue(None, NOW_MS + 60) == 1  # the other dead one
    assert outbox.requeue(None, NOW_MS + 60) == 0
    assert claim(outbox, NOW_MS + 60) == [message_id(1), message_id(2)]
    assert outbox.stats(NOW_MS + 60).dead == 0


def test_retry_now_makes_pending_entries_due_later_due_now(outbox: Outbox) -> None:
    far_ms = NOW_MS + 365 * 24 * 3_600_000
    outbox.put([entry(1, next_send_time_ms=far_ms), entry(2, next_send_time_ms=far_ms)])
    claim(outbox)  # nothing due yet
    assert outbox.retry_now([message_id(1), message_id(1)], NOW_MS + 10) == 1
    got = outbox.get(message_id(1))
    assert got is not None
    assert (got.state, got.next_send_time_ms, got.attempts) == (EntryState.PENDING, NOW_MS + 10, 0)
    assert claim(outbox, NOW_MS + 9) == []
    assert claim(outbox, NOW_MS + 10) == [message_id(1)]
    untouched = outbox.get(message_id(2))  # not asked for
    assert untouched is not None
    assert untouched.next_send_time_ms == far_ms


def test_retry_now_keeps_attempts_and_last_error(outbox: Outbox) -> None:
    outbox.put([entry(1)])
    claim(outbox)
    assert outbox.reschedule(
        message_id(1), "w1", NOW_MS + 600_000, "SYSTEM_BUSY", NOW_MS, maybe_stored=False
    )
    assert outbox.retry_now([message_id(1)], NOW_MS + 1) == 1
    got = outbox.get(message_id(1))
    assert got is not None
    assert (got.attempts, got.last_error, got.next_send_time_ms) == (1, "SYSTEM_BUSY", NOW_MS + 1)
    assert claim(outbox, NOW_MS + 1) == [message_id(1)]


def test_retry_now_of_every_pending_entry(outbox: Outbox) -> None:
    outbox.put([entry(n, next_send_time_ms=NOW_MS + 1_000 * n) for n in range(1, 5)])
    assert outbox.retry_now(None, NOW_MS + 2_000) == 2  # 3 and 4; 1 and 2 are due already
    assert [e.next_send_time_ms for e in outbox.scan_all()] == [
        NOW_MS + 1_000,  # an entry due already keeps its time: it does not go behind others
        NOW_MS + 2_000,
        NOW_MS + 2_000,
        NOW_MS + 2_000,
    ]
    assert claim(outbox, NOW_MS + 2_000) == [message_id(n) for n in range(1, 5)]
    assert outbox.retry_now(None, NOW_MS + 2_000) == 0


def test_retry_now_leaves_leased_dead_delivered_and_unknown_entries_alone(
    outbox: Outbox,
) -> None:
    later_ms = NOW_MS + 5_000
    outbox.put([entry(n, next_send_time_ms=later_ms) for n in (1, 2, 3)])
    # 1 leased at later_ms by a sidecar whose clock runs ahead of the caller's: at NOW_MS its
    # lease is live and its next send time still to come.
    assert claim(outbox, later_ms, limit=1) == [message_id(1)]
    assert outbox.mark_delivered(message_id(2), receipt(2))
    assert claim(outbox, later_ms, limit=1) == [message_id(3)]
    assert outbox.bury(message_id(3), "w1", "poison", later_ms)
    before = list(outbox.scan_all())
    asked = [message_id(n) for n in (1, 2, 3, 999)]
    assert outbox.retry_now(asked, NOW_MS) == 0
    assert outbox.retry_now(None, NOW_MS) == 0
    assert list(outbox.scan_all()) == before


def test_retry_now_never_puts_a_second_entry_of_a_fifo_group_in_flight(outbox: Outbox) -> None:
    later_ms = NOW_MS + 60_000
    outbox.put(
        [
            entry(1, group="g"),
            entry(2, group="g", next_send_time_ms=later_ms),
            entry(3, group="idle", next_send_time_ms=later_ms),
            entry(4, group="idle", next_send_time_ms=later_ms),
        ]
    )
    assert claim(outbox) == [message_id(1)]  # g has 1 in flight
    assert outbox.retry_now(None, NOW_MS + 1) == 2  # 3 and 4; g's 2 waits for 1
    got = outbox.get(message_id(2))
    assert got is not None
    assert got.next_send_time_ms == later_ms
    assert claim(outbox, NOW_MS + 1) == [message_id(3)]  # 4 behind 3, its group's head
    assert outbox.mark_delivered(message_id(1), receipt(1))
    assert outbox.retry_now([message_id(2)], NOW_MS + 2) == 1
    assert claim(outbox, NOW_MS + 2) == [message_id(2)]


def test_retry_now_waits_for_the_lease_of_a_head_demoted_by_a_requeue(outbox: Outbox) -> None:
    outbox.put([entry(1, group="g"), entry(2, group="g")])
    assert claim(outbox) == [message_id(1)]
    assert outbox.bury(message_id(1), "w1", "poison", NOW_MS)
    assert claim(outbox, NOW_MS + 1) == [message_id(2)]
    assert outbox.requeue([message_id(1)], NOW_MS + 2) == 1  # 1 heads g again; 2 in flight
    assert outbox.retry_now(None, NOW_MS + 3) == 0
    assert claim(outbox, NOW_MS + 3) == []
    assert claim(outbox, NOW_MS + 1 + LEASE_MS) == [message_id(1)]


def test_purge_deletes_old_tombstones_and_dead_entries_only(outbox: Outbox) -> None:
    outbox.put([entry(n) for n in range(1, 7)])
    for n in (1, 2, 3):
        assert outbox.mark_delivered(message_id(n), receipt(n, delivered_ms=NOW_MS + 1_000 * n))
    claim(outbox)
    assert outbox.bury(message_id(4), "w1", "dead", NOW_MS + 1_000)
    assert outbox.bury(message_id(5), "w1", "dead", NOW_MS + 5_000)

    with pytest.raises(ValueError, match="PENDING"):
        outbox.purge(EntryState.PENDING, NOW_MS + 10**9)

    # Strictly before: the tombstone of NOW_MS + 2000 stays.
    assert outbox.purge(EntryState.DELIVERED, NOW_MS + 2_000) == 1
    assert outbox.get(message_id(1)) is None
    assert outbox.get(message_id(2)) is not None
    assert outbox.purge(EntryState.DELIVERED, NOW_MS + 10**9) == 2
    assert outbox.purge(EntryState.DEAD, NOW_MS + 2_000) == 1
    assert outbox.get(message_id(4)) is None
    assert outbox.get(message_id(5)) is not None
    assert outbox.get(message_id(6)) is not None  # PENDING: never purged
    stats = outbox.stats(NOW_MS)
    assert (stats.delivered, stats.dead, stats.pending) == (0, 1, 1)
    assert stats.bytes == len(entry(5).message.body) + len(entry(6).message.body)
