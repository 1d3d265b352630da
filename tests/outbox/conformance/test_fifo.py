"""FIFO groups, checked against every backend.

Each test runs on memory (the reference), RocksDB, Redis and MySQL, and proves one promise of
the contract (outbox/outbox.py):
- only a group's head is claimable, at most one entry in flight, entries leave in seq order
  across reschedules, burials and a requeue of an older entry;
- pending_groups is exactly the groups has_pending_group says are pending (an empty group is no
  group; leased entries fence, dead and delivered ones do not).
"""

from __future__ import annotations

from outbox import (
    Outbox,
)
from tests.outbox.conformance.processes import claim
from tests.outbox.entries import LEASE_MS, NOW_MS, TOPIC, entry, message_id, receipt


def test_fifo_group_has_only_its_head_claimable(outbox: Outbox) -> None:
    outbox.put(
        [
            entry(1, group="g"),
            entry(2, group="g"),
            entry(3, group="g"),
            entry(4),  # no group
            entry(5, group="h"),
        ]
    )
    assert sorted(claim(outbox)) == sorted([message_id(1), message_id(4), message_id(5)])
    assert claim(outbox) == []  # the heads are in flight; 2 and 3 wait behind 1
    assert outbox.mark_delivered(message_id(1), receipt(1))
    assert claim(outbox) == [message_id(2)]


def test_fifo_group_leaves_in_order_across_reschedules(outbox: Outbox) -> None:
    outbox.put([entry(n, group="g") for n in (1, 2, 3)])
    now = NOW_MS
    delivered: list[str] = []
    for round_ in range(6):
        taken = claim(outbox, now)
        assert len(taken) <= 1, "a group never has two entries in flight"
        if not taken:
            break
        (head,) = taken
        if round_ % 2 == 0:
            # A failed send: the head is due again later, and nothing overtakes it meanwhile.
            assert outbox.reschedule(head, "w1", now + 500, "busy", now, maybe_stored=False)
            assert claim(outbox, now + 499) == []
            now += 500
        else:
            assert outbox.mark_delivered(head, receipt(round_, now))
            delivered.append(head)
    assert delivered == [message_id(n) for n in (1, 2, 3)]


def test_fifo_head_under_an_expired_lease_is_claimed_again_before_the_rest(
    outbox: Outbox,
) -> None:
    outbox.put([entry(1, group="g"), entry(2, group="g")])
    assert claim(outbox, owner="w1") == [message_id(1)]
    assert claim(outbox, NOW_MS + LEASE_MS, owner="w2") == [message_id(1)]


def test_burying_a_fifo_head_lets_the_next_one_go(outbox: Outbox) -> None:
    outbox.put([entry(1, group="g"), entry(2, group="g")])
    assert claim(outbox) == [message_id(1)]
    assert outbox.bury(message_id(1), "w1", "attempts_max", NOW_MS)
    assert claim(outbox) == [message_id(2)]


def test_entry_delivered_out_of_turn_leaves_its_group_in_order(outbox: Outbox) -> None:
    outbox.put([entry(n, group="g") for n in (1, 2, 3)])
    # The broker turned out to hold 2 already (an ambiguous send): it may leave at any time.
    assert outbox.mark_delivered(message_id(2), receipt(2))
    assert claim(outbox) == [message_id(1)]
    assert outbox.mark_delivered(message_id(1), receipt(1))
    assert claim(outbox) == [message_id(3)]


def test_requeued_older_entry_goes_first_but_never_beside_one_in_flight(outbox: Outbox) -> None:
    outbox.put([entry(1, group="g"), entry(2, group="g")])
    assert claim(outbox) == [message_id(1)]
    assert outbox.bury(message_id(1), "w1", "poison", NOW_MS)
    assert claim(outbox, NOW_MS + 1) == [message_id(2)]  # leased until NOW_MS + 1 + LEASE_MS
    assert outbox.requeue([message_id(1)], NOW_MS + 2) == 1
    # 2 is in flight: nothing else of the group is sent beside it.
    assert claim(outbox, NOW_MS + 2) == []
    assert claim(outbox, NOW_MS + LEASE_MS) == []
    # 2's lease has ended: the group resumes at its oldest entry, 1.
    assert claim(outbox, NOW_MS + 1 + LEASE_MS) == [message_id(1)]


def test_has_pending_group_while_the_group_has_pending_entries(outbox: Outbox) -> None:
    assert not outbox.has_pending_group(TOPIC, "g")
    outbox.put([entry(1, group="g"), entry(2, group="g"), entry(3, group="other")])
    assert outbox.has_pending_group(TOPIC, "g")
    assert not outbox.has_pending_group("OtherTopic", "g")
    assert claim(outbox) == [message_id(1), message_id(3)]
    assert outbox.has_pending_group(TOPIC, "g")  # leased is still pending
    assert outbox.mark_delivered(message_id(1), receipt(1))
    assert outbox.has_pending_group(TOPIC, "g")
    assert claim(outbox) == [message_id(2)]
    assert outbox.bury(message_id(2), "w1", "dead", NOW_MS)
    assert not outbox.has_pending_group(TOPIC, "g")  # dead entries do not fence the group
    assert outbox.has_pending_group(TOPIC, "other")


def test_pending_groups_are_the_groups_with_pending_entries(outbox: Outbox) -> None:
    assert outbox.pending_groups() == set()
    outbox.put(
        [
            entry(1, group="g"),
            entry(2, group="g"),
            entry(3, group="g", topic="OtherTopic"),  # same group name, another topic
            entry(4, group="h"),
            entry(5),
            entry(6, group=""),  # an empty group is no group
        ]
    )
    expected = {(TOPIC, "g"), ("OtherTopic", "g"), (TOPIC, "h")}
    assert outbox.pending_groups() == expected
    assert not outbox.has_pending_group(TOPIC, "")
    assert sorted(claim(outbox)) == sorted(message_id(n) for n in (1, 3, 4, 5, 6))
    assert outbox.pending_groups() == expected  # leased entries are pending
    assert outbox.mark_delivered(message_id(1), receipt(1))
    assert outbox.bury(message_id(4), "w1", "dead", NOW_MS)
    assert outbox.pending_groups() == {(TOPIC, "g"), ("OtherTopic", "g")}
    assert outbox.mark_delivered_many([(message_id(2), receipt(2)), (message_id(3), receipt(3))])
    assert outbox.pending_groups() == set()
    assert outbox.requeue([message_id(4)], NOW_MS) == 1  # dead, and pending again
    assert outbox.pending_groups() == {(TOPIC, "h")}
    for topic, group in [(TOPIC, "g"), ("OtherTopic", "g"), (TOPIC, "h")]:
        assert outbox.has_pending_group(topic, group) == ((topic, group) in {(TOPIC, "h")})
