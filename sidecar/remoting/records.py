"""The stored messages a broker's QUERY_MESSAGE answer carries: whole commitlog records, one after
another, in RocketMQ's message layout (big-endian)::

    TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 | PHYSICALOFFSET 8
    | SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 8 or 20 | STORETIMESTAMP 8 | STOREHOST 8 or 20
    | RECONSUMETIMES 4 | PREPAREDTRANSACTIONOFFSET 8 | BODYLENGTH 4 + BODY
    | TOPICLENGTH 1 (magic V1) or 2 (V2) + TOPIC | PROPERTIESLENGTH 2 + PROPERTIES

A host is 4 address bytes and a 4-byte port, or 16 and 4 when SYSFLAG says IPv6 for it
(BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG). PROPERTIES is ``name\\x01value\\x02`` repeated;
``UNIQ_KEY`` is the message id. Only what says where a message is and what it is is read: the
body is skipped, never decompressed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sidecar.remoting.errors import RemotingProtocolError

MESSAGE_MAGIC_CODE_V1 = -626843481
MESSAGE_MAGIC_CODE_V2 = -626843477
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
UNIQ_KEY = "UNIQ_KEY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
# TOTALSIZE .. BORNTIMESTAMP: size, magic, body CRC, queue id, flag, queue offset, phy offset,
# sysflag, born timestamp.
_HEAD = struct.Struct(">iiiiiqqiq")
_I16 = struct.Struct(">h")
_U8 = struct.Struct(">B")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class StoredRecord:
    topic: str
    queue_id: int
    queue_offset: int
    phy_offset: int
    store_timestamp_ms: int
    properties: dict[str, str]

    @property
    def message_id(self) -> str | None:
        return self.properties.get(UNIQ_KEY)


def decode_records(body: bytes, address: str) -> list[StoredRecord]:
    """Every record of ``body``; RemotingProtocolError at the first that does not decode."""
    records = []
    at = 0
    while at < len(body):
        try:
            record, total_size = _record_at(body, at)
        except (struct.error, UnicodeDecodeError, ValueError) as e:
            raise RemotingProtocolError(f"{address}: the record at byte {at} is bad: {e}") from e
        records.append(record)
        at += total_size
    return records


def _record_at(buf: bytes, start: int) -> tuple[StoredRecord, int]:
    (total_size, magic, _crc, queue_id, _flag, queue_offset, phy_offset, sysflag, _born_ms) = (
        _HEAD.unpack_from(buf, start)
    )
    if magic not in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2):
        raise ValueError(f"magic code {magic:#x} is no message's")
    if total_size < _HEAD.size or start + total_size > len(buf):
        raise ValueError(f"total size {total_size} runs past the answer's {len(buf)} bytes")
    at = start + _HEAD.size + _host_size(sysflag & BORNHOST_V6_FLAG)
    (store_timestamp_ms,) = _I64.unpack_from(buf, at)
    # STOREHOST, then RECONSUMETIMES (4) and PREPAREDTRANSACTIONOFFSET (8).
    at += 8 + _host_size(sysflag & STOREHOSTADDRESS_V6_FLAG) + 4 + 8
    (body_length,) = _I32.unpack_from(buf, at)
    if body_length < 0:
        raise ValueError(f"body length {body_length}")
    at += 4 + body_length
    topic_length_field = _U8 if magic == MESSAGE_MAGIC_CODE_V1 else _I16
    (topic_length,) = topic_length_field.unpack_from(buf, at)
    at += topic_length_field.size
    topic = _text(buf, at, topic_length)
    at += topic_length
    (properties_length,) = _I16.unpack_from(buf, at)
    at += 2
    properties = properties_of(_text(buf, at, properties_length))
    at += properties_length
    if at - start > total_size:
        raise ValueError(f"fields take {at - start} bytes of a {total_size}-byte record")
    return (
        StoredRecord(topic, queue_id, queue_offset, phy_offset, store_timestamp_ms, properties),
        total_size,
    )


def _host_size(v6: int) -> int:
    return (16 if v6 else 4) + 4


def _text(buf: bytes, at: int, length: int) -> str:
    if length < 0 or at + length > len(buf):
        raise ValueError(f"a field of {length} bytes at {at} runs past the answer")
    return buf[at : at + length].decode()


def properties_of(text: str) -> dict[str, str]:
    properties = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        name, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep:
            properties[name] = value
    return properties
