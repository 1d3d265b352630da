"""The RocksDB outbox's entry value: ``encode_entry`` and ``decode_entry``.

The entry value (``encode_entry``; every integer big-endian, the lengths unsigned 32-bit)::

    version=3 u8 | flags u8 | state u8 | cause u8
    seq | created_ms | next_send_time_ms | state_changed_ms | lease_until_ms | born_timestamp_ms
        | delivery_timestamp_ms | queue_id | queue_offset | delivered_ms | attempts
        | delivery_timeout_ms | body_bytes   (signed 64)
    8 lengths, then the 8 UTF-8 strings: message_id, topic, tag, message_group, lease_owner,
        last_error, keys (a JSON list, empty when none), properties (a JSON object, or empty)

flags: 1 maybe_stored, 2 has a receipt, 4 the receipt is durable, 8 has a delivery timestamp,
16 has a tag, 32 has a message group, 64 has a lease owner, 128 has a delivery timeout.

The body is not in the value: it is the value of its own key (layout.py's ``b``), written once
by the put and deleted by the delivery (or the purge), so that a claim, a reschedule, a release
or a burial rewrites only this value, whatever the body's size. ``body_bytes`` is that key's
length (0: there is none), checked on every read.

Older formats, still read (``decode_entry``) and rewritten as version 3 by the first change of
their entry (``body_inline``: the body is then moved to its own key, once):
- version 2: the head without ``body_bytes``, and the body inline, after the strings, to the end
  of the value;
- version 1, written before messages had a delivery timeout: version 2 without
  ``delivery_timeout_ms``.

Not JSON: a put encodes each entry on the committer thread, and this costs a fifth of
``OutboxEntry.to_bytes``.
"""

from __future__ import annotations

import json
import struct

from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry, OutboxMessage, SpoolCause
from outbox.errors import OutboxConfigError, OutboxUnavailableError

_ENTRY_VERSION = 3
_HEADS = {
    3: struct.Struct(">BBBB13q"),
    2: struct.Struct(">BBBB12q"),
    1: struct.Struct(">BBBB11q"),
}
_ENTRY_HEAD = _HEADS[_ENTRY_VERSION]
_BODY_BYTES = struct.Struct(">q")
_ENTRY_LENGTHS = struct.Struct(">8I")
_STATES = tuple(EntryState)
_STATE_INDEX = {s: i for i, s in enumerate(_STATES)}
_CAUSES = tuple(SpoolCause)
_CAUSE_INDEX = {c: i for i, c in enumerate(_CAUSES)}
(_MAYBE_STORED, _RECEIPT, _DURABLE, _DELIVERY_TS, _TAG, _GROUP, _OWNER, _TIMEOUT) = (
    1,
    2,
    4,
    8,
    16,
    32,
    64,
    128,
)


def encode_entry(entry: OutboxEntry) -> bytes:
    """The entry's value, without its body (stored apart when it has one: ``body_bytes``)."""
    m = entry.message
    r = entry.receipt
    flags = (
        (_MAYBE_STORED if entry.maybe_stored else 0)
        | (_RECEIPT | (_DURABLE if r.durable else 0) if r is not None else 0)
        | (_DELIVERY_TS if m.delivery_timestamp_ms is not None else 0)
        | (_TAG if m.tag is not None else 0)
        | (_GROUP if m.message_group is not None else 0)
        | (_OWNER if entry.lease_owner is not None else 0)
        | (_TIMEOUT if m.delivery_timeout_ms is not None else 0)
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
        m.delivery_timeout_ms or 0,
        len(m.body),
    )
    return b"".join([head, _ENTRY_LENGTHS.pack(*map(len, strings)), *strings])


def body_inline(raw: bytes) -> bool:
    """The value holds its body itself (an older format): none is stored apart."""
    return _head(raw) is not _ENTRY_HEAD


def body_bytes_apart(raw: bytes) -> int:
    """The length of the body stored under the entry's own body key (0: none is)."""
    if _head(raw) is not _ENTRY_HEAD:
        return 0
    (body_bytes,) = _BODY_BYTES.unpack_from(raw, _ENTRY_HEAD.size - _BODY_BYTES.size)
    return int(body_bytes)


def decode_entry(raw: bytes, body: bytes = b"") -> OutboxEntry:
    """The entry of a value of any format; ``body`` is the value of its body key (read when
    ``body_bytes_apart`` is not 0; a value of an older format holds its body itself)."""
    head = _head(raw)
    (_, flags, state, cause, seq, created_ms, next_send_time_ms, state_changed_ms,
     lease_until_ms, born_ms, delivery_ms, queue_id, queue_offset, delivered_ms,
     attempts, *tail) = head.unpack_from(raw)  # fmt: skip
    pos = head.size + _ENTRY_LENGTHS.size
    strings = []
    for length in _ENTRY_LENGTHS.unpack_from(raw, head.size):
        strings.append(raw[pos : pos + length].decode())
        pos += length
    message_id, topic, tag, group, owner, last_error, keys, properties = strings
    if head is _ENTRY_HEAD:
        if len(body) != tail[1] or pos != len(raw):
            raise OutboxUnavailableError(
                f"outbox entry {message_id}: its body key holds {len(body)} bytes, its value "
                f"says {tail[1]} (a damaged database)"
            )
    else:
        body = raw[pos:]
    message = OutboxMessage(
        topic=topic,
        body=body,
        message_id=message_id,
        tag=tag if flags & _TAG else None,
        keys=tuple(json.loads(keys)) if keys else (),
        message_group=group if flags & _GROUP else None,
        delivery_timestamp_ms=delivery_ms if flags & _DELIVERY_TS else None,
        properties=json.loads(properties) if properties else {},
        born_timestamp_ms=born_ms,
        delivery_timeout_ms=tail[0] if flags & _TIMEOUT else None,
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


def _head(raw: bytes) -> struct.Struct:
    head = _HEADS.get(raw[0])
    if head is None:
        raise OutboxConfigError(f"an outbox entry of format {raw[0]}, not {_ENTRY_VERSION}")
    return head
