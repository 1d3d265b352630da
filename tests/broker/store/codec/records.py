"""Records for the codec's tests: a message with a distinct, non-default value in every field
(IPv4 and IPv6 hosts in every combination), its record bytes, and small tools to damage and check
them.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest

from broker.store.codec.check import CheckResult, RecordKind, check_record
from broker.store.codec.encode import encode_message, finish_record
from broker.store.codec.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    HostAddress,
    MessageExtBrokerInner,
    MessageSysFlag,
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


def rocketmq_crc_digits(crc: int) -> bytes:
    """MessageDecoder.createCrc32: ten digits, least significant first, '0'-padded."""
    return (str(crc)[::-1] if crc > 0 else "").ljust(10, "0").encode()
