"""The RocksDB outbox keeps each body apart from its entry's state (outbox/backends/rocksdb/
layout.py, codec.py):

- a put writes the body once; a claim, a reschedule, a release, a burial, expire_leases and a
  delivery write the same bytes whatever the body's size, fewer than the smallest body here:
  counted by RocksDB's own statistics (``rocksdb.bytes.written``, what the writes handed to the
  database), not timed;
- an outbox written by the previous layout (format 2 values, the body inline; no body keys)
  answers every operation as a new one does, bodies included, and each entry's first change
  moves its body to its own key, once: its next change writes no body again;
- no body key outlives its entry's body: a delivery and a purge delete it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from pathlib import Path

import rocksdict

from outbox import EntryState, Outbox, OutboxEntry, open_outbox
from outbox.backends.rocksdb.codec import body_bytes_apart, decode_entry
from outbox.backends.rocksdb.layout import BODY, ENTRY
from outbox.backends.rocksdb.outbox import RocksDBOutbox
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, message_id, receipt

BYTES_WRITTEN = "rocksdb.bytes.written"
SMALL_BODY = b"s" * 16
LARGE_BODY = b"L" * 65_536
# The state value and index keys a change writes: well under the smallest body that matters.
STATE_WRITE_BYTES_MAX = 1_024
_HEAD_V3_BYTES = struct.calcsize(">BBBB13q")


def open_rocksdb(path: Path) -> RocksDBOutbox:
    outbox = open_outbox(f"rocksdb://{path}?statistics=true&reserve_bytes=0")
    assert isinstance(outbox, RocksDBOutbox)
    return outbox


def written(outbox: RocksDBOutbox, change: Callable[[], object]) -> int:
    """The bytes ``change`` handed to the database."""
    before = outbox.ticker(BYTES_WRITTEN)
    change()
    return outbox.ticker(BYTES_WRITTEN) - before


def test_only_the_put_writes_the_body(tmp_path: Path) -> None:
    outbox = open_rocksdb(tmp_path / "outbox")
    try:
        small, large = entry(1, body=SMALL_BODY), entry(2, body=LARGE_BODY)
        assert written(outbox, lambda: outbox.put([large])) > len(LARGE_BODY)
        outbox.put([small])
        costs: dict[str, list[int]] = {}
        for e in (large, small):  # the large one is due first (lower seq)
            mid = e.message_id

            def claim(e: OutboxEntry = e) -> None:
                claimed = outbox.claim_due(NOW_MS, 1, LEASE_MS, "w1")
                assert [c.message_id for c in claimed] == [e.message_id]

            steps: list[tuple[str, Callable[[], object]]] = [
                ("claim", claim),
                ("reschedule", partial(outbox.reschedule, mid, "w1", NOW_MS, "busy", NOW_MS,
                                       maybe_stored=False)),
                ("claim again", claim),
                ("release", partial(outbox.release, mid, "w1")),
                ("claim, once more", claim),
                ("expire_leases", partial(outbox.expire_leases, "w1", NOW_MS)),
                ("claim, to bury", claim),
                ("bury", partial(outbox.bury, mid, "w1", "refused", NOW_MS)),
                ("requeue", partial(outbox.requeue, [mid], NOW_MS)),
                ("claim, to deliver", claim),
                ("deliver", partial(outbox.mark_delivered, mid, receipt(0))),
            ]  # fmt: skip
            for name, step in steps:
                costs.setdefault(name, []).append(written(outbox, step))
            got = outbox.get(mid)
            assert got is not None
            assert got.state is EntryState.DELIVERED
        for name, (large_cost, small_cost) in costs.items():
            assert large_cost == small_cost, f"{name}: the body's size showed in what it wrote"
            assert large_cost < STATE_WRITE_BYTES_MAX, f"{name} wrote {large_cost} bytes"
    finally:
        outbox.close()


def to_previous_layout(path: Path) -> int:
    """Rewrite every entry of the closed outbox at ``path`` as the previous layout held it:
    a format 2 value with the body inline, and no body key. How many were rewritten."""
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
    try:
        read = rocksdict.ReadOptions()
        read.set_iterate_upper_bound(ENTRY + b"\xff")
        rows = list(db.items(from_key=ENTRY, read_opt=read))
        for key, raw in rows:
            assert isinstance(key, bytes)
            assert isinstance(raw, bytes)
            body_key = BODY + key[len(ENTRY) :]
            body = db.get(body_key) or b"" if body_bytes_apart(raw) else b""
            # Format 2 is format 3 without the head's last integer, and the body at the end.
            v2 = b"\x02" + raw[1 : _HEAD_V3_BYTES - 8] + raw[_HEAD_V3_BYTES:] + body
            assert decode_entry(v2) == decode_entry(raw, body)
            db.put(key, v2)
            db.delete(body_key)
        return len(rows)
    finally:
        db.close()


def raw_layout(path: Path) -> tuple[dict[bytes, int], set[bytes]]:
    """Each entry key's format, and the message ids that have a body key."""
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
    try:
        formats: dict[bytes, int] = {}
        bodies: set[bytes] = set()
        for key, raw in db.items():
            assert isinstance(key, bytes)
            assert isinstance(raw, bytes)
            if key.startswith(ENTRY):
                formats[key[1:]] = raw[0]
                assert body_bytes_apart(raw) == 0 or (BODY + key[1:]) in db, key
            elif key.startswith(BODY):
                bodies.add(key[1:])
        return formats, bodies
    finally:
        db.close()


def prepare(outbox: Outbox) -> None:
    """Entries in every state: PENDING (plain, FIFO, leased), DEAD, DELIVERED."""
    outbox.put([entry(1), *(entry(n, group="g") for n in (2, 3)), entry(4), entry(5), entry(6)])
    outbox.put([entry(7, body=LARGE_BODY)])
    taken = outbox.claim_due(NOW_MS, 3, LEASE_MS, "old")  # 1, 2 (g's head), 4
    assert [e.message_id for e in taken] == [message_id(n) for n in (1, 2, 4)]
    assert outbox.bury(message_id(4), "old", "refused", NOW_MS)
    assert outbox.release(message_id(2), "old")
    (five,) = outbox.claim_due(NOW_MS, 1, LEASE_MS, "old")
    assert outbox.mark_delivered(five.message_id, receipt(5))


def every_operation(outbox: Outbox) -> list[object]:
    """Each operation of the contract once or more; their answers and the outbox after each."""
    now = NOW_MS + 1
    out: list[object] = [outbox.stats(now), list(outbox.scan_all())]
    claimed = outbox.claim_due(now, 10, LEASE_MS, "new")  # 1 over a dead lease, 2, 6, 7
    out.append(claimed)
    ids = [e.message_id for e in claimed]
    out.append(outbox.reschedule(ids[0], "new", now + 5, "busy", now, maybe_stored=True))
    out.append(outbox.release(ids[1], "new"))
    out.append(outbox.bury(ids[2], "new", "refused", now))
    out.append(outbox.mark_delivered_many([(ids[3], receipt(7))]))
    out.append(outbox.requeue(None, now + 1))
    out.append(outbox.retry_now(None, now + 2))
    out.append(outbox.expire_leases("new", now + 3))
    out.append(outbox.claim_due(now + 10, 10, LEASE_MS, "last"))
    out.append(outbox.purge(EntryState.DELIVERED, now + 100))
    out += [outbox.stats(now + 10), list(outbox.scan_all()), outbox.get(message_id(7))]
    for _ in range(10):  # a FIFO group's next entry is due once its head is delivered
        for e in outbox.claim_due(now + 2 * LEASE_MS, 10, LEASE_MS, "end"):
            out.append(outbox.mark_delivered(e.message_id, receipt(e.seq)))
    out.append(outbox.purge(EntryState.DELIVERED, now + 2 * LEASE_MS))
    out += [outbox.stats(now + 2 * LEASE_MS), list(outbox.scan_all())]
    return out


def test_an_outbox_of_the_previous_layout_answers_every_operation_as_a_new_one(
    tmp_path: Path,
) -> None:
    answers = {}
    for name in ("new", "previous"):
        path = tmp_path / name
        with open_rocksdb(path) as outbox:
            prepare(outbox)
        if name == "previous":
            assert to_previous_layout(path) == 7
            formats, bodies = raw_layout(path)
            assert set(formats.values()) == {2}
            assert not bodies
        with open_rocksdb(path) as outbox:
            answers[name] = every_operation(outbox)
    assert answers["previous"] == answers["new"]
    assert answers["new"][-1] == [], "everything was delivered and purged"
    formats, bodies = raw_layout(tmp_path / "previous")
    assert (formats, bodies) == raw_layout(tmp_path / "new") == ({}, set())


def test_the_first_change_moves_a_body_once_and_a_purge_leaves_no_body_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox"
    with open_rocksdb(path) as outbox:
        outbox.put([entry(1, body=LARGE_BODY), entry(2, body=LARGE_BODY)])
    to_previous_layout(path)
    outbox = open_rocksdb(path)
    try:
        moved = written(outbox, lambda: outbox.claim_due(NOW_MS, 1, LEASE_MS, "w"))
        assert moved > len(LARGE_BODY), "the claim moved the body to its own key"
        again = written(
            outbox,
            lambda: outbox.reschedule(message_id(1), "w", NOW_MS, "x", NOW_MS, maybe_stored=False),
        )
        assert again < STATE_WRITE_BYTES_MAX
        got = outbox.get(message_id(1))
        assert got is not None
        assert got.message.body == LARGE_BODY
        (claimed,) = outbox.claim_due(NOW_MS, 1, LEASE_MS, "w")
        assert outbox.bury(claimed.message_id, "w", "refused", NOW_MS)
    finally:
        outbox.close()
    formats, bodies = raw_layout(path)
    assert formats == {message_id(1).encode(): 3, message_id(2).encode(): 2}
    assert bodies == {message_id(1).encode()}
    with open_rocksdb(path) as outbox:
        assert outbox.purge(EntryState.DEAD, NOW_MS + 1) == 1
        (two,) = outbox.claim_due(NOW_MS, 1, LEASE_MS, "w")
        assert two.message.body == LARGE_BODY
        assert outbox.mark_delivered(two.message_id, receipt(2))
    formats, bodies = raw_layout(path)
    assert formats == {message_id(2).encode(): 3}
    assert bodies == set(), "the delivery and the purge deleted the body keys"
