"""The commitlog record codec (broker/store/codec/), byte for byte.

Proves: every field of a message survives encode_message + finish_record + decode_message, with
IPv4 and IPv6 hosts in every combination (the encoder owns the sysflag v6 bits: it sets them for
IPv6 hosts and clears them for IPv4 ones, so a record always decodes); integers at the extremes of
their signed widths survive; each field sits at the byte position the layout table in the codec's
docstring gives it (MAGICCODE 0xDAA320A7, QUEUEOFFSET at 20, PHYSICALOFFSET at 28, STORETIMESTAMP
after BORNHOST); the trailing __CRC32# property is 10 digits computed as RocketMQ 5 computes it.

check_record says MESSAGE for a valid record (with the DispatchRequest the dispatcher needs), END
on zeros or fewer than 8 bytes, BLANK for a blank marker that fills exactly to the limit, and
CORRUPT, with a reason, for: a blank marker of the wrong size, a flipped body byte (body CRC), a
flipped header, host, topic, property or CRC byte (record CRC), a truncated record, a bad magic
code, a total size out of range, a size that disagrees with the fields, a tail still all zeros
(a torn write, even though the zeros erased the CRC property). With check_crc=False (the cheap
dispatch path) a flipped body byte is not detected. Records written by other tools are read:
without the CRC property (body CRC only), with RocketMQ's own CRC property, and with the V2 magic
code (2-byte topic length). Records are read in place from a real mmap'ed segment file.
properties_to_string / string_to_properties round-trip valid properties.
"""

from __future__ import annotations

import ipaddress
import mmap
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.store.codec.check import CheckResult, RecordKind, check_record
from broker.store.codec.decode import decode_message, read_store_timestamp, string_to_properties
from broker.store.codec.encode import encode_message, finish_record, properties_to_string
from broker.store.codec.layout import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    blank_marker,
)
from broker.store.codec.message import (
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    HostAddress,
    MessageExt,
    MessageExtBrokerInner,
    MessageSysFlag,
    tags_string_to_tags_code,
)

V6_BITS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
V4_BORN: HostAddress = ("192.168.7.21", 51234)
V4_STORE: HostAddress = ("10.0.0.5", 10911)
V6_BORN: HostAddress = ("2001:db8::7:21", 51235)  # canonical (compressed) form, as inet_ntop
V6_STORE: HostAddress = ("fe80::1ff:fe23:4567:890a", 10912)
HOST_PAIRS = [
    pytest.param(V4_BORN, V4_STORE, id="born-v4-store-v4"),
    pytest.param(V6_BORN, V4_STORE, id="born-v6-store-v4"),
    pytest.param(V4_BORN, V6_STORE, id="born-v4-store-v6"),
    pytest.param(V6_BORN, V6_STORE, id="born-v6-store-v6"),
]

TOPIC = "Orders_eu-west%1"
TAG = "TagA"
UNIQ_KEY = "7F00000100002A9F0000000000000001"
KEYS = "order-1 order-2"
# Distinct bytes in every field, so a field read from the wrong place cannot pass by accident.
QUEUE_OFFSET = 0x0102030405060708
PHY_OFFSET = 0x0000_0A0B_0C0D_0E0F
STORE_TS_MS = 1_700_000_000_123
BORN_TS_MS = 1_699_999_999_001
USER_PROPERTIES = {"colour": "vermelho, rouge, 红色", "emoji": "\U0001f680", "empty": ""}


def full_message(
    born_host: HostAddress = V4_BORN, store_host: HostAddress = V4_STORE
) -> MessageExtBrokerInner:
    """A message with a non-default value in every field."""
    return MessageExtBrokerInner(
        topic=TOPIC,
        body=bytes(range(256)) * 3,
        queue_id=7,
        flag=0x5A5A_0101,
        properties={
            PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: UNIQ_KEY,
            PROPERTY_KEYS: KEYS,
            PROPERTY_TAGS: TAG,
            **USER_PROPERTIES,
        },
        sysflag=MessageSysFlag.MULTI_TAGS_FLAG | MessageSysFlag.TRANSACTION_COMMIT_TYPE,
        born_timestamp_ms=BORN_TS_MS,
        born_host=born_host,
        store_host=store_host,
        reconsume_times=3,
        prepared_transaction_offset=123_456_789_012,
    )


def record_of(
    msg: MessageExtBrokerInner,
    queue_offset: int = QUEUE_OFFSET,
    phy_offset: int = PHY_OFFSET,
    store_ts_ms: int = STORE_TS_MS,
) -> bytes:
    return finish_record(encode_message(msg, msg.sysflag), queue_offset, phy_offset, store_ts_ms)


def flipped(record: bytes, pos: int, mask: int = 0x01) -> bytes:
    damaged = bytearray(record)
    damaged[pos] ^= mask
    return bytes(damaged)


def is_v6(host: HostAddress) -> bool:
    return ipaddress.ip_address(host[0]).version == 6


def host_bytes(host: HostAddress) -> bytes:
    return ipaddress.ip_address(host[0]).packed + struct.pack(">i", host[1])


def check(
    buf: bytes,
    pos: int = 0,
    limit: int | None = None,
    check_crc: bool = True,
    require_record_crc: bool = False,
) -> CheckResult:
    return check_record(
        buf, pos, len(buf) if limit is None else limit, check_crc, require_record_crc
    )


def assert_corrupt(result: CheckResult, reason_part: str) -> None:
    assert result.kind == RecordKind.CORRUPT
    assert result.request is None
    assert result.size == 0
    assert reason_part in result.reason, result.reason


# -- round trip -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("born_host", "store_host"), HOST_PAIRS)
def test_every_field_round_trips(born_host: HostAddress, store_host: HostAddress) -> None:
    msg = full_message(born_host, store_host)
    record = record_of(msg)

    decoded = decode_message(record)

    v6_bits = (MessageSysFlag.BORNHOST_V6_FLAG if is_v6(born_host) else 0) | (
        MessageSysFlag.STOREHOSTADDRESS_V6_FLAG if is_v6(store_host) else 0
    )
    crc_text = decoded.properties[PROPERTY_CRC32]
    assert re.fullmatch(r"[0-9]{10}", crc_text)
    assert decoded == MessageExt(
        topic=TOPIC,
        body=bytes(range(256)) * 3,
        queue_id=7,
        flag=0x5A5A_0101,
        queue_offset=QUEUE_OFFSET,
        commit_log_offset=PHY_OFFSET,
        store_size=len(record),
        body_crc=zlib.crc32(msg.body) & 0x7FFFFFFF,
        sysflag=msg.sysflag | v6_bits,
        born_timestamp_ms=BORN_TS_MS,
        born_host=born_host,
        store_timestamp_ms=STORE_TS_MS,
        store_host=store_host,
        reconsume_times=3,
        prepared_transaction_offset=123_456_789_012,
        properties={**msg.properties, PROPERTY_CRC32: crc_text},
    )
    assert decoded.tags == TAG
    assert decoded.keys == ["order-1", "order-2"]
    assert decoded.msg_id == UNIQ_KEY
    assert decoded.user_properties == USER_PROPERTIES
    # The encoder reports the record size before the put lock finishes the record.
    assert encode_message(msg, msg.sysflag).total_size == len(record)


def test_the_caller_s_message_is_not_changed_by_encoding() -> None:
    msg = full_message(V6_BORN, V6_STORE)
    before = repr(msg)
    record_of(msg)
    assert repr(msg) == before  # the v6 bits go into the record, not into the caller's message


@pytest.mark.parametrize(
    "claimed",
    [
        pytest.param(MessageSysFlag.BORNHOST_V6_FLAG, id="born-v6-bit"),
        pytest.param(MessageSysFlag.STOREHOSTADDRESS_V6_FLAG, id="store-v6-bit"),
        pytest.param(V6_BITS, id="both-v6-bits"),
    ],
)
def test_v6_bits_follow_the_hosts_even_when_the_caller_s_sysflag_claims_otherwise(
    claimed: int,
) -> None:
    """The v6 bits describe the record's layout (8 or 20 host bytes), so only the encoder may
    decide them. A sysflag carried over from an IPv6-born message (a retry, a re-put of a
    MessageExt) with IPv4 hosts now must still give a record that decodes."""
    msg = full_message(V4_BORN, V4_STORE)
    msg.sysflag |= claimed
    record = record_of(msg)

    result = check(record)

    assert result.kind == RecordKind.MESSAGE, result.reason
    decoded = decode_message(record)
    assert decoded.sysflag & V6_BITS == 0
    assert (decoded.born_host, decoded.store_host) == (V4_BORN, V4_STORE)
    assert decoded.body == msg.body


@pytest.mark.parametrize(
    ("flag", "reconsume_times", "born_ts_ms", "prepared_offset", "queue_offset", "store_ts_ms"),
    [
        pytest.param(-(2**31), -(2**31), -(2**63), -(2**63), -(2**63), -(2**63), id="minimum"),
        pytest.param(2**31 - 1, 2**31 - 1, 2**63 - 1, 2**63 - 1, 2**63 - 1, 2**63 - 1, id="max"),
        pytest.param(-1, -1, -1, -1, -1, -1, id="minus-one"),
        pytest.param(0, 0, 0, 0, 0, 0, id="zero"),
    ],
)
def test_integers_are_signed_and_survive_the_extremes_of_their_width(
    flag: int,
    reconsume_times: int,
    born_ts_ms: int,
    prepared_offset: int,
    queue_offset: int,
    store_ts_ms: int,
) -> None:
    msg = MessageExtBrokerInner(
        topic="T",
        body=b"",
        flag=flag,
        reconsume_times=reconsume_times,
        born_timestamp_ms=born_ts_ms,
        prepared_transaction_offset=prepared_offset,
    )
    decoded = decode_message(record_of(msg, queue_offset, 0, store_ts_ms))
    assert (
        decoded.flag,
        decoded.reconsume_times,
        decoded.born_timestamp_ms,
        decoded.prepared_transaction_offset,
        decoded.queue_offset,
        decoded.store_timestamp_ms,
    ) == (flag, reconsume_times, born_ts_ms, prepared_offset, queue_offset, store_ts_ms)
    assert decoded.body == b""


def test_a_message_without_properties_carries_only_the_crc_property() -> None:
    decoded = decode_message(record_of(MessageExtBrokerInner(topic="T", body=b"x")))
    assert list(decoded.properties) == [PROPERTY_CRC32]
    assert (decoded.tags, decoded.keys, decoded.msg_id) == (None, [], None)


def test_decode_reads_a_record_at_an_offset_inside_a_larger_buffer() -> None:
    first = record_of(full_message(), phy_offset=0)
    second_msg = full_message(V6_BORN, V6_STORE)
    second_msg.body = b"second"
    second = record_of(second_msg, phy_offset=len(first))
    log = first + second

    assert decode_message(log, 0).body == bytes(range(256)) * 3
    decoded = decode_message(log, len(first))
    assert (decoded.body, decoded.commit_log_offset) == (b"second", len(first))


def test_decode_refuses_a_blank_marker_and_zeros() -> None:
    with pytest.raises(ValueError, match="no message record at 0"):
        decode_message(blank_marker(64))
    with pytest.raises(ValueError, match="no message record at 8"):
        decode_message(bytes(64), 8)


# -- layout ---------------------------------------------------------------------------------------
def i32(buf: bytes, pos: int) -> int:
    return int(struct.unpack_from(">i", buf, pos)[0])


def i64(buf: bytes, pos: int) -> int:
    return int(struct.unpack_from(">q", buf, pos)[0])


@pytest.mark.parametrize(("born_host", "store_host"), HOST_PAIRS)
def test_each_field_is_where_the_layout_table_puts_it(
    born_host: HostAddress, store_host: HostAddress
) -> None:
    msg = full_message(born_host, store_host)
    record = record_of(msg)

    assert i32(record, 0) == len(record)  # TOTALSIZE
    assert record[4:8] == bytes.fromhex("DAA320A7")  # MAGICCODE
    assert i32(record, 4) == MESSAGE_MAGIC_CODE == -626843481
    assert i32(record, 8) == zlib.crc32(msg.body) & 0x7FFFFFFF  # BODYCRC
    assert i32(record, 12) == 7  # QUEUEID
    assert i32(record, 16) == 0x5A5A_0101  # FLAG
    assert record[20:28] == QUEUE_OFFSET.to_bytes(8, "big")  # QUEUEOFFSET
    assert record[28:36] == PHY_OFFSET.to_bytes(8, "big")  # PHYSICALOFFSET
    sysflag = i32(record, 36)  # SYSFLAG
    assert bool(sysflag & MessageSysFlag.BORNHOST_V6_FLAG) == is_v6(born_host)
    assert bool(sysflag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG) == is_v6(store_host)
    assert sysflag & ~V6_BITS == msg.sysflag
    assert i64(record, 40) == BORN_TS_MS  # BORNTIMESTAMP
    pos = 48
    born = host_bytes(born_host)  # BORNHOST: 4 or 16 address bytes, then the port
    assert len(born) == (20 if is_v6(born_host) else 8)
    assert record[pos : pos + len(born)] == born
    pos += len(born)
    assert i64(record, pos) == STORE_TS_MS  # STORETIMESTAMP
    assert read_store_timestamp(record, 0) == STORE_TS_MS
    pos += 8
    store = host_bytes(store_host)  # STOREHOSTADDRESS
    assert record[pos : pos + len(store)] == store
    pos += len(store)
    assert i32(record, pos) == 3  # RECONSUMETIMES
    assert i64(record, pos + 4) == 123_456_789_012  # PREPAREDTRANSACTIONOFFSET
    pos += 12
    assert i32(record, pos) == len(msg.body)  # BODY
    assert record[pos + 4 : pos + 4 + len(msg.body)] == msg.body
    pos += 4 + len(msg.body)
    assert record[pos] == len(TOPIC.encode())  # TOPIC: 1 length byte
    assert record[pos + 1 : pos + 1 + record[pos]] == TOPIC.encode()
    pos += 1 + record[pos]
    props_len = int(struct.unpack_from(">h", record, pos)[0])  # PROPERTIES: 2 length bytes
    pos += 2
    assert pos + props_len == len(record)  # the properties end the record
    props = record[pos:]
    assert props.startswith(properties_to_string(msg.properties).encode())
    # The CRC property is last: name, \x01, 10 digits, \x02 (20 bytes).
    assert re.fullmatch(rb"__CRC32#\x01[0-9]{10}\x02", props[-20:])


def test_read_store_timestamp_reads_a_record_at_any_position() -> None:
    first = record_of(full_message(V4_BORN, V6_STORE), store_ts_ms=111)
    second = record_of(full_message(V6_BORN, V4_STORE), store_ts_ms=222)
    log = first + second
    assert read_store_timestamp(log, 0) == 111
    assert read_store_timestamp(log, len(first)) == 222


def rocketmq_crc_digits(crc: int) -> bytes:
    """MessageDecoder.createCrc32: ten digits, least significant first, '0'-padded."""
    return (str(crc)[::-1] if crc > 0 else "").ljust(10, "0").encode()


def test_the_crc_property_holds_rocketmq_s_crc_of_the_bytes_before_it() -> None:
    """As RocketMQ 5 writes it (the codec's docstring promises the same): UtilAll.crc32, i.e.
    crc32 & 0x7FFFFFFF, of the record's first TOTALSIZE - 20 bytes, written by
    MessageDecoder.createCrc32 (digits least significant first). A RocketMQ broker with
    CRC verification on can then read our commitlog."""
    record = record_of(full_message())
    before_property = record[:-20]
    expected = rocketmq_crc_digits(zlib.crc32(before_property) & 0x7FFFFFFF)
    assert record[-20:] == b"__CRC32#\x01" + expected + b"\x02"


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


# -- records written by other tools -------------------------------------------------------------
def handmade_record(
    *,
    properties_text: bytes,
    body: bytes = b"written elsewhere",
    topic: bytes = b"ForeignTopic",
    magic: int = MESSAGE_MAGIC_CODE,
    crc_property: bool = False,
) -> bytes:
    """A record built with struct straight from the layout table, IPv4 hosts, as another tool
    would write it. ``crc_property`` appends __CRC32# the way RocketMQ 5 does."""
    topic_field = (
        struct.pack(">B", len(topic))
        if magic == MESSAGE_MAGIC_CODE
        else struct.pack(">h", len(topic))
    ) + topic
    props = properties_text + (b"__CRC32#\x01" + b"0" * 10 + b"\x02" if crc_property else b"")
    fields = b"".join(
        (
            struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),  # BODYCRC
            struct.pack(">i", 3),  # QUEUEID
            struct.pack(">i", 0),  # FLAG
            struct.pack(">q", 41),  # QUEUEOFFSET
            struct.pack(">q", 8192),  # PHYSICALOFFSET
            struct.pack(">i", 0),  # SYSFLAG: IPv4 hosts
            struct.pack(">q", 1_600_000_000_000),  # BORNTIMESTAMP
            bytes([127, 0, 0, 1]) + struct.pack(">i", 40000),  # BORNHOST
            struct.pack(">q", 1_600_000_000_500),  # STORETIMESTAMP
            bytes([10, 1, 2, 3]) + struct.pack(">i", 10911),  # STOREHOSTADDRESS
            struct.pack(">i", 0),  # RECONSUMETIMES
            struct.pack(">q", 0),  # PREPAREDTRANSACTIONOFFSET
            struct.pack(">i", len(body)) + body,  # BODY
            topic_field,  # TOPIC
            struct.pack(">h", len(props)) + props,  # PROPERTIES
        )
    )
    record = bytearray(struct.pack(">ii", 8 + len(fields), magic) + fields)
    if crc_property:
        crc = zlib.crc32(record[:-20]) & 0x7FFFFFFF  # RocketMQ's UtilAll.crc32
        record[-11:-1] = rocketmq_crc_digits(crc)
    return bytes(record)


FOREIGN_PROPERTIES = b"TAGS\x01TagB\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01FOREIGN-1\x02"


def test_a_record_without_the_crc_property_is_accepted_on_its_body_crc() -> None:
    record = handmade_record(properties_text=FOREIGN_PROPERTIES)

    result = check(record)

    assert (result.kind, result.size) == (RecordKind.MESSAGE, len(record))
    req = result.request
    assert req is not None
    assert (req.topic, req.queue_id, req.commit_log_offset) == ("ForeignTopic", 3, 8192)
    assert (req.consume_queue_offset, req.store_timestamp_ms) == (41, 1_600_000_000_500)
    assert req.tags_code == tags_string_to_tags_code("TagB")
    assert (req.keys, req.uniq_key) == ("k1 k2", "FOREIGN-1")
    decoded = decode_message(record)
    assert (decoded.body, decoded.born_host, decoded.store_host) == (
        b"written elsewhere",
        ("127.0.0.1", 40000),
        ("10.1.2.3", 10911),
    )
    assert PROPERTY_CRC32 not in decoded.properties


def test_without_the_crc_property_only_body_damage_is_detected() -> None:
    """The price of accepting such records: a torn header cannot be told from a valid one."""
    record = handmade_record(properties_text=FOREIGN_PROPERTIES)
    body_at = record.index(b"written elsewhere")
    assert_corrupt(check(flipped(record, body_at)), "body CRC")
    assert check(flipped(record, 15)).kind == RecordKind.MESSAGE  # QUEUEID 3 -> 2, unseen


def test_a_record_without_properties_at_all_is_accepted() -> None:
    record = handmade_record(properties_text=b"")
    assert check(record).kind == RecordKind.MESSAGE
    assert decode_message(record).properties == {}


def test_a_record_with_the_v2_magic_code_has_a_two_byte_topic_length() -> None:
    record = handmade_record(properties_text=FOREIGN_PROPERTIES, magic=MESSAGE_MAGIC_CODE_V2)
    result = check(record)
    assert result.kind == RecordKind.MESSAGE
    assert result.request is not None
    assert result.request.topic == "ForeignTopic"
    assert decode_message(record).body == b"written elsewhere"


def test_a_record_written_by_rocketmq_with_its_crc_property_is_accepted() -> None:
    """The docstring's promise: tools written for one can read the other. RocketMQ 5 with
    CRC appending on writes crc32 & 0x7FFFFFFF of the bytes before the property, digits
    least significant first; recovery must not call such a record corrupt."""
    record = handmade_record(properties_text=FOREIGN_PROPERTIES, crc_property=True)
    result = check(record)
    assert result.kind == RecordKind.MESSAGE, result.reason


# -- reading in place from a segment file --------------------------------------------------------
def test_a_segment_file_is_walked_in_place_through_mmap(tmp_path: Path) -> None:
    segment_bytes = 4096
    first = record_of(full_message(), queue_offset=0, phy_offset=0)
    second = record_of(full_message(V6_BORN, V6_STORE), queue_offset=1, phy_offset=len(first))
    used = len(first) + len(second)
    path = tmp_path / f"{0:020d}"
    left = segment_bytes - used
    path.write_bytes(first + second + blank_marker(left) + bytes(left - 8))
    empty = tmp_path / f"{segment_bytes:020d}"
    empty.write_bytes(bytes(segment_bytes))

    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        kinds: list[tuple[int, int, int]] = []
        pos = 0
        while (result := check_record(buf, pos, segment_bytes, check_crc=True)).kind in (
            RecordKind.MESSAGE,
            RecordKind.BLANK,
        ):
            kinds.append((result.kind, pos, result.size))
            pos += result.size
        assert result.kind == RecordKind.END
        assert kinds == [
            (RecordKind.MESSAGE, 0, len(first)),
            (RecordKind.MESSAGE, len(first), len(second)),
            (RecordKind.BLANK, used, left),
        ]
        assert decode_message(buf, len(first)).store_host == V6_STORE
        assert read_store_timestamp(buf, len(first)) == STORE_TS_MS
    with empty.open("rb") as fh2, mmap.mmap(fh2.fileno(), 0, access=mmap.ACCESS_READ) as zeros:
        assert check_record(zeros, 0, segment_bytes, check_crc=True).kind == RecordKind.END


def test_a_memoryview_is_read_like_bytes() -> None:
    record = record_of(full_message())
    view = memoryview(bytearray(record))
    assert check_record(view, 0, len(record), True) == check(record)
    assert decode_message(view) == decode_message(record)


# -- properties text -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "properties",
    [
        pytest.param({}, id="none"),
        pytest.param({"k": "v"}, id="one"),
        pytest.param({"k": ""}, id="empty-value"),
        pytest.param(
            {PROPERTY_TAGS: "TagA", PROPERTY_KEYS: "a b", "ключ": "значение", "x=y": "a:b;c"},
            id="several-unicode-and-punctuation",
        ),
    ],
)
def test_properties_text_round_trips(properties: dict[str, str]) -> None:
    text = properties_to_string(properties)
    assert string_to_properties(text) == properties
    assert list(string_to_properties(text)) == list(properties)  # order kept


def test_properties_text_is_name_x01_value_x02_pairs() -> None:
    assert properties_to_string({"a": "1", "b": ""}) == "a\x011\x02b\x01\x02"
    assert properties_to_string({}) == ""
    assert string_to_properties("") == {}


def test_a_separator_inside_a_value_breaks_the_framing() -> None:
    """Why validation refuses control characters: \\x02 in a value splits it into two pairs."""
    text = properties_to_string({"k": "a\x02b"})
    assert string_to_properties(text) != {"k": "a\x02b"}
