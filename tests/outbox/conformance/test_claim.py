"""The outbox contract (outbox/outbox.py), checked against every backend on its real service.

Each test runs on memory (the reference), RocksDB, Redis and MySQL, and proves one promise:
- put stores every field and body byte, assigns increasing seqs, is idempotent by message id (in
  any state, within one put too), and is all-or-nothing against the bound, which counts PENDING
  and DEAD entries and body bytes but not delivered tombstones; put_groups answers each of its
  requests as that put would, in order, one refused request refusing none of the others;
- claim_due takes due entries soonest first (an expired lease counts from its end; ties in seq
  order), never early, never one under a live lease (threads and, for the shared backends, two
  processes never get the same entry), and takes an expired lease back, maybe stored when its
  holder recorded no outcome (released, rescheduled and delivered entries are not);
- expire_leases ends the leases of one owner prefix at once (live or expired, FIFO heads too):
  unleased, due at their next send time, maybe stored; no other owner's;
- FIFO groups: only the head is claimable, at most one entry in flight, entries leave in seq
  order across reschedules, burials and a requeue of an older entry;
- pending_groups is exactly the groups has_pending_group says are pending (an empty group is no
  group; leased entries fence, dead and delivered ones do not);
- reschedule, bury and release act for the lease owner only; mark_delivered for any PENDING entry
  and leaves a tombstone (no body, receipt kept), and mark_delivered_many is it for each item
  in order (FIFO groups move on to the right head whatever order their entries come in);
  requeue and purge do what they say, and purge
  refuses PENDING; retry_now makes entries due later due now, but never one leased, one whose
  FIFO group has an entry in flight, nor a DEAD or DELIVERED one;
- stats, scan/scan_all paging, export_jsonl, check_writable/close, and the factory's errors;
- and a seeded run of 400 random operations gives every answer the reference gives.
"""

from __future__ import annotations

import io
import json
import queue
import random
import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from operator import methodcaller
from pathlib import Path

import pytest

from outbox import (
    DeliveryReceipt,
    EntryState,
    Outbox,
    OutboxConfigError,
    OutboxEntry,
    OutboxFullError,
    OutboxLimits,
    OutboxMessage,
    OutboxStats,
    OutboxUnavailableError,
    SpoolCause,
    open_outbox,
)
from outbox.backends.memory import MemoryOutbox
from outbox.export import export_jsonl
from outbox.group_commit import GROUP_COMMIT_BATCH_MAX
from outbox.outbox import SCAN_PAGE_MAX
from tests.outbox.conftest import SHARED_BACKENDS, OpenOutbox
from tests.outbox.entries import LEASE_MS, NOW_MS, TOPIC, entry, ids, message_id, receipt

REPO_ROOT = Path(__file__).resolve().parents[3]


def claim(ob: Outbox, now_ms: int = NOW_MS, limit: int = 100, owner: str = "w1") -> list[str]:
    return ids(ob.claim_due(now_ms, limit, LEASE_MS, owner))


# -- put / get ----------------------------------------------------------------------------------


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


# -- claim_due -----------------------------------------------------------------------------------


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


@pytest.mark.slow
@pytest.mark.parametrize("backend", SHARED_BACKENDS, indirect=True)
def test_two_processes_claiming_at_once_never_get_the_same_entry(
    outbox: Outbox, outbox_url: str
) -> None:
    entries_n = 1_200
    outbox.put([entry(n) for n in range(entries_n)])
    claimers = [Claimer(outbox_url, f"proc{k}") for k in range(2)]
    try:
        for c in claimers:
            c.wait_ready()
        for c in claimers:
            c.go()
        results = [c.finish() for c in claimers]
    finally:
        for c in claimers:
            c.stop()
    assert all(results), "both processes must have claimed (they ran at the same time)"
    every = [i for mine in results for i in mine]
    assert len(every) == len(set(every)), "an entry was claimed by both processes"
    assert set(every) == {message_id(n) for n in range(entries_n)}


class Claimer:
    """tests/outbox/claimer.py in a child process: READY, then GO, then CLAIMED lines, DONE."""

    DEADLINE_S = 120.0

    def __init__(self, url: str, owner: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.outbox.claimer", url, owner, str(NOW_MS), "3"],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def wait_ready(self) -> None:
        line = self._lines.get(timeout=self.DEADLINE_S)
        assert line == "READY", self._failure()

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("GO\n")
        self.proc.stdin.close()

    def finish(self) -> list[str]:
        assert self.proc.wait(timeout=self.DEADLINE_S) == 0, self._failure()
        self._reader.join(timeout=self.DEADLINE_S)
        lines = []
        while (line := self._lines.get_nowait()) is not None:
            lines.append(line)
        assert lines[-1:] == ["DONE"], self._failure()
        return [line.split()[1] for line in lines if line.startswith("CLAIMED ")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=self.DEADLINE_S)
        self._reader.join(timeout=self.DEADLINE_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def _failure(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=self.DEADLINE_S)
        stderr = self.proc.stderr
        errors = stderr.read() if stderr is not None and not stderr.closed else ""
        return f"claimer exited {self.proc.returncode}: {errors}"


# -- FIFO groups ---------------------------------------------------------------------------------


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


# -- reschedule, bury, release, mark_delivered ---------------------------------------------------


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


# -- requeue, purge ------------------------------------------------------------------------------


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


# -- stats, scan, export -------------------------------------------------------------------------


def test_stats_of_an_empty_outbox(outbox: Outbox) -> None:
    assert outbox.stats(NOW_MS) == OutboxStats(
        pending=0,
        in_flight=0,
        delivered=0,
        dead=0,
        bytes=0,
        oldest_pending_created_ms=None,
        next_due_ms=None,
    )


def test_stats_count_states_leases_bytes_and_times(outbox: Outbox) -> None:
    outbox.put(
        [
            entry(1, body=b"a" * 100, created_ms=NOW_MS - 50),
            entry(2, body=b"b" * 200, created_ms=NOW_MS - 90, next_send_time_ms=NOW_MS - 5),
            entry(3, body=b"c" * 300, created_ms=NOW_MS - 70),
            entry(4, body=b"d" * 400, created_ms=NOW_MS - 10, next_send_time_ms=NOW_MS + 800),
        ]
    )
    stats = outbox.stats(NOW_MS)
    assert (stats.pending, stats.in_flight, stats.bytes) == (4, 0, 1_000)
    assert stats.oldest_pending_created_ms == NOW_MS - 90
    assert stats.next_due_ms == NOW_MS - 5

    assert claim(outbox, limit=2) == [message_id(2), message_id(1)]
    assert outbox.mark_delivered(message_id(1), receipt(1))
    assert outbox.bury(message_id(2), "w1", "dead", NOW_MS)
    stats = outbox.stats(NOW_MS)
    assert (stats.pending, stats.delivered, stats.dead) == (2, 1, 1)
    assert stats.bytes == 200 + 300 + 400  # the tombstone holds no body; the dead one does
    assert stats.oldest_pending_created_ms == NOW_MS - 70

    claim(outbox, limit=1)  # 3
    assert outbox.stats(NOW_MS).in_flight == 1
    assert outbox.stats(NOW_MS + LEASE_MS).in_flight == 0  # its lease has ended


def test_scan_pages_in_seq_order_by_state(outbox: Outbox) -> None:
    stored = outbox.put([entry(n) for n in range(1, 8)])
    assert outbox.mark_delivered(message_id(2), receipt(2))
    assert outbox.mark_delivered(message_id(5), receipt(5))
    claim(outbox, limit=1)
    assert outbox.bury(message_id(1), "w1", "dead", NOW_MS)

    page = outbox.scan(None, 0, 3)
    assert ids(page) == [message_id(n) for n in (1, 2, 3)]
    assert [e.state for e in page] == [EntryState.DEAD, EntryState.DELIVERED, EntryState.PENDING]
    assert ids(outbox.scan(None, page[-1].seq, 3)) == [message_id(n) for n in (4, 5, 6)]
    assert ids(outbox.scan(None, stored[-1].seq, 3)) == []
    assert ids(outbox.scan(EntryState.PENDING, 0, 10)) == [message_id(n) for n in (3, 4, 6, 7)]
    assert ids(outbox.scan(EntryState.PENDING, stored[3].seq, 10)) == [message_id(6), message_id(7)]
    assert ids(outbox.scan(EntryState.DELIVERED, 0, 10)) == [message_id(2), message_id(5)]
    assert ids(outbox.scan(EntryState.DEAD, 0, 10)) == [message_id(1)]
    assert outbox.scan(None, 0, 10)[3] == outbox.get(message_id(4))


def test_scan_all_pages_through_more_than_one_page(outbox: Outbox) -> None:
    count = SCAN_PAGE_MAX + 5
    outbox.put([entry(n, body=b"x") for n in range(count)])
    assert outbox.mark_delivered(message_id(count - 1), receipt(0))
    every = list(outbox.scan_all())
    assert ids(every) == [message_id(n) for n in range(count)]
    assert [e.seq for e in every] == sorted(e.seq for e in every)
    assert len(list(outbox.scan_all(EntryState.PENDING))) == count - 1
    assert ids(list(outbox.scan_all(EntryState.DELIVERED))) == [message_id(count - 1)]


def test_export_jsonl_writes_one_line_per_entry_without_bodies(outbox: Outbox) -> None:
    outbox.put([entry(1), entry(2, group="g")])
    assert outbox.mark_delivered(message_id(1), receipt(1))
    out = io.StringIO()
    assert export_jsonl(outbox, out) == 2
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["message_id"] for r in rows] == [message_id(1), message_id(2)]
    assert all("body" not in r for r in rows)
    assert (rows[0]["state"], rows[0]["queue_offset"]) == ("DELIVERED", receipt(1).queue_offset)
    assert (rows[1]["state"], rows[1]["message_group"]) == ("PENDING", "g")
    assert rows[1]["body_size"] == len(entry(2).message.body)
    dead_only = io.StringIO()
    assert export_jsonl(outbox, dead_only, EntryState.DEAD) == 0


# -- the bound -----------------------------------------------------------------------------------


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


# -- lifecycle and the factory -------------------------------------------------------------------


def test_check_writable_until_closed(outbox: Outbox) -> None:
    outbox.check_writable()
    outbox.close()
    with pytest.raises(OutboxUnavailableError):
        outbox.check_writable()
    with pytest.raises(OutboxUnavailableError):
        outbox.put([entry(1)])
    answers = outbox.put_groups([[entry(2)], [entry(3)]])
    assert [type(a) for a in answers] == [OutboxUnavailableError] * 2
    outbox.close()  # twice is fine


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("rocksd:///tmp/x", "did you mean 'rocksdb'"),
        ("redsi://127.0.0.1:6379/0", "did you mean 'redis'"),
        ("memroy://", "did you mean 'memory'"),
        ("mysql+pymsql://root@127.0.0.1/test", "did you mean 'mysql+pymysql'"),
    ],
)
def test_factory_refuses_an_unknown_scheme_with_a_suggestion(url: str, hint: str) -> None:
    with pytest.raises(OutboxConfigError, match=re.escape(hint)) as refused:
        open_outbox(url)
    assert not refused.value.retriable
    assert "known: memory, mysql+pymysql, redis, rediss, rocksdb" in str(refused.value)


def test_factory_hides_the_password_of_a_refused_url() -> None:
    with pytest.raises(OutboxConfigError) as refused:
        open_outbox("ftp://user:s3cret@host/x")
    assert "s3cret" not in str(refused.value)
    assert "did you mean" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "memory://x",
        "memory://?a=1",
        "rocksdb://",
        "rocksdb://host/path",
        "rocksdb:///x?y=1",
        "redis://127.0.0.1:notaport/0",
        "redis://127.0.0.1:6379/zero",
        "redis://127.0.0.1:6379/0?prefix=",
        "redis://127.0.0.1:6379/0?socket_timeout=soon",
    ],
)
def test_backends_refuse_urls_they_cannot_use(url: str) -> None:
    with pytest.raises(OutboxConfigError):
        open_outbox(url)


def test_put_refuses_entries_that_are_not_new(outbox: Outbox) -> None:
    with pytest.raises(ValueError, match="PENDING"):
        outbox.put([replace(entry(1), state=EntryState.DEAD)])
    with pytest.raises(ValueError, match="leased"):
        outbox.put([replace(entry(1), lease_owner="w1", lease_until_ms=NOW_MS)])
    assert outbox.get(message_id(1)) is None


# -- every backend against the reference ---------------------------------------------------------


def test_random_operations_agree_with_the_reference(open_ob: OpenOutbox) -> None:
    """A seeded run of every operation on this backend and on MemoryOutbox side by side: each
    answer, and the whole outbox at the end, must be the same (seqs aside: a database may skip
    some). Requeues are of entries in no FIFO group: a requeued entry older than a group's
    leased head may become due at that lease's end rather than at once (backend docstrings)."""
    limits = OutboxLimits(outbox_entries_max=40, outbox_bytes_max=40 * 200)
    subject, reference = open_ob(limits), MemoryOutbox(limits)
    rng = random.Random(20_240_611)
    now = NOW_MS
    known: list[int] = []
    # What the run did, to be sure it did something of each kind.
    events: Counter[str] = Counter()
    history: list[str] = []  # for the failure message

    for step in range(400):
        now += rng.choice([0, 0, 1, 10, 100, LEASE_MS // 2])
        op = rng.choice(
            [
                *["put", "put_groups", "claim", "claim", "done", "done", "done_many"],
                *["requeue", "retry", "purge"],
            ]
        )
        call: Callable[[Outbox], object]
        if op == "put":
            call = methodcaller("put", random_put(rng, known, now))
        elif op == "put_groups":
            requests = [random_put(rng, known, now) for _ in range(rng.randint(1, 4))]
            call = methodcaller("put_groups", requests)
        elif op == "claim":
            owner = rng.choice(["w1", "w2"])
            call = methodcaller("claim_due", now, rng.randint(1, 4), LEASE_MS, owner)
        elif op == "done":
            action = rng.choice(["delivered", "reschedule", "bury", "release"])
            target = message_id(rng.choice(known)) if known else message_id(0)
            call = partial(
                finish, action=action, message_id=target, owner=rng.choice(["w1", "w2"]), now_ms=now
            )
        elif op == "done_many":
            picked = [rng.choice(known) if known else 0 for _ in range(rng.randint(1, 4))]
            deliveries = [(message_id(n), receipt(n, now)) for n in picked]
            call = methodcaller("mark_delivered_many", deliveries)
        elif op == "requeue":
            dead = [
                e.message_id for e in reference.scan_all(EntryState.DEAD) if e.fifo_group is None
            ]
            call = methodcaller("requeue", dead[:2], now)
        elif op == "retry":
            asked = [message_id(n) for n in rng.sample(known, min(len(known), 3))]
            call = methodcaller("retry_now", rng.choice([None, asked]), now)
        else:
            state = rng.choice([EntryState.DELIVERED, EntryState.DEAD])
            call = methodcaller("purge", state, now - rng.randint(0, 500))
        for check in (
            call,
            methodcaller("has_pending_group", TOPIC, "g1"),
            methodcaller("pending_groups"),
            partial(stats_but_next_due, now_ms=now),
        ):
            expected, got = answer(check, reference), answer(check, subject)
            history.append(f"{step} {describe(check)} -> {brief(expected)}")
            if check is call:
                events[f"{op}:{event(expected)}"] += 1
            assert got == expected, "\n".join(
                [*history[-12:], f"{brief(got)} from {subject.name}, not {brief(expected)}"]
            )
    everything = partial(scan_everything)
    final = answer(everything, subject)
    assert final == answer(everything, reference)
    assert isinstance(final, list)
    assert final
    for seen in (
        "put:full",
        "put:done",
        "put_groups:done",
        "claim:done",
        "done:done",
        "done_many:done",
        "requeue:done",
        "retry:done",
        "purge:done",
    ):
        assert events[seen] > 0, (seen, events)


def random_put(rng: random.Random, known: list[int], now: int) -> list[OutboxEntry]:
    """A put's entries: one to three, some of them stored already; ``known`` grows."""
    batch = []
    for _ in range(rng.randint(1, 3)):
        if known and rng.random() < 0.2:
            batch.append(entry(rng.choice(known)))  # already stored
            continue
        known.append(len(known) + 1)
        batch.append(
            entry(
                known[-1],
                next_send_time_ms=now + rng.choice([-50, 0, 30, 200]),
                group=rng.choice([None, None, "g1", "g2"]),
                body=bytes(rng.randint(1, 300)),
                created_ms=now - rng.randint(0, 1_000),
            )
        )
    return batch


def describe(call: Callable[[Outbox], object]) -> str:
    if isinstance(call, methodcaller):
        return repr(call).replace("operator.methodcaller", "")
    assert isinstance(call, partial)
    return f"{call.func.__name__}{call.keywords}"


def brief(result: object) -> object:
    """Entries by id and lease, the rest as it is: enough to follow a failing run."""
    if isinstance(result, list):
        return [brief(r) for r in result]
    if isinstance(result, OutboxEntry):
        e = result
        return (e.message_id[-4:], e.state.value, e.lease_owner, e.next_send_time_ms % 1_000_000)
    return result


def event(result: object) -> str:
    """done: the call did something; nothing: it did not; full: the bound refused it (all of
    it: a put_groups with a request stored did something)."""
    if result == "OutboxFullError":
        return "full"
    if isinstance(result, list):
        return "done" if any(r and r != "OutboxFullError" for r in result) else "nothing"
    return "done" if result else "nothing"


def finish(outbox: Outbox, action: str, message_id: str, owner: str, now_ms: int) -> bool:
    """What a resend worker does with an entry it holds (or believes it holds)."""
    if action == "delivered":
        return outbox.mark_delivered(message_id, receipt(0, now_ms))
    if action == "reschedule":
        return outbox.reschedule(message_id, owner, now_ms + 40, "busy", now_ms, maybe_stored=False)
    if action == "bury":
        return outbox.bury(message_id, owner, "dead", now_ms)
    return outbox.release(message_id, owner)


def stats_but_next_due(outbox: Outbox, now_ms: int) -> OutboxStats:
    # next_due_ms is left out: backends may count a leased or waiting FIFO entry differently.
    return replace(outbox.stats(now_ms), next_due_ms=None)


def scan_everything(outbox: Outbox) -> list[OutboxEntry]:
    return list(outbox.scan_all())


def answer(call: Callable[[Outbox], object], outbox: Outbox) -> object:
    """The call's result with seqs zeroed, or the name of the error it raised (or answered)."""
    try:
        return without_seqs(call(outbox))
    except OutboxFullError:
        return "OutboxFullError"


def without_seqs(result: object) -> object:
    if isinstance(result, OutboxFullError):
        return "OutboxFullError"
    if isinstance(result, OutboxEntry):
        return replace(result, seq=0)
    if isinstance(result, list):
        return [without_seqs(r) for r in result]
    return result
