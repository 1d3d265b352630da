"""Settling a claimed entry, checked against every backend.

Each test runs on memory (the reference), RocksDB, Redis and MySQL, and proves one promise of
the contract (outbox/outbox.py):
- reschedule, bury and release act for the lease owner only; mark_delivered for any PENDING
  entry and leaves a tombstone (no body, receipt kept), and mark_delivered_many is it for each
  item in order (FIFO groups move on to the right head whatever order their entries come in);
- reschedule's maybe_stored is a stored flag: only ever set, kept through reopens, whatever the
  last error says.
"""

from __future__ import annotations

from dataclasses import replace

from outbox import (
    DeliveryReceipt,
    EntryState,
    Outbox,
    OutboxFeatures,
    SpoolCause,
)
from tests.outbox.conformance.processes import claim
from tests.outbox.conftest import OpenOutbox
from tests.outbox.entries import NOW_MS, TOPIC, entry, message_id, receipt


def test_reschedule_counts_the_attempt_and_sets_the_next_send_time(outbox: Outbox) -> None:
    outbox.put([entry(1)])
    claim(outbox)
    assert not outbox.reschedule(
        message_id(1), "w2", NOW_MS + 5_000, "x", NOW_MS, maybe_stored=False
    )
    assert not outbox.reschedule(
        message_id(999), "w1", NOW_MS + 5_000, "x", NOW_MS, maybe_stored=False
    )
    assert outbox.reschedule(
        message_id(1), "w1", NOW_MS + 5_000, "SYSTEM_BUSY", NOW_MS, maybe_stored=False
    )
    got = outbox.get(message_id(1))
    assert got is not None
    assert (got.state, got.attempts, got.last_error) == (EntryState.PENDING, 1, "SYSTEM_BUSY")
    assert got.next_send_time_ms == NOW_MS + 5_000
    assert got.lease_owner is None
    assert claim(outbox, NOW_MS + 4_999) == []
    assert claim(outbox, NOW_MS + 5_000) == [message_id(1)]
    assert outbox.reschedule(
        message_id(1), "w1", NOW_MS + 9_000, "again", NOW_MS + 5_000, maybe_stored=False
    )
    got = outbox.get(message_id(1))
    assert got is not None
    assert got.attempts == 2
    # Without a lease there is nothing to act on.
    assert not outbox.reschedule(
        message_id(1), "w1", NOW_MS + 9_000, "x", NOW_MS + 5_000, maybe_stored=False
    )


def test_bury_makes_the_entry_dead_with_its_error_and_counts_the_attempt(outbox: Outbox) -> None:
    outbox.put([entry(1)])
    claim(outbox)
    assert outbox.reschedule(
        message_id(1), "w1", NOW_MS, "first failure", NOW_MS, maybe_stored=False
    )
    claim(outbox)
    assert not outbox.bury(message_id(1), "w2", "x", NOW_MS)
    assert outbox.bury(message_id(1), "w1", "attempts_max reached: SYSTEM_BUSY", NOW_MS + 7)
    got = outbox.get(message_id(1))
    assert got is not None
    assert got.state is EntryState.DEAD
    assert got.last_error == "attempts_max reached: SYSTEM_BUSY"
    assert got.attempts == 2, "the reschedule's failed attempt and the burying one"
    assert got.state_changed_ms == NOW_MS + 7
    assert got.lease_owner is None
    assert got.message.body == entry(1).message.body  # kept for a requeue
    assert claim(outbox, NOW_MS + 10**9) == []
    assert not outbox.bury(message_id(1), "w1", "again", NOW_MS)
    assert not outbox.mark_delivered(message_id(1), receipt(1))


def test_release_gives_the_lease_back_unused(outbox: Outbox) -> None:
    outbox.put([entry(1)])
    claim(outbox)
    assert not outbox.release(message_id(1), "w2")
    assert outbox.release(message_id(1), "w1")
    got = outbox.get(message_id(1))
    assert got is not None
    assert (got.lease_owner, got.attempts, got.next_send_time_ms) == (None, 0, NOW_MS)
    assert claim(outbox, owner="w2") == [message_id(1)]


def test_mark_delivered_leaves_a_tombstone_with_the_receipt(outbox: Outbox) -> None:
    (stored,) = outbox.put([entry(1)])
    claim(outbox, owner="w1")
    weak = DeliveryReceipt(queue_id=3, queue_offset=77, delivered_ms=NOW_MS + 9, durable=False)
    # Whatever the lease says: the broker has the message.
    assert outbox.mark_delivered(message_id(1), weak)
    got = outbox.get(message_id(1))
    assert got is not None
    assert got == replace(
        stored,
        message=replace(stored.message, body=b""),
        state=EntryState.DELIVERED,
        receipt=weak,
        state_changed_ms=NOW_MS + 9,
    )
    assert not outbox.mark_delivered(message_id(1), weak)
    assert not outbox.mark_delivered(message_id(999), weak)
    assert claim(outbox, NOW_MS + 10**9) == []


def test_mark_delivered_many_is_mark_delivered_for_each_item_in_order(outbox: Outbox) -> None:
    outbox.put([entry(1), entry(2), *(entry(n, group="g") for n in (3, 4, 5, 6))])
    outbox.put([entry(n, group="h") for n in (7, 8)])
    assert sorted(claim(outbox)) == sorted(message_id(n) for n in (1, 2, 3, 7))
    answers = outbox.mark_delivered_many(
        [
            (message_id(1), receipt(1)),
            (message_id(4), receipt(4)),  # out of turn, before its group's head
            (message_id(3), receipt(3)),  # the head: 5 is next (4 has left)
            (message_id(1), receipt(99)),  # delivered by its first item already
            (message_id(999), receipt(999)),  # not in the outbox
            (message_id(8), receipt(8)),  # behind 7, which comes after it in this call
            (message_id(7), receipt(7)),
        ]
    )
    assert answers == [True, True, True, False, False, True, True]
    for n in (1, 3, 4, 7, 8):
        got = outbox.get(message_id(n))
        assert got is not None
        assert (got.state, got.receipt, got.message.body) == (
            EntryState.DELIVERED,
            receipt(n),
            b"",
        )
    assert outbox.pending_groups() == {(TOPIC, "g")}
    assert claim(outbox) == [message_id(5)]  # the group's new head, and only it
    assert outbox.stats(NOW_MS).pending == 3
    assert outbox.mark_delivered_many([]) == []


def test_mark_delivered_needs_no_lease(outbox: Outbox) -> None:
    outbox.put([entry(1), entry(2)])
    assert outbox.mark_delivered(message_id(1), receipt(1))
    assert claim(outbox) == [message_id(2)]


def test_reschedule_stores_maybe_stored_whatever_the_error_says(
    open_ob: OpenOutbox, features: OutboxFeatures
) -> None:
    """The flag is what the caller says, not read back from the error's wording: a timeout
    reworded without its cause's name is still maybe stored, and an error that starts with
    AMBIGUOUS but is said not to be stored is not. Only ever set: a later failure that says
    False keeps it. It is claimed with the entry, and (where the outbox outlives its instance)
    kept through a reopen."""
    outbox = open_ob()
    outbox.put([entry(1), entry(2)])
    assert claim(outbox) == [message_id(1), message_id(2)]
    reworded = "the broker took too long to answer"
    ambiguous_text = f"{SpoolCause.AMBIGUOUS.value}: but never sent"
    assert outbox.reschedule(message_id(1), "w1", NOW_MS, reworded, NOW_MS, maybe_stored=True)
    assert outbox.reschedule(
        message_id(2), "w1", NOW_MS, ambiguous_text, NOW_MS, maybe_stored=False
    )
    assert [maybe_stored(outbox, n) for n in (1, 2)] == [True, False]

    claimed = outbox.claim_due(NOW_MS, 10, 1_000, "w2")
    assert [(e.message_id, e.maybe_stored) for e in claimed] == [
        (message_id(1), True),
        (message_id(2), False),
    ]
    for n in (1, 2):
        assert outbox.reschedule(
            message_id(n), "w2", NOW_MS + 10, "UNAVAILABLE: refused", NOW_MS, maybe_stored=False
        )
    assert [maybe_stored(outbox, n) for n in (1, 2)] == [True, False], "set, never cleared"

    if features.survives_process_kill:
        outbox.close()
        outbox = open_ob()
    assert [maybe_stored(outbox, n) for n in (1, 2)] == [True, False]
    assert [e.last_error for e in outbox.scan_all()] == ["UNAVAILABLE: refused"] * 2


def maybe_stored(outbox: Outbox, n: int) -> bool:
    got = outbox.get(message_id(n))
    assert got is not None
    return got.maybe_stored
