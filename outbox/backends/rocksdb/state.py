"""What the RocksDB outbox keeps in memory about its indexes (``State``, rebuilt from them at
open by ``load_state``), and ``Txn``, the WriteBatch every change is made in. Keys: layout.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import cast

import rocksdict

from outbox.backends.rocksdb.codec import body_bytes_apart, decode_entry, encode_entry
from outbox.backends.rocksdb.layout import (
    BODY,
    ENTRY,
    FLOOR_PREFIXES,
    GROUP,
    SEQ_KEY,
    STATE,
    STATE_CODE,
    STATE_VALUE,
    TOP,
    U64,
    floor_prefix,
)
from outbox.entry import EntryState, OutboxEntry

# Stale heap items (leases that changed) beyond this many times the live leases: rebuild it.
LEASE_HEAP_SLACK = 2
# The in-memory end of a lease whose holder is gone (found at open): before any claim's now.
DEAD_LEASE_UNTIL_MS = 0


@dataclass(slots=True)
class State:
    """What the outbox keeps in memory; all of it is rebuilt from the indexes at open."""

    last_seq: int = 0
    pending: int = 0
    dead: int = 0
    delivered: int = 0
    # Body bytes of PENDING and DEAD entries: what counts against outbox_bytes_max.
    body_bytes: int = 0
    # Group prefix (a ``g`` key without its seq) → (seq, message_id) of the group's head.
    heads: dict[bytes, tuple[int, str]] = field(default_factory=dict)
    # message_id → (lease_until_ms, seq) of every PENDING entry with a lease owner.
    leases: dict[str, tuple[int, int]] = field(default_factory=dict)
    # (lease_until_ms, seq, message_id), soonest first; an item is stale once ``leases`` differs.
    lease_heap: list[tuple[int, int, str]] = field(default_factory=list)
    # Index prefix → a key below which the index holds nothing live.
    floors: dict[bytes, bytes] = field(default_factory=lambda: {p: p for p in FLOOR_PREFIXES})

    def lease(self, entry: OutboxEntry) -> None:
        if entry.lease_owner is None:
            self.leases.pop(entry.message_id, None)
            return
        self.leases[entry.message_id] = (entry.lease_until_ms, entry.seq)
        self.arm(entry.message_id)

    def end_lease(self, message_id: str) -> None:
        """The lease's holder is gone: the entry is claimable at once, as over any expired
        lease (in memory only; the entry and its ``s`` value keep the old lease end)."""
        _, seq = self.leases[message_id]
        self.leases[message_id] = (DEAD_LEASE_UNTIL_MS, seq)
        self.arm(message_id)

    def arm(self, message_id: str) -> None:
        """Put a lease on the heap, so that a claim finds it once it has expired."""
        lease_until_ms, seq = self.leases[message_id]
        heapq.heappush(self.lease_heap, (lease_until_ms, seq, message_id))
        if len(self.lease_heap) > LEASE_HEAP_SLACK * len(self.leases) + 1_000:
            self.lease_heap = [(until, seq, mid) for mid, (until, seq) in self.leases.items()]
            heapq.heapify(self.lease_heap)

    def live_lease(self, item: tuple[int, int, str]) -> bool:
        until, seq, message_id = item
        return self.leases.get(message_id) == (until, seq)


class Txn:
    """One WriteBatch, and the entries it writes so that later steps of the batch read them.

    An entry's body is written once, by the put (``put_entry`` of an entry not stored yet), and
    deleted with the body (a delivery) or the entry (a purge); any other ``put_entry`` writes
    the entry's value alone. An entry of an older format, its body inline, has it moved to its
    own key by its first ``put_entry``.
    """

    def __init__(self, db: rocksdict.Rdict, floors: dict[bytes, bytes]) -> None:
        self.batch = rocksdict.WriteBatch(raw_mode=True)
        self._db = db
        self._floors = floors
        self._entries: dict[str, OutboxEntry | None] = {}
        # Message id → whether its body key holds the body, as of this batch.
        self._apart: dict[str, bool] = {}

    def get(self, message_id: str) -> OutboxEntry | None:
        if message_id not in self._entries:
            self._entries[message_id] = self._read(message_id)
        return self._entries[message_id]

    def prefetch(self, message_ids: Iterable[str]) -> None:
        """Read these entries ahead of the ``get`` calls to come.

        One get each, not rocksdict's multi-get: the multi-get gives the GIL up, and on a put's
        committer thread, with every waiting caller runnable, taking it back costs far more.
        """
        for message_id in message_ids:
            if message_id not in self._entries:
                self._entries[message_id] = self._read(message_id)

    def put_entry(self, entry: OutboxEntry) -> None:
        message_id = entry.message_id
        key = message_id.encode()
        apart = self._apart.get(message_id, False)
        keeps_body = bool(entry.message.body)  # a tombstone's is b""
        if apart and not keeps_body:
            self.batch.delete(BODY + key)
        elif keeps_body and not apart:
            self.batch.put(BODY + key, entry.message.body)  # a put's, or an older format's
        self._apart[message_id] = keeps_body
        self._entries[message_id] = entry
        self.batch.put(ENTRY + key, encode_entry(entry))

    def delete_entry(self, message_id: str) -> None:
        key = message_id.encode()
        if self._apart.get(message_id, False):
            self.batch.delete(BODY + key)
        self._apart[message_id] = False
        self._entries[message_id] = None
        self.batch.delete(ENTRY + key)

    def _read(self, message_id: str) -> OutboxEntry | None:
        key = message_id.encode()
        raw = self._db.get(ENTRY + key)
        if raw is None:
            return None
        body = b""
        if body_bytes_apart(raw):
            body = self._db.get(BODY + key) or b""
            self._apart[message_id] = True
        return decode_entry(raw, body)

    def put(self, key: bytes, value: bytes) -> None:
        self.batch.put(key, value)
        prefix = floor_prefix(key)
        if prefix is not None and key < self._floors[prefix]:
            self._floors[prefix] = key

    def put_indexed(self, prefix: bytes, key: bytes, value: bytes) -> None:
        """``put`` for a key of the index ``prefix`` (one with a floor), said by the caller."""
        self.batch.put(key, value)
        self._floors[prefix] = min(self._floors[prefix], key)

    def delete(self, key: bytes) -> None:
        self.batch.delete(key)
        prefix = floor_prefix(key)
        if prefix is not None and key == self._floors[prefix]:
            self._floors[prefix] = key + b"\x00"

    def delete_stretch(self, first: bytes, last: bytes) -> None:
        """Delete keys ``first`` … ``last`` of one index, every one of them just read, as one
        range tombstone that iterators skip whole."""
        prefix = floor_prefix(first)
        assert prefix is not None, first
        assert floor_prefix(last) == prefix, (first, last)
        end = last + b"\x00"
        self.batch.delete_range(first, end)
        if first <= self._floors[prefix] < end:
            self._floors[prefix] = end


def index_items(
    db: rocksdict.Rdict,
    floors: dict[bytes, bytes],
    prefix: bytes,
    lower: bytes,
    upper: bytes,
    limit: int,
) -> list[tuple[bytes, bytes]]:
    """Up to ``limit`` live keys of one index in [lower, upper), from its floor if higher."""
    floor = floors.get(prefix)
    start = lower if floor is None else max(lower, floor)
    read_options = rocksdict.ReadOptions()
    read_options.set_iterate_upper_bound(upper)
    found: list[tuple[bytes, bytes]] = []
    for key, value in db.items(from_key=start, read_opt=read_options):
        found.append((cast(bytes, key), cast(bytes, value)))
        if len(found) >= limit:
            break
    if floor is not None and start == floor:
        # Nothing is live from the floor to the first key found (or to ``upper``).
        floors[prefix] = found[0][0] if found else max(floor, upper)
    return found


def load_state(db: rocksdict.Rdict) -> State:
    """The in-memory state, rebuilt from the ``s`` and ``g`` indexes and the seq counter."""
    state = State()
    raw_seq = db.get(SEQ_KEY)
    state.last_seq = U64.unpack(raw_seq)[0] if raw_seq is not None else 0
    counts = {}
    for entry_state, code in STATE_CODE.items():
        count = 0
        for key, value in _whole_index(db, STATE + code):
            body_bytes, lease_until_ms = STATE_VALUE.unpack_from(value)
            seq = U64.unpack_from(key, 2)[0]
            assert seq <= state.last_seq, key
            count += 1
            if entry_state is not EntryState.DELIVERED:
                state.body_bytes += body_bytes
            if lease_until_ms:
                message_id = value[STATE_VALUE.size :].decode()
                state.leases[message_id] = (lease_until_ms, seq)
                state.lease_heap.append((lease_until_ms, seq, message_id))
        counts[entry_state] = count
    state.pending = counts[EntryState.PENDING]
    state.delivered = counts[EntryState.DELIVERED]
    state.dead = counts[EntryState.DEAD]
    heapq.heapify(state.lease_heap)
    for key, value in _whole_index(db, GROUP):
        group = key[:-8]
        if group not in state.heads:  # keys come in seq order: the first is the head
            state.heads[group] = (U64.unpack(key[-8:])[0], value.decode())
    return state


def _whole_index(db: rocksdict.Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    read_options = rocksdict.ReadOptions()
    read_options.set_iterate_upper_bound(prefix + TOP)
    for key, value in db.items(from_key=prefix, read_opt=read_options):
        yield cast(bytes, key), cast(bytes, value)
