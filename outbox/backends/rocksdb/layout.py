"""The RocksDB outbox's keys, and what it keeps in memory about them
(outbox/backends/rocksdb/outbox.py).

One column family; integers are big-endian unsigned 64-bit, so byte order is numeric order and
"what is due" is one range scan::

    e <message_id>                         → the entry (encode_entry, below), every state
    d <next_send_time_ms> <seq>            → message_id: PENDING entries that a claim may take
                                             now or later: not leased, and either in no FIFO
                                             group or their group's head
    g <len16 topic> <len16 group> <seq>    → message_id: every PENDING entry of a FIFO group
    s <P|D|X> <seq>                        → <body_bytes> <lease_until_ms> <message_id>: every
                                             entry by state (scan; the counters and leases at open)
    c <created_ms> <seq>                   → message_id: PENDING entries by age (stats)
    t <D|X> <state_changed_ms> <seq>       → message_id: DELIVERED / DEAD entries (purge)
    m:seq                                  → the last seq assigned
    m:probe                                → check_writable's synced write

The entry value (``encode_entry``; every integer big-endian, the lengths unsigned 32-bit)::

    version=1 u8 | flags u8 | state u8 | cause u8
    seq | created_ms | next_send_time_ms | state_changed_ms | lease_until_ms | born_timestamp_ms
        | delivery_timestamp_ms | queue_id | queue_offset | delivered_ms | attempts   (signed 64)
    8 lengths, then the 8 UTF-8 strings: message_id, topic, tag, message_group, lease_owner,
        last_error, keys (a JSON list, empty when none), properties (a JSON object, or empty)
    the body, to the end of the value

flags: 1 maybe_stored, 2 has a receipt, 4 the receipt is durable, 8 has a delivery timestamp,
16 has a tag, 32 has a message group, 64 has a lease owner. Not JSON: a put encodes each entry on
the committer thread, and this costs a fifth of ``OutboxEntry.to_bytes``.

Why it stays fast after many deliveries: deletes leave tombstones that an ordered scan must step
over (78 ms to the first live key after 100k deletes: ENVIRONMENT.md).
- A claim takes a contiguous stretch from the front of ``d`` and deletes it with one range
  tombstone, which iterators skip whole.
- Leased entries are not in ``d``: leases are kept in memory (a heap by lease end; persisted in the
  entry and its ``s`` value), so delivering a leased entry deletes nothing in ``d``.
- Tombstones and dead entries are in their own ranges; a due scan never walks them.
- Each ordered index has a floor in memory, a key below which nothing is live: scans start there,
  so the point deletes that remain (``c``, ``s``) are stepped over about once, not on every call.
"""

from __future__ import annotations

import heapq
import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import cast

import rocksdict

from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry, OutboxMessage, SpoolCause
from outbox.errors import OutboxConfigError

U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")
# The value of an ``s`` key: body bytes (for the bound) and lease end (0: none), then the id.
STATE_VALUE = struct.Struct(">QQ")

ENTRY, DUE, GROUP, STATE, CREATED, CHANGED = b"e", b"d", b"g", b"s", b"c", b"t"
STATE_CODE = {EntryState.PENDING: b"P", EntryState.DELIVERED: b"D", EntryState.DEAD: b"X"}
PENDING_STATE = STATE + STATE_CODE[EntryState.PENDING]
SEQ_KEY = b"m:seq"
PROBE_KEY = b"m:probe"
# Sorts after every key of an index made of a prefix and 8-byte integers.
TOP = b"\xff" * 17
# Indexes whose floor is kept.
FLOOR_PREFIXES = (
    DUE,
    CREATED,
    *(STATE + c for c in STATE_CODE.values()),
    CHANGED + b"D",
    CHANGED + b"X",
)
GROUP_NAME_BYTES_MAX = 0xFFFF
# Stale heap items (leases that changed) beyond this many times the live leases: rebuild it.
LEASE_HEAP_SLACK = 2
# The in-memory end of a lease whose holder is gone (found at open): before any claim's now.
DEAD_LEASE_UNTIL_MS = 0


def u64(n: int) -> bytes:
    if not 0 <= n < 1 << 64:
        raise ValueError(f"{n} is not a time in ms or a seq (0 <= n < 2**64)")
    return U64.pack(n)


def group_key(topic: str, message_group: str) -> bytes:
    """The ``g`` keys' prefix for one FIFO group; lengths first, so no group's is another's."""
    topic_b, group_b = topic.encode(), message_group.encode()
    if max(len(topic_b), len(group_b)) > GROUP_NAME_BYTES_MAX:
        raise ValueError(f"topic or message group longer than {GROUP_NAME_BYTES_MAX} bytes")
    return GROUP + _U16.pack(len(topic_b)) + topic_b + _U16.pack(len(group_b)) + group_b


def group_of_key(prefix: bytes) -> tuple[str, str]:
    """The (topic, message group) that ``group_key`` made ``prefix`` of."""
    (topic_bytes,) = _U16.unpack_from(prefix, len(GROUP))
    topic_end = len(GROUP) + _U16.size + topic_bytes
    (group_bytes,) = _U16.unpack_from(prefix, topic_end)
    group_start = topic_end + _U16.size
    assert len(prefix) == group_start + group_bytes, prefix
    return prefix[len(GROUP) + _U16.size : topic_end].decode(), prefix[group_start:].decode()


def group_prefix(entry: OutboxEntry) -> bytes | None:
    group = entry.fifo_group
    return None if group is None else group_key(*group)


def due_key(entry: OutboxEntry) -> bytes:
    assert entry.lease_owner is None, entry
    return DUE + u64(entry.next_send_time_ms) + u64(entry.seq)


def state_key(state: EntryState, seq: int) -> bytes:
    return STATE + STATE_CODE[state] + u64(seq)


def state_value(entry: OutboxEntry) -> bytes:
    lease_until_ms = entry.lease_until_ms if entry.lease_owner is not None else 0
    return STATE_VALUE.pack(entry.body_bytes, lease_until_ms) + entry.message_id.encode()


def created_key(entry: OutboxEntry) -> bytes:
    return CREATED + u64(entry.created_ms) + u64(entry.seq)


def changed_key(entry: OutboxEntry) -> bytes:
    return CHANGED + STATE_CODE[entry.state] + u64(entry.state_changed_ms) + u64(entry.seq)


_ENTRY_VERSION = 1
_ENTRY_HEAD = struct.Struct(">BBBB11q")
_ENTRY_LENGTHS = struct.Struct(">8I")
_STATES = tuple(EntryState)
_STATE_INDEX = {s: i for i, s in enumerate(_STATES)}
_CAUSES = tuple(SpoolCause)
_CAUSE_INDEX = {c: i for i, c in enumerate(_CAUSES)}
(_MAYBE_STORED, _RECEIPT, _DURABLE, _DELIVERY_TS, _TAG, _GROUP, _OWNER) = (1, 2, 4, 8, 16, 32, 64)


def encode_entry(entry: OutboxEntry) -> bytes:
    m = entry.message
    r = entry.receipt
    flags = (
        (_MAYBE_STORED if entry.maybe_stored else 0)
        | (_RECEIPT | (_DURABLE if r.durable else 0) if r is not None else 0)
        | (_DELIVERY_TS if m.delivery_timestamp_ms is not None else 0)
        | (_TAG if m.tag is not None else 0)
        | (_GROUP if m.message_group is not None else 0)
        | (_OWNER if entry.lease_owner is not None else 0)
    )
    strings = [
        m.message_id.encode(),
        m.topic.encode(),
        (m.tag or "").encode(),
        (m.message_group or "").encode(),
        (entry.lease_owner or "").encode(),
        entry.last_error.encode(),
        json.dumps(list(m.keys)).encode() if m.keys else b"",
        json.dumps(dict(m.properties)).encode() if m.properties else b"",
    ]
    head = _ENTRY_HEAD.pack(
        _ENTRY_VERSION,
        flags,
        _STATE_INDEX[entry.state],
        _CAUSE_INDEX[entry.cause],
        entry.seq,
        entry.created_ms,
        entry.next_send_time_ms,
        entry.state_changed_ms,
        entry.lease_until_ms,
        m.born_timestamp_ms,
        m.delivery_timestamp_ms or 0,
        r.queue_id if r is not None else 0,
        r.queue_offset if r is not None else 0,
        r.delivered_ms if r is not None else 0,
        entry.attempts,
    )
    return b"".join([head, _ENTRY_LENGTHS.pack(*map(len, strings)), *strings, m.body])


def decode_entry(raw: bytes) -> OutboxEntry:
    (version, flags, state, cause, seq, created_ms, next_send_time_ms, state_changed_ms,
     lease_until_ms, born_ms, delivery_ms, queue_id, queue_offset, delivered_ms,
     attempts) = _ENTRY_HEAD.unpack_from(raw)  # fmt: skip
    if version != _ENTRY_VERSION:
        raise OutboxConfigError(f"an outbox entry of format {version}, not {_ENTRY_VERSION}")
    pos = _ENTRY_HEAD.size + _ENTRY_LENGTHS.size
    strings = []
    for length in _ENTRY_LENGTHS.unpack_from(raw, _ENTRY_HEAD.size):
        strings.append(raw[pos : pos + length].decode())
        pos += length
    message_id, topic, tag, group, owner, last_error, keys, properties = strings
    message = OutboxMessage(
        topic=topic,
        body=raw[pos:],
        message_id=message_id,
        tag=tag if flags & _TAG else None,
        keys=tuple(json.loads(keys)) if keys else (),
        message_group=group if flags & _GROUP else None,
        delivery_timestamp_ms=delivery_ms if flags & _DELIVERY_TS else None,
        properties=json.loads(properties) if properties else {},
        born_timestamp_ms=born_ms,
    )
    receipt = None
    if flags & _RECEIPT:
        receipt = DeliveryReceipt(queue_id, queue_offset, delivered_ms, bool(flags & _DURABLE))
    return OutboxEntry(
        message=message,
        cause=_CAUSES[cause],
        created_ms=created_ms,
        next_send_time_ms=next_send_time_ms,
        state=_STATES[state],
        maybe_stored=bool(flags & _MAYBE_STORED),
        attempts=attempts,
        last_error=last_error,
        seq=seq,
        lease_owner=owner if flags & _OWNER else None,
        lease_until_ms=lease_until_ms,
        state_changed_ms=state_changed_ms,
        receipt=receipt,
    )


def expect(entry: OutboxEntry | None, state: EntryState, where: object) -> OutboxEntry:
    """An index pointed at this entry: it must exist and be in the index's state."""
    assert entry is not None, where
    assert entry.state is state, (where, entry)
    return entry


def _floor_prefix(key: bytes) -> bytes | None:
    head = key[:1]
    if head in (DUE, CREATED):
        return head
    if head in (STATE, CHANGED):
        return key[:2]
    return None


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
    """One WriteBatch, and the entries it writes so that later steps of the batch read them."""

    def __init__(self, db: rocksdict.Rdict, floors: dict[bytes, bytes]) -> None:
        self.batch = rocksdict.WriteBatch(raw_mode=True)
        self._db = db
        self._floors = floors
        self._entries: dict[str, OutboxEntry | None] = {}

    def get(self, message_id: str) -> OutboxEntry | None:
        if message_id in self._entries:
            return self._entries[message_id]
        raw = self._db.get(ENTRY + message_id.encode())
        return None if raw is None else decode_entry(raw)

    def prefetch(self, message_ids: Iterable[str]) -> None:
        """Read these entries ahead of the ``get`` calls to come.

        One get each, not rocksdict's multi-get: the multi-get gives the GIL up, and on a put's
        committer thread, with every waiting caller runnable, taking it back costs far more.
        """
        for message_id in message_ids:
            if message_id not in self._entries:
                raw = self._db.get(ENTRY + message_id.encode())
                self._entries[message_id] = None if raw is None else decode_entry(raw)

    def put_entry(self, entry: OutboxEntry) -> None:
        self._entries[entry.message_id] = entry
        self.batch.put(ENTRY + entry.message_id.encode(), encode_entry(entry))

    def delete_entry(self, message_id: str) -> None:
        self._entries[message_id] = None
        self.batch.delete(ENTRY + message_id.encode())

    def put(self, key: bytes, value: bytes) -> None:
        self.batch.put(key, value)
        prefix = _floor_prefix(key)
        if prefix is not None and key < self._floors[prefix]:
            self._floors[prefix] = key

    def put_indexed(self, prefix: bytes, key: bytes, value: bytes) -> None:
        """``put`` for a key of the index ``prefix`` (one with a floor), said by the caller."""
        self.batch.put(key, value)
        self._floors[prefix] = min(self._floors[prefix], key)

    def delete(self, key: bytes) -> None:
        self.batch.delete(key)
        prefix = _floor_prefix(key)
        if prefix is not None and key == self._floors[prefix]:
            self._floors[prefix] = key + b"\x00"

    def delete_stretch(self, first: bytes, last: bytes) -> None:
        """Delete keys ``first`` … ``last`` of one index, every one of them just read, as one
        range tombstone that iterators skip whole."""
        prefix = _floor_prefix(first)
        assert prefix is not None, first
        assert _floor_prefix(last) == prefix, (first, last)
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
