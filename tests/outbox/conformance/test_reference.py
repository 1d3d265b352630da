"""Every backend against the reference, the memory outbox.

Each test runs on memory (the reference), RocksDB, Redis and MySQL, and proves one promise of
the contract (outbox/outbox.py):
- a seeded run of 400 random operations gives every answer the reference gives.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from operator import methodcaller

from outbox import (
    EntryState,
    Outbox,
    OutboxEntry,
    OutboxFullError,
    OutboxLimits,
    OutboxStats,
)
from outbox.backends.memory import MemoryOutbox
from tests.outbox.conftest import OpenOutbox
from tests.outbox.entries import LEASE_MS, NOW_MS, TOPIC, entry, message_id, receipt


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
        call = random_call(rng, op, known, now, reference)
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


def random_call(
    rng: random.Random, op: str, known: list[int], now: int, reference: Outbox
) -> Callable[[Outbox], object]:
    """One random operation of kind ``op``, to make on both outboxes."""
    if op == "put":
        return methodcaller("put", random_put(rng, known, now))
    if op == "put_groups":
        requests = [random_put(rng, known, now) for _ in range(rng.randint(1, 4))]
        return methodcaller("put_groups", requests)
    if op == "claim":
        owner = rng.choice(["w1", "w2"])
        return methodcaller("claim_due", now, rng.randint(1, 4), LEASE_MS, owner)
    if op == "done":
        action = rng.choice(["delivered", "reschedule", "bury", "release"])
        target = message_id(rng.choice(known)) if known else message_id(0)
        return partial(
            finish, action=action, message_id=target, owner=rng.choice(["w1", "w2"]), now_ms=now
        )
    if op == "done_many":
        picked = [rng.choice(known) if known else 0 for _ in range(rng.randint(1, 4))]
        deliveries = [(message_id(n), receipt(n, now)) for n in picked]
        return methodcaller("mark_delivered_many", deliveries)
    if op == "requeue":
        dead = [e.message_id for e in reference.scan_all(EntryState.DEAD) if e.fifo_group is None]
        return methodcaller("requeue", dead[:2], now)
    if op == "retry":
        asked = [message_id(n) for n in rng.sample(known, min(len(known), 3))]
        return methodcaller("retry_now", rng.choice([None, asked]), now)
    state = rng.choice([EntryState.DELIVERED, EntryState.DEAD])
    return methodcaller("purge", state, now - rng.randint(0, 500))


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
