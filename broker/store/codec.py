"""The commitlog record codec: the one place that knows the byte layout of a stored message.

The layout follows RocketMQ's message format (MessageDecoder, magic code V1), so tools written
for one can read the other. All integers are big-endian and signed, as Java writes them.

    | offset | bytes   | field                        | notes                                      |
    |--------|---------|------------------------------|--------------------------------------------|
    | 0      | 4       | TOTALSIZE                    | whole record, this field included          |
    | 4      | 4       | MAGICCODE                    | 0xDAA320A7 message; 0xCBD43194 blank       |
    | 8      | 4       | BODYCRC                      | crc32(body) & 0x7FFFFFFF                   |
    | 12     | 4       | QUEUEID                      |                                            |
    | 16     | 4       | FLAG                         | application flag                           |
    | 20     | 8       | QUEUEOFFSET                  | entry index in the consume queue           |
    | 28     | 8       | PHYSICALOFFSET               | this record's phy_offset in the commitlog  |
    | 36     | 4       | SYSFLAG                      | MessageSysFlag bits (tx state, v6 hosts)   |
    | 40     | 8       | BORNTIMESTAMP                | ms since the epoch                         |
    | 48     | 8 / 20  | BORNHOST                     | IPv4 (4) or IPv6 (16) address + port (4)   |
    | ..     | 8       | STORETIMESTAMP               | ms since the epoch, set under the put lock |
    | ..     | 8 / 20  | STOREHOSTADDRESS             | as BORNHOST                                |
    | ..     | 4       | RECONSUMETIMES               |                                            |
    | ..     | 8       | PREPAREDTRANSACTIONOFFSET    |                                            |
    | ..     | 4 + n   | BODY                         | length, then the body bytes                |
    | ..     | 1 + n   | TOPIC                        | length, then UTF-8 (at most 127 bytes)     |
    | ..     | 2 + n   | PROPERTIES                   | length, then name\\x01value\\x02 pairs   |

The last property is always ``__CRC32#\\x01<10 decimal digits>\\x02`` (20 bytes), exactly as
RocketMQ 5 writes it when CRC appending is on: crc32 & 0x7FFFFFFF of every record byte before the
property's name, its digits least significant first. The body
CRC alone cannot see a torn header or properties; this one covers the whole record, so recovery
can tell a complete record from a torn tail.

A blank marker pads the tail of a segment: TOTALSIZE = the bytes left, MAGICCODE = blank.
A record fits a segment if it fills the rest exactly or leaves room for a blank marker (8 bytes),
so the bytes left in a segment are always 0 or at least 8.
"""

from __future__ import annotations

import functools
import ipaddress
import mmap
import socket
import struct
import zlib
from dataclasses import dataclass
from typing import Final, NamedTuple

from broker.store.message import (
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

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB: 2-byte topic length; read, never written
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 4 + 4

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
CRC32_RESERVED_LENGTH = len(PROPERTY_CRC32) + 1 + 10 + 1
_CRC32_PREFIX = (PROPERTY_CRC32 + NAME_VALUE_SEPARATOR).encode()
_PROPERTY_SEPARATOR_BYTE = PROPERTY_SEPARATOR.encode()

_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP: 40 bytes
# TOTALSIZE .. STORETIMESTAMP in one pack, for an IPv4 / IPv6 born host (8 / 20 bytes).
_HEAD_TO_STORE_TS = {8: struct.Struct(">iiiiiqqiq8sq"), 20: struct.Struct(">iiiiiqqiq20sq")}
_RECONSUME_PREPARED_BODY_LEN = struct.Struct(">iqi")
_HEAD_TAIL_OFFSETS = _HEAD.size
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_TOTAL_AND_MAGIC = struct.Struct(">ii")
_RECONSUME_AND_PREPARED = struct.Struct(">iq")

POSITION_QUEUE_OFFSET = 20
POSITION_PHYSICAL_OFFSET = 28
POSITION_STORE_TIMESTAMP_V4 = _HEAD.size + 8


# What the decoders read from: a record's bytes, or a mapped segment read in place.
ReadableBuffer = bytes | bytearray | memoryview | mmap.mmap


@functools.lru_cache(maxsize=256)
def encode_host(host: HostAddress) -> tuple[bytes, bool]:
    """(address + port bytes, is_v6). Cached: a broker sees few distinct hosts."""
    ip = ipaddress.ip_address(host[0])
    return ip.packed + _I32.pack(host[1]), ip.version == 6


def decode_host(buf: ReadableBuffer, pos: int, v6: bool) -> tuple[HostAddress, int]:
    n = 16 if v6 else 4
    ip = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, bytes(buf[pos : pos + n]))
    (port,) = _I32.unpack_from(buf, pos + n)
    return (ip, port), pos + n + 4


def properties_to_string(properties: dict[str, str]) -> str:
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items()
    )


def string_to_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            props[name] = value
    return props


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


class EncodedMessage(NamedTuple):
    """A message encoded up to the fields only the put lock may fill (offsets, store time, CRC)."""

    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    sysflag: int
    born_timestamp_ms: int
    born_host: bytes
    tail: bytes  # STOREHOSTADDRESS .. PROPERTIES, up to the CRC property's value


@functools.lru_cache(maxsize=4096)
def _topic_field(topic: str) -> bytes:
    """TOPIC length byte and bytes. Cached: every message of a topic carries the same."""
    raw = topic.encode()
    return len(raw).to_bytes(1, "big") + raw


_V6_HOST_FLAGS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG


def encode_message(msg: MessageExtBrokerInner, sysflag: int) -> EncodedMessage:
    """Encode everything that does not depend on the record's place in the log.

    The caller has validated the message (validation.py); sizes here are therefore in range.
    """
    born_host, born_v6 = encode_host(msg.born_host)
    store_host, store_v6 = encode_host(msg.store_host)
    # The host bits describe this record's hosts, whatever the caller's sysflag carried over.
    sysflag &= ~_V6_HOST_FLAGS
    if born_v6:
        sysflag |= MessageSysFlag.BORNHOST_V6_FLAG
    if store_v6:
        sysflag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    props = properties_to_string(msg.properties).encode() + _CRC32_PREFIX
    body = msg.body
    tail = b"".join(
        (
            store_host,
            _RECONSUME_PREPARED_BODY_LEN.pack(
                msg.reconsume_times, msg.prepared_transaction_offset, len(body)
            ),
            body,
            _topic_field(msg.topic),
            _I16.pack(len(props) + 11),  # + 10 crc digits and the closing separator
            props,
        )
    )
    return EncodedMessage(
        _HEAD.size + len(born_host) + 8 + len(tail) + 11,
        zlib.crc32(body) & 0x7FFFFFFF,
        msg.queue_id,
        msg.flag,
        sysflag,
        msg.born_timestamp_ms,
        born_host,
        tail,
    )


def finish_record(
    enc: EncodedMessage, queue_offset: int, phy_offset: int, store_ts_ms: int
) -> bytes:
    """The complete record bytes, once the put lock has assigned its place and store time."""
    head = _HEAD_TO_STORE_TS[len(enc.born_host)].pack(
        enc.total_size,
        MESSAGE_MAGIC_CODE,
        enc.body_crc,
        enc.queue_id,
        enc.flag,
        queue_offset,
        phy_offset,
        enc.sysflag,
        enc.born_timestamp_ms,
        enc.born_host,
        store_ts_ms,
    )
    tail = enc.tail
    # Chained over the parts, so the 1 KiB tail is copied once, into the joined record.
    record_crc = zlib.crc32(memoryview(tail)[: -len(_CRC32_PREFIX)], zlib.crc32(head)) & 0x7FFFFFFF
    return b"".join((head, tail, crc32_digits(record_crc), _PROPERTY_SEPARATOR_BYTE))


def crc32_digits(crc: int) -> bytes:
    """RocketMQ's MessageDecoder.createCrc32 text: 10 decimal digits, least significant first."""
    return (b"%d" % crc)[::-1].ljust(10, b"0")


def blank_marker(size: int) -> bytes:
    return _TOTAL_AND_MAGIC.pack(size, BLANK_MAGIC_CODE)


class DispatchRequest(NamedTuple):
    """What the dispatcher needs of one record (RocketMQ's DispatchRequest)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp_ms: int
    consume_queue_offset: int
    keys: str
    uniq_key: str | None
    sysflag: int
    prepared_transaction_offset: int
    properties: dict[str, str]


class RecordKind:
    """What ``check_record`` found at a position."""

    MESSAGE: Final = 0
    BLANK: Final = 1  # segment tail padding: continue in the next segment
    END: Final = 2  # zeros: no record was ever written here
    CORRUPT: Final = 3  # a torn or damaged record


@dataclass(slots=True)
class CheckResult:
    kind: int
    size: int
    request: DispatchRequest | None
    reason: str = ""


def check_record(
    buf: ReadableBuffer, pos: int, limit: int, check_crc: bool, require_record_crc: bool = False
) -> CheckResult:
    """Validate the record at ``pos`` (never reading at or past ``limit``) and describe it.

    RocketMQ's checkMessageAndReturnSize: recovery calls it record by record to find where
    valid data ends; the dispatcher calls it to build consume queues and the index.
    """
    if limit - pos < END_FILE_MIN_BLANK_LENGTH:
        return CheckResult(RecordKind.END, 0, None)
    total, magic = _TOTAL_AND_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total == limit - pos:
            return CheckResult(RecordKind.BLANK, total, None)
        return CheckResult(RecordKind.CORRUPT, 0, None, f"blank marker of {total} bytes at {pos}")
    if total == 0 and magic == 0:
        return CheckResult(RecordKind.END, 0, None)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return CheckResult(RecordKind.CORRUPT, 0, None, f"bad magic code {magic:#x}")
    if total < _HEAD.size or pos + total > limit:
        return CheckResult(RecordKind.CORRUPT, 0, None, f"total size {total} out of range")
    try:
        msg = _decode(buf, pos, total, magic, with_body=check_crc)
    except (struct.error, ValueError, UnicodeDecodeError, OSError) as e:
        return CheckResult(RecordKind.CORRUPT, 0, None, f"undecodable record: {e}")
    if check_crc:
        reason = _crc_problem(buf, pos, total, msg, require_record_crc)
        if reason:
            return CheckResult(RecordKind.CORRUPT, 0, None, reason)
    req = DispatchRequest(
        msg.topic,
        msg.queue_id,
        msg.commit_log_offset,
        total,
        tags_string_to_tags_code(msg.properties.get(PROPERTY_TAGS)),
        msg.store_timestamp_ms,
        msg.queue_offset,
        msg.properties.get(PROPERTY_KEYS, ""),
        msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        msg.sysflag,
        msg.prepared_transaction_offset,
        msg.properties,
    )
    if msg.commit_log_offset != -1 and msg.commit_log_offset < 0:
        return CheckResult(RecordKind.CORRUPT, 0, None, "negative physical offset")
    return CheckResult(RecordKind.MESSAGE, total, req)


def _crc_problem(
    buf: ReadableBuffer, pos: int, total: int, msg: MessageExt, require_record_crc: bool
) -> str:
    if body_crc(msg.body) != msg.body_crc:
        return "body CRC mismatch"
    crc_text = msg.properties.get(PROPERTY_CRC32)
    if crc_text is None:
        # Another tool may write records without one; our own log always has it, and a record
        # of ours without it lost it to damage.
        return "record CRC property missing" if require_record_crc else ""
    if len(crc_text) != 10 or not crc_text.isdigit():
        return "malformed record CRC property"
    covered = total - CRC32_RESERVED_LENGTH
    if zlib.crc32(buf[pos : pos + covered]) & 0x7FFFFFFF != int(crc_text[::-1]):
        return "record CRC mismatch"
    return ""


def decode_message(buf: ReadableBuffer, pos: int = 0) -> MessageExt:
    """Decode the full record at ``pos``. Raises ValueError when it is not a message record."""
    total, magic = _TOTAL_AND_MAGIC.unpack_from(buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise ValueError(f"no message record at {pos}: magic {magic:#x}")
    return _decode(buf, pos, total, magic, with_body=True)


def _decode(buf: ReadableBuffer, pos: int, total: int, magic: int, with_body: bool) -> MessageExt:
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
    ) = _HEAD.unpack_from(buf, pos)
    p = pos + _HEAD.size
    born_host, p = decode_host(buf, p, bool(sysflag & MessageSysFlag.BORNHOST_V6_FLAG))
    (store_ts,) = _I64.unpack_from(buf, p)
    store_host, p = decode_host(buf, p + 8, bool(sysflag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG))
    reconsume, prepared = _RECONSUME_AND_PREPARED.unpack_from(buf, p)
    p += _RECONSUME_AND_PREPARED.size
    (body_len,) = _I32.unpack_from(buf, p)
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
        (topic_len,) = struct.unpack_from(">h", buf, p)
        p += 2
    topic = bytes(buf[p : p + topic_len]).decode()
    p += topic_len
    (props_len,) = _I16.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len != end:
        raise ValueError(f"properties length {props_len} does not end at the record's end")
    props = bytes(buf[p : p + props_len])
    # Zeros where properties should be are a torn write: they may have erased the record CRC
    # property itself, so they must not pass for a record written without one.
    if props and (b"\0" in props or not props.endswith(_PROPERTY_SEPARATOR_BYTE)):
        raise ValueError("malformed properties (torn write?)")
    properties = string_to_properties(props.decode())
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
        properties=properties,
    )


def read_store_timestamp(buf: ReadableBuffer, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos``, without decoding the rest."""
    (sysflag,) = _I32.unpack_from(buf, pos + 36)
    host_len = 20 if sysflag & MessageSysFlag.BORNHOST_V6_FLAG else 8
    (ts,) = _I64.unpack_from(buf, pos + _HEAD.size + host_len)
    return int(ts)
