"""The RocksDB outbox's entry value (outbox/backends/rocksdb/codec.py): every field round-trips,
and a value of the previous format (version 1, before messages had a delivery timeout) is still
read, as a message with none."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from outbox import OutboxConfigError
from outbox.backends.rocksdb.codec import decode_entry, encode_entry
from tests.outbox.entries import entry

_HEAD_V2_BYTES = struct.calcsize(">BBBB12q")


def test_every_field_round_trips_with_and_without_a_delivery_timeout() -> None:
    plain = entry(1)
    timed = replace(plain, message=replace(plain.message, delivery_timeout_ms=90_000))
    assert decode_entry(encode_entry(plain)) == plain
    assert decode_entry(encode_entry(timed)) == timed


def test_a_version_1_value_is_read_as_a_message_without_a_delivery_timeout() -> None:
    plain = entry(1)
    v2 = encode_entry(plain)
    # Version 1 is version 2 without the head's last integer.
    v1 = b"\x01" + v2[1 : _HEAD_V2_BYTES - 8] + v2[_HEAD_V2_BYTES:]
    assert decode_entry(v1) == plain


def test_an_unknown_version_is_refused_by_name() -> None:
    with pytest.raises(OutboxConfigError, match="format 9, not 2"):
        decode_entry(b"\x09" + encode_entry(entry(1))[1:])
