"""claim_due and leases, checked against every backend.

Each test runs on memory (the reference), RocksDB, Redis and MySQL, and proves one promise of
the contract (outbox/outbox.py):
- claim_due takes due entries soonest first (an expired lease counts from its end; ties in seq
  order), never early, never one under a live lease (threads never get the same entry;
  for processes, see test_features.py), and takes an expired lease back, maybe stored when its
  holder recorded no outcome (released, rescheduled and delivered entries are not);
- expire_leases ends the leases of one owner prefix at once (live or expired, FIFO heads too):
  unleased, due at their next send time, maybe stored; no other owner's.
"""

from __future__ import annotations

import threading

import pytest

from outbox import (
    EntryState,
    Outbox,
)
from tests.outbox.conformance.processes import claim
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, ids, message_id, receipt


def test_claim_takes_due_entries_soonest_first_and_leases_them(outbox: Outbox) -> None:
    outbox.put(
        [
            entry(1, next_send_time_ms=NOW_MS - 100),
            entry(2, next_send_time_ms=NOW_MS - 300),
            entry(3, next_send_time_ms=NOW_MS),
            entry(4, next_send_time_ms=NOW_MS - 200),
        ]
    )
    claimed = outbox.claim_due(NOW_MS, 10, LEASE_MS, "w1")
    assert ids(claimed) == [message_id(n) for n in (2, 4, 1, 3)]
    for c in claimed:
        assert c.lease_owner == "w1"
        assert c.lease_until_ms == NOW_MS + LEASE_MS
        assert outbox.get(c.message_id) == c


def test_claim_respects_its_limit(outbox: Outbox) -> None:
    outbox.put([entry(n, next_send_time_ms=NOW_MS - 10 * n) for n in range(1, 6)])
    assert claim(outbox, limit=2) == [message_id(5), message_id(4)]
    assert claim(outbox, limit=2) == [message_id(3), message_id(2)]
    assert claim(outbox, limit=2) == [message_id(1)]
    assert claim(outbox, limit=2) == []


def test_entry_not_yet_due_is_not_claimed(outbox: Outbox) -> None:
    outbox.put([entry(1, next_send_time_ms=NOW_MS + 1)])
    assert claim(outbox, NOW_MS) == []
    assert claim(outbox, NOW_MS + 1) == [message_id(1)]


def test_leased_entry_is_not_claimed_again_until_its_lease_ends(outbox: Outbox) -> None:
    outbox.put([entry(1)])
    assert claim(outbox, NOW_MS, owner="w1") == [message_id(1)]
    assert claim(outbox, NOW_MS, owner="w2") == []
    assert claim(outbox, NOW_MS + LEASE_MS - 1, owner="w2") == []

    # The lease has ended: another worker takes the entry, and the first lost it.
    (taken,) = outbox.claim_due(NOW_MS + LEASE_MS, 10, LEASE_MS, "w2")
    assert taken.lease_owner == "w2"
    assert taken.lease_until_ms == NOW_MS + 2 * LEASE_MS
    assert not outbox.reschedule(
        message_id(1), "w1", NOW_MS + 10**6, "late", NOW_MS + LEASE_MS, maybe_stored=False
    )
    assert not outbox.release(message_id(1), "w1")
    assert outbox.reschedule(
        message_id(1), "w2", NOW_MS + 10**6, "retry", NOW_MS + LEASE_MS, maybe_stored=False
    )


def test_entry_whose_lease_ran_out_is_due_again_from_the_lease_end(outbox: Outbox) -> None:
    outbox.put([entry(1, next_send_time_ms=NOW_MS - 300)])
    assert claim(outbox, NOW_MS, owner="w1") == [message_id(1)]  # leased until NOW_MS + LEASE_MS
    outbox.put([entry(2, next_send_time_ms=NOW_MS + LEASE_MS - 100)])
    # 1 is due since NOW_MS - 300 by its next send time, but claimable only since its lease
    # ended: 2 has waited longer.
    assert claim(outbox, NOW_MS + LEASE_MS + 10, limit=1, owner="w2") == [message_id(2)]
    assert claim(outbox, NOW_MS + LEASE_MS + 10, limit=1, owner="w2") == [message_id(1)]


def test_an_entry_claimed_over_a_lease_with_no_outcome_may_be_stored(outbox: Outbox) -> None:
    outbox.put([entry(n) for n in (1, 2, 3, 4)])
    first = outbox.claim_due(NOW_MS, 10, LEASE_MS, "w1")
    assert ids(first) == [message_id(n) for n in (1, 2, 3, 4)]
    assert not any(e.maybe_stored for e in first), "never leased before: nothing was sent"
    # w1 records an outcome for 1, 2 and 3, and dies holding 4.
    assert outbox.release(message_id(1), "w1")
    assert outbox.reschedule(message_id(2), "w1", NOW_MS, "SYSTEM_BUSY", NOW_MS, maybe_stored=False)
    assert outbox.mark_delivered(message_id(3), receipt(3))

    later = NOW_MS + LEASE_MS
    taken = {e.message_id: e for e in outbox.claim_due(later, 10, LEASE_MS, "w2")}
    assert set(taken) == {message_id(1), message_id(2), message_id(4)}
    assert not taken[message_id(1)].maybe_stored
    assert not taken[message_id(2)].maybe_stored
    assert taken[message_id(4)].maybe_stored, "w1 may have sent it before it died"
    assert outbox.get(message_id(4)) == taken[message_id(4)], "and so it is stored"

    # It stays so through a reschedule, and a later clean claim.
    assert outbox.reschedule(message_id(4), "w2", later, "UNAVAILABLE", later, maybe_stored=False)
    got = outbox.get(message_id(4))
    assert got is not None
    assert got.maybe_stored
    assert outbox.release(message_id(1), "w2")
    (again,) = outbox.claim_due(later, 1, LEASE_MS, "w3")
    assert again.message_id == message_id(1)
    assert not again.maybe_stored
    (four,) = outbox.claim_due(later, 10, LEASE_MS, "w3")  # 2 is w2's still
    assert (four.message_id, four.maybe_stored) == (message_id(4), True)


def test_expire_leases_ends_one_owner_prefix_s_leases_at_once(outbox: Outbox) -> None:
    then_ms = NOW_MS - 3 * LEASE_MS
    outbox.put(
        [
            *(entry(n, next_send_time_ms=then_ms) for n in (1, 2, 3, 4)),
            entry(5, next_send_time_ms=then_ms, group="g"),
            entry(6, next_send_time_ms=then_ms, group="g"),
            entry(7, next_send_time_ms=NOW_MS),
        ]
    )
    # By NOW_MS: 1's lease (of "a/1") has ended unclaimed, 2's and 5's (of "a/1") are live, and
    # 3 and 4 are other owners' (a prefix of a prefix is not the prefix).
    long_ms = 10 * LEASE_MS
    for n, owner, lease_ms in (
        (1, "a/1", LEASE_MS), (2, "a/1", long_ms), (3, "ab/1", long_ms), (4, "b/1", long_ms),
        (5, "a/1", long_ms),
    ):  # fmt: skip
        assert ids(outbox.claim_due(then_ms, 1, lease_ms, owner)) == [message_id(n)]

    assert outbox.expire_leases("a/", NOW_MS) == 3
    for n in (1, 2, 5):
        got = outbox.get(message_id(n))
        assert got is not None
        assert (got.lease_owner, got.lease_until_ms, got.maybe_stored) == (None, 0, True), n
        assert (got.attempts, got.state, got.next_send_time_ms) == (
            0, EntryState.PENDING, then_ms
        ), n  # fmt: skip
    for n, owner in ((3, "ab/1"), (4, "b/1")):
        got = outbox.get(message_id(n))
        assert got is not None
        assert (got.lease_owner, got.maybe_stored) == (owner, False), n
    assert outbox.stats(NOW_MS).in_flight == 2

    # Claimable at once, at their next send times (5 heads its group, 6 waits behind it).
    again = outbox.claim_due(NOW_MS, 10, LEASE_MS, "a/2")
    assert ids(again) == [message_id(n) for n in (1, 2, 5, 7)]
    assert [e.maybe_stored for e in again] == [True, True, True, False]
    assert outbox.expire_leases("c/", NOW_MS) == 0
    with pytest.raises(ValueError, match="owner prefix"):
        outbox.expire_leases("", NOW_MS)


def test_entries_due_at_the_same_time_leave_in_seq_order(outbox: Outbox) -> None:
    # Put in an order their ids do not sort in.
    outbox.put([entry(n) for n in (7, 3, 9, 1, 5)])
    assert claim(outbox, limit=10) == [message_id(n) for n in (7, 3, 9, 1, 5)]


def test_threads_claiming_at_once_never_get_the_same_entry(outbox: Outbox) -> None:
    entries_n, threads_n = 300, 6
    outbox.put([entry(n) for n in range(entries_n)])
    barrier = threading.Barrier(threads_n)
    got: dict[int, list[str]] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            barrier.wait(timeout=30)
            mine = got.setdefault(t, [])
            while batch := claim(outbox, limit=7, owner=f"w{t}"):
                mine += batch
        except BaseException as e:  # reported below, with the thread's result
            errors.append(e)

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not errors
    assert not any(w.is_alive() for w in workers)
    every = [i for mine in got.values() for i in mine]
    assert len(every) == len(set(every)), "an entry was claimed twice"
    assert set(every) == {message_id(n) for n in range(entries_n)}
