"""put and its bound, checked against every backend.

Each test runs on memory (the reference), RocksDB, Redis and MySQL, and proves one promise of
the contract (outbox/outbox.py):
- put stores every field and body byte, assigns increasing seqs, is idempotent by message id (in
  any state, within one put too), and refuses entries that are not new;
- put is all-or-nothing against the bound, which counts PENDING and DEAD entries and body bytes
  but not delivered tombstones; put_groups answers each of its requests as that put would, in
  order, one refused request refusing none of the others.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from outbox import (
    EntryState,
    Outbox,
    OutboxEntry,
    OutboxFullError,
    OutboxLimits,
    OutboxMessage,
    SpoolCause,
)
from outbox.group_commit import GROUP_COMMIT_BATCH_MAX
from tests.outbox.conformance.processes import claim
from tests.outbox.conftest import OpenOutbox
from tests.outbox.entries import NOW_MS, TOPIC, entry, ids, message_id, receipt


def test_put_then_get_returns_every_field_and_body_byte(outbox: Outbox) -> None:
    original = OutboxEntry(
        message=OutboxMessage(
            topic=TOPIC,
            body=bytes(range(256)) * 4,  # every byte value, NUL and invalid UTF-8 included
            message_id=message_id(1),
            tag="TagA",
            keys=("k1", "k 2", "ключ"),
            message_group="group-1",
            delivery_timestamp_ms=NOW_MS + 60_000,
            properties={"a": "1", "trace": "x-y", "ünï": "cödé"},
            born_timestamp_ms=NOW_MS - 5_000,
            delivery_timeout_ms=3_600_000,
        ),
        cause=SpoolCause.AMBIGUOUS,
        created_ms=NOW_MS - 4_000,
        next_send_time_ms=NOW_MS + 250,
        maybe_stored=True,
        attempts=3,
        last_error="DEADLINE_EXCEEDED after 3000 ms",
        state_changed_ms=NOW_MS - 4_000,
    )
    (stored,) = outbox.put([original])
    assert stored.seq > 0
    assert stored == replace(original, seq=stored.seq)
    assert outbox.get(original.message_id) == stored
    assert outbox.get(message_id(999)) is None


def test_put_assigns_increasing_seqs_in_order(outbox: Outbox) -> None:
    first = outbox.put([entry(1), entry(2), entry(3)])
    second = outbox.put([entry(4), entry(5)])
    seqs = [e.seq for e in first + second]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 5
    assert ids(first + second) == [message_id(n) for n in range(1, 6)]


def test_put_is_idempotent_by_message_id_in_any_state(outbox: Outbox) -> None:
    (stored,) = outbox.put([entry(1)])
    again = outbox.put([replace(entry(1), message=replace(entry(1).message, body=b"other"))])
    assert again == [stored]
    assert outbox.get(message_id(1)) == stored

    # Twice within one put: stored once, both answers the same.
    twice = outbox.put([entry(2), entry(2)])
    assert twice[0] == twice[1]
    assert outbox.stats(NOW_MS).pending == 2

    # A delivered tombstone is not written again either.
    assert outbox.mark_delivered(message_id(1), receipt(1))
    (tombstone,) = outbox.put([entry(1)])
    assert tombstone.state is EntryState.DELIVERED
    assert tombstone.message.body == b""
    assert outbox.stats(NOW_MS).pending == 1


def test_put_groups_answers_each_request_as_its_own_put(open_ob: OpenOutbox) -> None:
    ob = open_ob(OutboxLimits(outbox_entries_max=6, full_retry_after_ms=1_234))
    (first,) = ob.put([entry(1)])
    answers = ob.put_groups(
        [
            [entry(2), entry(3)],
            [entry(10 + k) for k in range(5)],  # 3 + 5 > 6: refused, and only it
            [entry(4), entry(1)],  # 1 is stored already: costs nothing
            [],
            [entry(3)],  # stored by the first request of this very call
            [entry(5, group="g"), entry(6, group="g")],
        ]
    )
    stored = [a for a in answers if isinstance(a, list)]
    assert [type(a).__name__ for a in answers] == ["list", "OutboxFullError", *["list"] * 4]
    full = answers[1]
    assert isinstance(full, OutboxFullError)
    assert full.retry_after_ms == 1_234
    assert [ids(a) for a in stored] == [
        [message_id(2), message_id(3)],
        [message_id(4), message_id(1)],
        [],
        [message_id(3)],
        [message_id(5), message_id(6)],
    ]
    assert stored[1][1] == first
    assert stored[3] == [stored[0][1]]
    # Stored as put one after another: seqs increase in the order of the requests.
    seqs = [e.seq for e in [first, *stored[0], stored[1][0], *stored[4]]]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    for answer in stored:
        assert all(ob.get(e.message_id) == e for e in answer)
    assert all(ob.get(message_id(10 + k)) is None for k in range(5))
    assert ob.stats(NOW_MS).pending == 6
    assert ob.has_pending_group(TOPIC, "g")
    assert ob.put_groups([]) == []


def test_put_groups_refuses_entries_that_are_not_new_before_writing_any(outbox: Outbox) -> None:
    with pytest.raises(ValueError, match="PENDING"):
        outbox.put_groups([[entry(1)], [replace(entry(2), state=EntryState.DEAD)]])
    assert outbox.get(message_id(1)) is None


def test_put_groups_of_more_requests_than_a_commit_batch(outbox: Outbox) -> None:
    requests = [[entry(n)] for n in range(GROUP_COMMIT_BATCH_MAX * 2 + 3)]
    answers = outbox.put_groups(requests)
    assert [ids(a) if isinstance(a, list) else a for a in answers] == [ids(r) for r in requests]
    assert outbox.stats(NOW_MS).pending == len(requests)


def test_put_of_nothing_stores_nothing(outbox: Outbox) -> None:
    assert outbox.put([]) == []
    assert outbox.stats(NOW_MS).pending == 0


def test_bound_on_entries_refuses_the_whole_put_and_writes_none_of_it(
    open_ob: OpenOutbox,
) -> None:
    limits = OutboxLimits(outbox_entries_max=3, full_retry_after_ms=1_234)
    ob = open_ob(limits)
    ob.put([entry(1), entry(2)])
    with pytest.raises(OutboxFullError) as refused:
        ob.put([entry(3), entry(4)])
    assert refused.value.retry_after_ms == 1_234
    assert refused.value.retriable
    assert ob.get(message_id(3)) is None
    assert ob.get(message_id(4)) is None
    assert ob.stats(NOW_MS).pending == 2

    ob.put([entry(3), entry(1)])  # only 3 is new: exactly at the bound
    assert ob.stats(NOW_MS).pending == 3
    ob.put([entry(2)])  # already stored: costs nothing
    with pytest.raises(OutboxFullError):
        ob.put([entry(4)])

    # A tombstone does not count; a dead entry does.
    assert ob.mark_delivered(message_id(1), receipt(1))
    ob.put([entry(4)])
    claim(ob, limit=1)
    assert ob.bury(message_id(2), "w1", "dead", NOW_MS)
    with pytest.raises(OutboxFullError):
        ob.put([entry(5)])


def test_bound_on_bytes_counts_bodies_of_pending_and_dead_entries(open_ob: OpenOutbox) -> None:
    ob = open_ob(OutboxLimits(outbox_bytes_max=100))
    ob.put([entry(1, body=b"a" * 60)])
    with pytest.raises(OutboxFullError):
        ob.put([entry(2, body=b"b" * 20), entry(3, body=b"c" * 21)])
    assert ob.get(message_id(2)) is None
    assert ob.get(message_id(3)) is None
    ob.put([entry(2, body=b"b" * 40)])  # exactly 100
    assert ob.stats(NOW_MS).bytes == 100
    assert ob.mark_delivered(message_id(1), receipt(1))
    ob.put([entry(3, body=b"c" * 60)])
    assert ob.stats(NOW_MS).bytes == 100


def test_a_refused_put_does_not_refuse_its_concurrent_neighbours(open_ob: OpenOutbox) -> None:
    ob = open_ob(OutboxLimits(outbox_entries_max=50))
    ob.put([entry(n) for n in range(45)])
    # Whatever order they are committed in, the five single entries fit (45 + 5) and the put of
    # ten never does (at least 55): each answer must be its own.
    requests = {"big": [entry(1_000 + k) for k in range(10)]}
    requests |= {f"single-{n}": [entry(100 + n)] for n in range(5)}
    barrier = threading.Barrier(len(requests))
    results: dict[str, str] = {}

    def put(name: str) -> None:
        barrier.wait(timeout=30)
        try:
            ob.put(requests[name])
            results[name] = "stored"
        except OutboxFullError:
            results[name] = "full"

    threads = [threading.Thread(target=put, args=(name,)) for name in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {name: "full" if name == "big" else "stored" for name in requests}
    assert ob.stats(NOW_MS).pending == 50
    assert all(ob.get(e.message_id) is None for e in requests["big"])
