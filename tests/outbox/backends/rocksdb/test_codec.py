"""The RocksDB outbox's entry value (outbox/backends/rocksdb/codec.py):

- every field round-trips, with the body beside the value (format 3), not in it;
- values of the older formats, written by the code of their time (the bytes below), are read
  whole, body included: format 2 (the body inline) and format 1 (before messages had a
  delivery timeout);
- an unknown format and a body key that does not match the value are refused, saying what.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from outbox import DeliveryReceipt, OutboxConfigError, OutboxEntry, OutboxUnavailableError
from outbox.backends.rocksdb.codec import (
    body_bytes_apart,
    body_inline,
    decode_entry,
    encode_entry,
)
from tests.outbox.entries import entry

# Written by the codec of their time (commits 1c8effc and fcea5ab): entry(1) as format 1, and
# as format 2 with every optional field set (FULL), and its tombstone (FULL_DELIVERED below).
V1_ENTRY_1 = bytes.fromhex(
    "0100000100000000000000000000018bcfe564180000018bcfe5680000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000220000000a0000000000000000000000000000000000000000000000003746303030303031"
    "30303030303030303030303030303030303030303030303030314f72646572546f706963626f64792d31"
)
V2_FULL = bytes.fromhex(
    "02d1000100000000000000070000018bcfe564180000018bcfe568000000000000000000000000000000007b"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "000000020000000000015f90000000220000000a00000001000000000000000200000004000000060000000a"
    "374630303030303130303030303030303030303030303030303030303030303030314f72646572546f706963"
    "747731627573795b226b31225d7b2270223a202276227d626f64792d31"
)
V2_DELIVERED = bytes.fromhex(
    "0206010100000000000000000000018bcfe564180000018bcfe568000000018bcfe568000000000000000000"
    "00000000000000000000000000000000000000000000000100000000000003e90000018bcfe5680000000000"
    "000000000000000000000000000000220000000a000000000000000000000000000000000000000000000000"
    "374630303030303130303030303030303030303030303030303030303030303030314f72646572546f706963"
)
RECEIPT = DeliveryReceipt(1, 1001, 1_700_000_000_000)


def full_entry() -> OutboxEntry:
    plain = entry(1)
    message = replace(
        plain.message, tag="t", keys=("k1",), properties={"p": "v"}, delivery_timeout_ms=90_000
    )
    return replace(
        plain,
        message=message,
        lease_owner="w1",
        lease_until_ms=123,
        attempts=2,
        last_error="busy",
        seq=7,
        maybe_stored=True,
    )


def test_every_field_round_trips_and_the_body_is_not_in_the_value() -> None:
    full = full_entry()
    for e in (entry(1), full, full.delivered(RECEIPT)):
        raw = encode_entry(e)
        assert not body_inline(raw)
        assert body_bytes_apart(raw) == len(e.message.body)
        assert e.message.body == b"" or e.message.body not in raw
        assert decode_entry(raw, e.message.body) == e


def test_values_of_the_older_formats_are_read_whole_body_included() -> None:
    assert decode_entry(V1_ENTRY_1) == entry(1)
    assert decode_entry(V2_FULL) == full_entry()
    assert decode_entry(V2_DELIVERED) == entry(1).delivered(RECEIPT)
    for raw in (V1_ENTRY_1, V2_FULL, V2_DELIVERED):
        assert body_inline(raw)
        assert body_bytes_apart(raw) == 0, "nothing to read beside it"


def test_an_unknown_format_and_a_body_that_does_not_match_are_refused() -> None:
    with pytest.raises(OutboxConfigError, match="format 9, not 3"):
        decode_entry(b"\x09" + encode_entry(entry(1))[1:])
    raw = encode_entry(entry(1))
    with pytest.raises(OutboxUnavailableError, match="holds 5 bytes, its value says 6"):
        decode_entry(raw, b"body-")
    with pytest.raises(OutboxUnavailableError, match="holds 0 bytes"):
        decode_entry(raw)  # the body key is missing
