"""The codec's round trip (broker/store/codec/encode.py and decode.py).

Proves: every field of a message survives encode_message + finish_record + decode_message, with
IPv4 and IPv6 hosts in every combination (the encoder owns the sysflag v6 bits: it sets them for
IPv6 hosts and clears them for IPv4 ones, so a record always decodes); integers at the extremes of
their signed widths survive; decode refuses what is not a message record.
properties_to_string / string_to_properties round-trip valid properties.
"""

from __future__ import annotations

import re
import zlib

import pytest

from broker.store.codec.check import RecordKind
from broker.store.codec.decode import decode_message, string_to_properties
from broker.store.codec.encode import encode_message, properties_to_string
from broker.store.codec.layout import (
    blank_marker,
)
from broker.store.codec.message import (
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    HostAddress,
    MessageExt,
    MessageExtBrokerInner,
    MessageSysFlag,
)
from tests.broker.store.codec.records import (
    BORN_TS_MS,
    HOST_PAIRS,
    PHY_OFFSET,
    QUEUE_OFFSET,
    STORE_TS_MS,
    TAG,
    TOPIC,
    UNIQ_KEY,
    USER_PROPERTIES,
    V4_BORN,
    V4_STORE,
    V6_BITS,
    V6_BORN,
    V6_STORE,
    check,
    full_message,
    is_v6,
    record_of,
)


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
