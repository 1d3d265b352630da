"""The commitlog's on-disk layout: the one place that states where each byte of a record sits.

The layout is RocketMQ's message format (MessageDecoder, CommitLog's DefaultAppendMessageCallback,
MessageExtEncoder), so tools written for one can read the other: a log Apache RocketMQ 4.x or 5.x
wrote is read as one rocketbox wrote. All integers are big-endian and signed, as Java writes them.

    | offset | bytes   | field                        | notes                                      |
    |--------|---------|------------------------------|--------------------------------------------|
    | 0      | 4       | TOTALSIZE                    | whole record, this field included          |
    | 4      | 4       | MAGICCODE                    | 0xDAA320A7 V1; 0xDAA320AB V2; 0xCBD43194   |
    |        |         |                              | blank                                      |
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
    | ..     | 1/2 + n | TOPIC                        | length (V1: 1 byte, V2: 2), then UTF-8     |
    | ..     | 2 + n   | PROPERTIES                   | length, then name\\x01value\\x02 pairs   |

The host widths follow the SYSFLAG bits BORNHOST_V6_FLAG (0x10) and STOREHOSTADDRESS_V6_FLAG
(0x20). The magic code says how long the topic's length is: V1 (RocketMQ 4.x and 5.x) one byte,
V2 (RocketMQ 5.1 and later, for a topic longer than 127 characters) a two-byte short; no version
has a four-byte one (MessageVersion's getTopicLengthSize). rocketbox writes V1 only and reads both.

The record CRC: the last property may be ``__CRC32#\\x01<10 decimal digits>\\x02`` (20 bytes):
crc32 & 0x7FFFFFFF of every record byte before the property's name, its digits least
significant first. rocketbox always writes it; RocketMQ writes it only with
``enabledAppendPropCRC`` (5.2 and later, off by default), so most RocketMQ records have none, and
a reader takes the property to be there only when the record's last 20 bytes are that pair (its
name starting a pair). The body CRC alone cannot see a torn header or properties; the record CRC
covers the whole record, so rocketbox's recovery requires it on its own log and can tell a
complete record from a torn tail. A record without it is checked on its body CRC and its
structure alone, as RocketMQ's own recovery checks it: a flipped byte in its header or
properties goes unseen.

A blank marker pads the tail of a segment: TOTALSIZE = the bytes left, MAGICCODE = blank; only
those 8 bytes are written. rocketbox lets a record fill the rest exactly or leave room for a
blank marker (8 bytes); RocketMQ always leaves room for one. Either way the bytes left in a
segment are 0 or at least 8.

Segments (of the commitlog, consume queues and index alike) are named by the 20-digit
zero-padded offset of their first byte in the stream they belong to (``00000000001073741824``),
so the segment holding any offset is found by arithmetic, and a reader of a log finds its
segments by name alone.
"""

from __future__ import annotations

import mmap
import struct

from broker.store.codec.message import PROPERTY_CRC32

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB: 2-byte topic length; read, never written
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 4 + 4

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTY_SEPARATOR_BYTE = PROPERTY_SEPARATOR.encode()
CRC32_DIGITS = 10
CRC32_RESERVED_LENGTH = len(PROPERTY_CRC32) + 1 + CRC32_DIGITS + 1
CRC32_PREFIX = (PROPERTY_CRC32 + NAME_VALUE_SEPARATOR).encode()
# Bytes of the TOPIC length field, by magic code (RocketMQ's MessageVersion).
TOPIC_LENGTH_BYTES = {MESSAGE_MAGIC_CODE: 1, MESSAGE_MAGIC_CODE_V2: 2}

HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP: 48 bytes
# TOTALSIZE .. STORETIMESTAMP in one pack, for an IPv4 / IPv6 born host (8 / 20 bytes).
HEAD_TO_STORE_TS = {8: struct.Struct(">iiiiiqqiq8sq"), 20: struct.Struct(">iiiiiqqiq20sq")}
RECONSUME_PREPARED_BODY_LEN = struct.Struct(">iqi")
RECONSUME_AND_PREPARED = struct.Struct(">iq")
TOTAL_AND_MAGIC = struct.Struct(">ii")
I64 = struct.Struct(">q")
I32 = struct.Struct(">i")
I16 = struct.Struct(">h")

# Field positions of the table above. The head is fixed; the hosts are 8 (IPv4) or 20 (IPv6)
# bytes, so the _V4 positions hold for records with IPv4 hosts only.
POSITION_QUEUE_ID = 12
POSITION_QUEUE_OFFSET = 20
POSITION_PHYSICAL_OFFSET = 28
POSITION_SYSFLAG = 36
POSITION_BORN_TIMESTAMP = 40
POSITION_BORN_HOST = 48
RECONSUME_PREPARED_BYTES = RECONSUME_AND_PREPARED.size
POSITION_STORE_TIMESTAMP_V4 = POSITION_BORN_HOST + 8
POSITION_BODY_LENGTH_V4 = POSITION_STORE_TIMESTAMP_V4 + 8 + 8 + RECONSUME_PREPARED_BYTES

FILE_NAME_DIGITS = 20

# What the decoders read from: a record's bytes, or a mapped segment read in place.
ReadableBuffer = bytes | bytearray | memoryview | mmap.mmap


def offset_to_file_name(offset: int) -> str:
    return f"{offset:0{FILE_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    return len(name) == FILE_NAME_DIGITS and name.isdigit()


def has_record_crc(buf: ReadableBuffer, properties_at: int, end: int) -> bool:
    """Whether the properties from ``properties_at`` to ``end`` end with the record CRC pair
    (its name starting a pair); its digits are not checked here."""
    at = end - CRC32_RESERVED_LENGTH
    if at < properties_at or bytes(buf[at : at + len(CRC32_PREFIX)]) != CRC32_PREFIX:
        return False
    return at == properties_at or buf[at - 1] == PROPERTY_SEPARATOR_BYTE[0]


def crc32_digits(crc: int) -> bytes:
    """RocketMQ's MessageDecoder.createCrc32 text: 10 decimal digits, least significant first."""
    return (b"%d" % crc)[::-1].ljust(10, b"0")


def blank_marker(size: int) -> bytes:
    return TOTAL_AND_MAGIC.pack(size, BLANK_MAGIC_CODE)
