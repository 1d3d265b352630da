"""Records the broker did not write, and records read in place (broker/store/codec/check.py).

Proves: records written by other tools are read: without the CRC property (body CRC only), with
RocketMQ's own CRC property, and with the V2 magic code (2-byte topic length). Records are read
in place from a real mmap'ed segment file, and from a memoryview like from bytes.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from pathlib import Path

from broker.store.codec.check import RecordKind, check_record
from broker.store.codec.decode import decode_message, read_store_timestamp
from broker.store.codec.layout import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    blank_marker,
)
from broker.store.codec.message import (
    PROPERTY_CRC32,
    tags_string_to_tags_code,
)
from tests.broker.store.codec.records import (
    STORE_TS_MS,
    V6_BORN,
    V6_STORE,
    assert_corrupt,
    check,
    flipped,
    full_message,
    record_of,
    rocketmq_crc_digits,
)


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
