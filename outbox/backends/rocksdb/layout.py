"""The RocksDB outbox's keys (outbox/backends/rocksdb/outbox.py): what each index holds, and
how keys are made. The entry value is codec.py's; what is kept in memory about the indexes is
state.py's.

One column family; integers are big-endian unsigned 64-bit, so byte order is numeric order and
"what is due" is one range scan::

    e <message_id>                         → the entry without its body (codec.py), every
                                             state: what every change rewrites
    b <message_id>                         → the body of a PENDING or DEAD entry: written by
                                             the put, deleted by the delivery or the purge,
                                             never rewritten (an entry of an older format holds
                                             its body in its ``e`` value until its first change)
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

Why it stays fast after many deliveries: deletes leave tombstones that an ordered scan must step
over, so a scan from the front slows with every delivery unless the front is cut away whole.
- A claim takes a contiguous stretch from the front of ``d`` and deletes it with one range
  tombstone, which iterators skip whole.
- Leased entries are not in ``d``: leases are kept in memory (a heap by lease end; persisted in the
  entry and its ``s`` value), so delivering a leased entry deletes nothing in ``d``.
- Tombstones and dead entries are in their own ranges; a due scan never walks them.
- Each ordered index has a floor in memory, a key below which nothing is live: scans start there,
  so the point deletes that remain (``c``, ``s``) are stepped over about once, not on every call.
"""

from __future__ import annotations

import struct

from outbox.entry import EntryState, OutboxEntry

U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")
# The value of an ``s`` key: body bytes (for the bound) and lease end (0: none), then the id.
STATE_VALUE = struct.Struct(">QQ")

ENTRY, BODY, DUE, GROUP, STATE, CREATED, CHANGED = b"e", b"b", b"d", b"g", b"s", b"c", b"t"
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


def expect(entry: OutboxEntry | None, state: EntryState, where: object) -> OutboxEntry:
    """An index pointed at this entry: it must exist and be in the index's state."""
    assert entry is not None, where
    assert entry.state is state, (where, entry)
    return entry


def floor_prefix(key: bytes) -> bytes | None:
    head = key[:1]
    if head in (DUE, CREATED):
        return head
    if head in (STATE, CHANGED):
        return key[:2]
    return None
