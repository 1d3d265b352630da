"""check_record, the verdict recovery and the dispatcher act on (broker/store/codec/check.py).

Proves: check_record says MESSAGE for a valid record (with the DispatchRequest the dispatcher
needs), END on zeros or fewer than 8 bytes, BLANK for a blank marker that fills exactly to the
limit, and CORRUPT, with a reason, for: a blank marker of the wrong size, a flipped body byte
(body CRC), a flipped header, host, topic, property or CRC byte (record CRC), a truncated record,
a bad magic code, a total size out of range, a size that disagrees with the fields, a tail still
all zeros (a torn write, even though the zeros erased the CRC property). With check_crc=False (the
cheap dispatch path) a flipped body byte is not detected.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from broker.store.codec.check import CheckResult, RecordKind
from broker.store.codec.layout import (
    BLANK_MAGIC_CODE,
    blank_marker,
)
from broker.store.codec.message import (
    PROPERTY_TAGS,
    MessageExtBrokerInner,
    MessageSysFlag,
    tags_string_to_tags_code,
)
from tests.broker.store.codec.records import (
    KEYS,
    PHY_OFFSET,
    QUEUE_OFFSET,
    STORE_TS_MS,
    TAG,
    TOPIC,
    UNIQ_KEY,
    USER_PROPERTIES,
    V4_BORN,
    V4_STORE,
    V6_BORN,
    V6_STORE,
    assert_corrupt,
    check,
    flipped,
    full_message,
    record_of,
)


# -- check_record: valid records ------------------------------------------------------------------
def test_a_valid_record_is_a_message_with_what_the_dispatcher_needs() -> None:
    msg = full_message(V6_BORN, V4_STORE)
    record = record_of(msg)

    result = check(record)

    assert (result.kind, result.size, result.reason) == (RecordKind.MESSAGE, len(record), "")
    req = result.request
    assert req is not None
    assert (req.topic, req.queue_id) == (TOPIC, 7)
    assert (req.commit_log_offset, req.msg_size) == (PHY_OFFSET, len(record))
    assert req.tags_code == tags_string_to_tags_code(TAG) != 0
    assert req.consume_queue_offset == QUEUE_OFFSET
    assert (req.keys, req.uniq_key) == (KEYS, UNIQ_KEY)
    assert req.store_timestamp_ms == STORE_TS_MS
    assert req.sysflag == msg.sysflag | MessageSysFlag.BORNHOST_V6_FLAG
    assert req.prepared_transaction_offset == 123_456_789_012
    assert req.properties[PROPERTY_TAGS] == TAG
    assert req.properties["colour"] == USER_PROPERTIES["colour"]


def test_a_message_without_tag_keys_or_id_dispatches_empty_values() -> None:
    req = check(record_of(MessageExtBrokerInner(topic="T", body=b"x"))).request
    assert req is not None
    assert (req.tags_code, req.keys, req.uniq_key) == (0, "", None)


def test_the_cheap_dispatch_path_gives_the_same_request_without_reading_the_body() -> None:
    record = record_of(full_message())
    assert check(record, check_crc=False) == check(record, check_crc=True)


def test_records_back_to_back_are_checked_each_at_its_position() -> None:
    first = record_of(full_message(), queue_offset=0, phy_offset=0)
    second = record_of(full_message(V6_BORN, V6_STORE), queue_offset=1, phy_offset=len(first))
    log = first + second
    a, b = check(log, 0), check(log, len(first))
    assert a.request is not None
    assert b.request is not None
    assert (a.kind, a.size, a.request.consume_queue_offset) == (RecordKind.MESSAGE, len(first), 0)
    assert (b.kind, b.size, b.request.commit_log_offset) == (
        RecordKind.MESSAGE,
        len(second),
        len(first),
    )


# -- check_record: end and blank ------------------------------------------------------------------
def test_blank_marker_is_the_bytes_left_then_the_blank_magic_code() -> None:
    assert blank_marker(4096) == bytes.fromhex("00001000") + bytes.fromhex("CBD43194")
    assert struct.unpack(">ii", blank_marker(4096)) == (4096, BLANK_MAGIC_CODE)


def test_zeros_are_the_end_of_written_data() -> None:
    assert check(bytes(256)) == CheckResult(RecordKind.END, 0, None)
    record = record_of(full_message())
    assert check(record + bytes(64), len(record)).kind == RecordKind.END


@pytest.mark.parametrize("left", [0, 1, 7])
def test_fewer_than_8_bytes_left_is_the_end_whatever_they_hold(left: int) -> None:
    """A segment never has 1..7 bytes left (a record leaves 0 or room for a blank marker)."""
    buf = b"\xff" * 32
    assert check(buf, 32 - left).kind == RecordKind.END


@pytest.mark.parametrize("left", [8, 9, 100, 4096])
def test_a_blank_marker_that_fills_to_the_limit_is_blank(left: int) -> None:
    record = record_of(full_message())
    segment = record + blank_marker(left) + bytes(left - 8)
    result = check(segment, len(record))
    assert (result.kind, result.size, result.request) == (RecordKind.BLANK, left, None)


@pytest.mark.parametrize("claimed", [8, 99, 101, 2**31 - 1, 0, -1])
def test_a_blank_marker_that_does_not_fill_to_the_limit_is_corrupt(claimed: int) -> None:
    segment = blank_marker(claimed) + bytes(92)  # 100 bytes left
    assert_corrupt(check(segment), "blank marker")


# -- check_record: damage -------------------------------------------------------------------------
def test_a_flipped_body_byte_fails_the_body_crc() -> None:
    msg = full_message()
    record = record_of(msg)
    body_at = record.index(msg.body)
    for pos in (body_at, body_at + 100, body_at + len(msg.body) - 1):
        assert_corrupt(check(flipped(record, pos)), "body CRC")


def test_a_flipped_body_byte_is_not_seen_by_the_cheap_dispatch_path() -> None:
    """check_crc=False is what the dispatcher uses on records this process appended and
    recovery already verified: it skips the body (not even read) and both CRCs, so damage
    inside the body goes unseen there. Only check_crc=True may be trusted on unverified data."""
    msg = full_message()
    record = record_of(msg)
    damaged = flipped(record, record.index(msg.body) + 10)

    result = check(damaged, check_crc=False)

    assert result.kind == RecordKind.MESSAGE
    assert result.request is not None
    assert result.request.msg_size == len(record)
    assert check(damaged, check_crc=True).kind == RecordKind.CORRUPT


def test_a_flipped_body_crc_field_fails_the_body_crc() -> None:
    assert_corrupt(check(flipped(record_of(full_message()), 11)), "body CRC")


# Positions for born-v4-store-v4 records; each flips the low bit of a field, which keeps the
# record decodable, so only the record CRC can tell.
HEADER_FIELDS_V4 = {
    "QUEUEID": 15,
    "FLAG": 19,
    "QUEUEOFFSET": 27,
    "PHYSICALOFFSET": 35,
    "SYSFLAG": 39,
    "BORNTIMESTAMP": 47,
    "BORNHOST-address": 48,
    "BORNHOST-port": 55,
    "STORETIMESTAMP": 63,
    "STOREHOSTADDRESS": 64,
    "RECONSUMETIMES": 75,
    "PREPAREDTRANSACTIONOFFSET": 83,
}


@pytest.mark.parametrize("pos", HEADER_FIELDS_V4.values(), ids=HEADER_FIELDS_V4.keys())
def test_a_flipped_header_byte_fails_the_record_crc(pos: int) -> None:
    record = record_of(full_message(V4_BORN, V4_STORE))
    result = check(flipped(record, pos))
    assert_corrupt(result, "record CRC")


@pytest.mark.parametrize(
    "needle",
    [
        pytest.param(TOPIC.encode(), id="topic"),
        pytest.param(UNIQ_KEY.encode(), id="uniq-key-value"),
        pytest.param(b"KEYS", id="keys-name"),
        pytest.param(b"colour", id="user-property-name"),
        pytest.param(b"vermelho", id="user-property-value"),
        pytest.param(b"__CRC32#", id="crc-property-name"),
    ],
)
def test_a_flipped_topic_or_properties_byte_fails_the_record_crc(needle: bytes) -> None:
    # Recovery requires the CRC property on the store's own log: a damaged name cannot turn
    # the check off.
    record = record_of(full_message())
    damaged = flipped(record, record.rindex(needle) + 1)
    assert_corrupt(check(damaged, require_record_crc=True), "record CRC")


def test_a_changed_crc_digit_fails_the_record_crc() -> None:
    record = record_of(full_message())
    digit_at = len(record) - 2
    damaged = bytearray(record)
    damaged[digit_at] = ord("0") + (record[digit_at] - ord("0") + 1) % 10
    assert_corrupt(check(bytes(damaged)), "record CRC")


def test_a_crc_property_that_is_not_ten_digits_is_corrupt() -> None:
    record = bytearray(record_of(full_message()))
    record[-5] = ord("x")
    assert_corrupt(check(bytes(record)), "malformed record CRC")


@pytest.mark.parametrize("cut", [1, 11, 20, 100])
def test_a_record_cut_by_the_limit_is_corrupt(cut: int) -> None:
    record = record_of(full_message())
    assert_corrupt(check(record, limit=len(record) - cut), "total size")
    # The same when the bytes past the limit are simply not there (a torn tail on disk).
    assert_corrupt(check(record[:-cut]), "total size")


@pytest.mark.parametrize("zeros", [1, 11, 19, 20, 21, 40, 200])
def test_a_record_whose_tail_never_reached_the_disk_is_corrupt(zeros: int) -> None:
    """A torn write: the size and header made it, the last bytes are still zeros. Zeros may
    have erased the CRC property itself, so the record must not pass for one written
    without it (body CRC only)."""
    record = record_of(full_message())
    torn = record[:-zeros] + bytes(zeros)
    result = check(torn)
    assert result.kind == RecordKind.CORRUPT
    assert result.reason


def test_a_bad_magic_code_is_corrupt() -> None:
    record = bytearray(record_of(full_message()))
    record[4:8] = bytes.fromhex("12345678")
    assert_corrupt(check(bytes(record)), "bad magic code 0x12345678")


@pytest.mark.parametrize(
    "total",
    [
        pytest.param(lambda n: n + 1, id="one-past-what-is-left"),
        pytest.param(lambda n: 2**31 - 1, id="int-max"),
        pytest.param(lambda n: -1, id="negative"),
        pytest.param(lambda n: 0, id="zero-with-message-magic"),
        pytest.param(lambda n: 39, id="smaller-than-the-fixed-header"),
    ],
)
def test_a_total_size_out_of_range_is_corrupt(total: Callable[[int], int]) -> None:
    record = bytearray(record_of(full_message()))
    record[0:4] = struct.pack(">i", total(len(record)))
    assert_corrupt(check(bytes(record)), "total size")


@pytest.mark.parametrize("delta", [-1, 1, 8])
def test_a_total_size_that_disagrees_with_the_fields_is_corrupt(delta: int) -> None:
    record = bytearray(record_of(full_message()) + bytes(16))  # room to claim more
    record[0:4] = struct.pack(">i", len(record) - 16 + delta)
    result = check(bytes(record))
    assert result.kind == RecordKind.CORRUPT
    assert result.reason.startswith("undecodable record")


def test_a_negative_physical_offset_is_corrupt() -> None:
    record = record_of(full_message(), phy_offset=-2)
    assert_corrupt(check(record), "negative physical offset")
