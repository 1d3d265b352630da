"""Reading records back: a whole message, or one field of it without decoding the rest.

``decode_record`` raises ValueError (or struct.error on a short buffer) on anything that does not
decode; check.py turns that into a CORRUPT verdict. The layout is layout.py's: magic V1 or V2,
IPv4 or IPv6 hosts, properties with or without the record CRC pair and, as RocketMQ's
string2messageProperties reads them, with or without a separator after the last pair. Zeros in
the topic or the properties are a torn write, never text: they may have erased the record CRC
pair itself, so such a record must not pass for one written without it.
"""

from __future__ import annotations

import socket

from broker.store.codec.layout import (
    HEAD,
    I16,
    I32,
    I64,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    POSITION_SYSFLAG,
    PROPERTY_SEPARATOR,
    RECONSUME_AND_PREPARED,
    TOTAL_AND_MAGIC,
    ReadableBuffer,
)
from broker.store.codec.message import HostAddress, MessageExt, MessageSysFlag


def decode_host(buf: ReadableBuffer, pos: int, v6: bool) -> tuple[HostAddress, int]:
    n = 16 if v6 else 4
    ip = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, bytes(buf[pos : pos + n]))
    (port,) = I32.unpack_from(buf, pos + n)
    return (ip, port), pos + n + 4


def string_to_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            props[name] = value
    return props


def decode_message(buf: ReadableBuffer, pos: int = 0) -> MessageExt:
    """Decode the full record at ``pos``. Raises ValueError when it is not a message record."""
    total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise ValueError(f"no message record at {pos}: magic {magic:#x}")
    return decode_record(buf, pos, total, magic, with_body=True)


def decode_record(
    buf: ReadableBuffer, pos: int, total: int, magic: int, with_body: bool
) -> MessageExt:
    """The message record of ``total`` bytes at ``pos`` (``magic`` read already); its body is
    left empty unless ``with_body``."""
    return decode_record_at(buf, pos, total, magic, with_body)[0]


def decode_record_at(
    buf: ReadableBuffer, pos: int, total: int, magic: int, with_body: bool
) -> tuple[MessageExt, int]:
    """``decode_record``'s message, and where its properties begin in ``buf``."""
    (
        _total,
        _magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phy_offset,
        sysflag,
        born_ts,
    ) = HEAD.unpack_from(buf, pos)
    p = pos + HEAD.size
    born_host, p = decode_host(buf, p, bool(sysflag & MessageSysFlag.BORNHOST_V6_FLAG))
    (store_ts,) = I64.unpack_from(buf, p)
    store_host, p = decode_host(buf, p + 8, bool(sysflag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG))
    reconsume, prepared = RECONSUME_AND_PREPARED.unpack_from(buf, p)
    p += RECONSUME_AND_PREPARED.size
    (body_len,) = I32.unpack_from(buf, p)
    p += 4
    end = pos + total
    if body_len < 0 or p + body_len > end:
        raise ValueError(f"body length {body_len} out of range")
    body = bytes(buf[p : p + body_len]) if with_body else b""
    p += body_len
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = buf[p]
        p += 1
    else:
        (topic_len,) = I16.unpack_from(buf, p)
        p += 2
    if topic_len < 0 or p + topic_len > end:
        raise ValueError(f"topic length {topic_len} out of range")
    raw_topic = bytes(buf[p : p + topic_len])
    if b"\0" in raw_topic:
        raise ValueError("zeros in the topic (torn write?)")
    topic = raw_topic.decode()
    p += topic_len
    (props_len,) = I16.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len != end:
        raise ValueError(f"properties length {props_len} does not end at the record's end")
    return MessageExt(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=phy_offset,
        store_size=total,
        body_crc=crc,
        sysflag=sysflag,
        born_timestamp_ms=born_ts,
        born_host=born_host,
        store_timestamp_ms=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        properties=_decode_properties(bytes(buf[p : p + props_len])),
    ), p


def _decode_properties(props: bytes) -> dict[str, str]:
    if b"\0" in props:
        raise ValueError("malformed properties (torn write?)")
    return string_to_properties(props.decode())


def read_store_timestamp(buf: ReadableBuffer, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos``, without decoding the rest."""
    (sysflag,) = I32.unpack_from(buf, pos + POSITION_SYSFLAG)
    host_len = 20 if sysflag & MessageSysFlag.BORNHOST_V6_FLAG else 8
    (ts,) = I64.unpack_from(buf, pos + HEAD.size + host_len)
    return int(ts)
