"""The record layout, byte for byte (broker/store/codec/layout.py).

Proves: each field sits at the byte position the layout table gives it (MAGICCODE 0xDAA320A7,
QUEUEOFFSET at 20, PHYSICALOFFSET at 28, STORETIMESTAMP after BORNHOST); the trailing __CRC32#
property is 10 digits computed as RocketMQ 5 computes it.
"""

from __future__ import annotations

import re
import struct
import zlib

import pytest

from broker.store.codec.decode import read_store_timestamp
from broker.store.codec.encode import properties_to_string
from broker.store.codec.layout import (
    MESSAGE_MAGIC_CODE,
)
from broker.store.codec.message import (
    HostAddress,
    MessageSysFlag,
)
from tests.broker.store.codec.records import (
    BORN_TS_MS,
    HOST_PAIRS,
    PHY_OFFSET,
    QUEUE_OFFSET,
    STORE_TS_MS,
    TOPIC,
    V4_BORN,
    V4_STORE,
    V6_BITS,
    V6_BORN,
    V6_STORE,
    full_message,
    host_bytes,
    is_v6,
    record_of,
    rocketmq_crc_digits,
)


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


def test_the_crc_property_holds_rocketmq_s_crc_of_the_bytes_before_it() -> None:
    """As RocketMQ 5 writes it (the codec's docstring promises the same): UtilAll.crc32, i.e.
    crc32 & 0x7FFFFFFF, of the record's first TOTALSIZE - 20 bytes, written by
    MessageDecoder.createCrc32 (digits least significant first). A RocketMQ broker with
    CRC verification on can then read our commitlog."""
    record = record_of(full_message())
    before_property = record[:-20]
    expected = rocketmq_crc_digits(zlib.crc32(before_property) & 0x7FFFFFFF)
    assert record[-20:] == b"__CRC32#\x01" + expected + b"\x02"
