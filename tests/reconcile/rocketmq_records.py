"""Commitlogs laid out byte for byte as Apache RocketMQ's broker writes them: an independent
witness for the reconciliation's reader.

Written from RocketMQ's own source and never from rocketbox's codec (broker/store/codec), so that
reading these logs tests the reader against RocketMQ, not against itself. Nothing here imports
rocketbox. What each part follows:

- the record: MessageExtEncoder.encode and CommitLog.DefaultAppendMessageCallback.doAppend
  (5.x; 4.x's encoder in CommitLog lays out the same fields). TOTALSIZE, MAGICCODE, BODYCRC
  (UtilAll.crc32: java.util.zip.CRC32 & 0x7FFFFFFF of the body), QUEUEID, FLAG, QUEUEOFFSET,
  PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOSTADDRESS (an IPv4
  address in 4 bytes or an IPv6 one in 16, then the port as an int, as
  MessageExt.socketAddress2ByteBuffer writes them; the sysflag's BORNHOST_V6_FLAG /
  STOREHOSTADDRESS_V6_FLAG say which), RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODY (int
  length), TOPIC (MessageVersion: V1 a byte, V2 a short), PROPERTIES (short length, then the
  producer's properties string as it came);
- the version: V1 always up to 5.0; from 5.1 V2 for a topic longer than 127 characters
  (``autoMessageVersionOnTopicLen``, on by default);
- the record CRC: only with ``enabledAppendPropCRC`` (5.2 and later, off by default): a separator
  appended when the properties do not end with one, then ``__CRC32#``, \\x01, 10 digits of
  crc32 & 0x7FFFFFFF of every byte before the pair, least significant first ('0'-padded), \\x02
  (MessageDecoder.createCrc32);
- transactions: PREPARED and ROLLBACK records are written with queue offset 0 and take no place
  in their queue (doAppend, the queue offset assignment); 4.3 and later park a half message under
  RMQ_SYS_TRANS_HALF_TOPIC (queue 0, sysflag NOT_TYPE, REAL_TOPIC / REAL_QID properties;
  TransactionalMessageBridge.parseHalfMessageInner), write an op record under
  RMQ_SYS_TRANS_OP_HALF_TOPIC (body: the half's queue offset, tag "d", a new UNIQ_KEY;
  makeOpMessageInner) on commit and on rollback, and on commit the message in its real topic
  with sysflag COMMIT_TYPE and the half's phy_offset as PREPAREDTRANSACTIONOFFSET
  (EndTransactionProcessor). Before 4.3 the prepared message was written in its real topic with
  sysflag PREPARED_TYPE, and the commit or rollback as a new record of the same topic, COMMIT_TYPE
  with the body or ROLLBACK_TYPE without it, pointing at the prepared record;
- delayed messages: parked under SCHEDULE_TOPIC_XXXX in the queue of their level with REAL_TOPIC,
  REAL_QID and DELAY (HookUtils.handleScheduleMessage), copied to their topic when due
  (ScheduleMessageService);
- segments: files named by the 20-digit offset of their first byte, each the segment's full size
  (mapped at that size when created, zeros past what was written); a record that does not leave
  8 bytes free in the rest of a segment is not written there: a blank marker (TOTALSIZE = the
  bytes left, MAGICCODE 0xCBD43194, those 8 bytes only) ends the segment, and the record starts
  the next one.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

MESSAGE_MAGIC_CODE = -626843481  # MessageDecoder.MESSAGE_MAGIC_CODE, 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC_CODE = -875286124  # CommitLog.BLANK_MAGIC_CODE, 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CRC32_PAIR_BYTES = len("__CRC32#") + 1 + 10 + 1

Host = tuple[str, int]
PRODUCER: Host = ("192.168.0.17", 50211)
PRODUCER_V6: Host = ("2001:db8:0:7::17", 50212)
BROKER: Host = ("10.0.3.5", 10911)
BROKER_V6: Host = ("fd00:3::5", 10911)


def properties_text(pairs: list[tuple[str, str]], last_separator: bool = True) -> str:
    """MessageDecoder.messageProperties2String: name \\x01 value \\x02 for each pair; a client
    that builds the string itself may leave the last separator out."""
    text = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
    return text if last_separator else text[:-1]


def producer_properties(uniq_key: str, keys: str = "", tags: str = "") -> list[tuple[str, str]]:
    """What the Java client sends and the broker adds (CLUSTER), in an order its HashMap gives."""
    pairs = [("KEYS", keys)] if keys else []
    pairs += [("UNIQ_KEY", uniq_key), ("CLUSTER", "DefaultCluster"), ("WAIT", "true")]
    return pairs + ([("TAGS", tags)] if tags else [])


@dataclass
class Message:
    """A message as the broker holds it just before it encodes it (MessageExtBrokerInner)."""

    topic: str
    body: bytes
    properties: str  # the properties string, as it is written
    queue_id: int = 0
    flag: int = 0
    sysflag: int = 0  # transaction and other bits; the host bits follow the hosts
    born_timestamp_ms: int = 1_767_225_600_000
    born_host: Host = PRODUCER
    store_host: Host = BROKER
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


def _host(host: Host) -> tuple[bytes, bool]:
    address = ipaddress.ip_address(host[0])
    return address.packed + struct.pack(">i", host[1]), address.version == 6


def encode(
    msg: Message,
    queue_offset: int,
    phy_offset: int,
    store_timestamp_ms: int,
    version_v2: bool,
    append_crc: bool,
) -> bytes:
    """The record's bytes, as doAppend leaves them in the segment."""
    born, born_v6 = _host(msg.born_host)
    store, store_v6 = _host(msg.store_host)
    sysflag = msg.sysflag | (BORNHOST_V6_FLAG if born_v6 else 0)
    sysflag |= STOREHOSTADDRESS_V6_FLAG if store_v6 else 0
    topic = msg.topic.encode()
    props = msg.properties.encode()
    if append_crc and props and props[-1] != 2:
        props += b"\x02"
    props_len = len(props) + (CRC32_PAIR_BYTES if append_crc else 0)
    # V1's length is Java's (byte) cast: a topic of more than 127 bytes needs V2.
    topic_field = struct.pack(">h" if version_v2 else ">B", len(topic)) + topic
    after_total = b"".join(
        (
            struct.pack(">i", MESSAGE_MAGIC_CODE_V2 if version_v2 else MESSAGE_MAGIC_CODE),
            struct.pack(">i", zlib.crc32(msg.body) & 0x7FFFFFFF),
            struct.pack(
                ">iiqqiq",
                msg.queue_id,
                msg.flag,
                queue_offset,
                phy_offset,
                sysflag,
                msg.born_timestamp_ms,
            ),
            born,
            struct.pack(">q", store_timestamp_ms),
            store,
            struct.pack(
                ">iqi", msg.reconsume_times, msg.prepared_transaction_offset, len(msg.body)
            ),
            msg.body,
            topic_field,
            struct.pack(">h", props_len),
            props,
        )
    )
    total = 4 + len(after_total) + (CRC32_PAIR_BYTES if append_crc else 0)
    record = struct.pack(">i", total) + after_total
    if append_crc:
        crc = zlib.crc32(record) & 0x7FFFFFFF
        digits = "".join(str(crc // 10**i % 10) for i in range(10))
        record += b"__CRC32#\x01" + digits.encode() + b"\x02"
    assert len(record) == total
    return record


@dataclass
class Broker:
    """A RocketMQ broker's CommitLog: puts records in segments under ``directory``.

    ``release``: "4.x" (V1 only) or "5.x" (V2 for long topics); ``append_crc``: the broker's
    ``enabledAppendPropCRC`` (a 5.2+ broker may be restarted with it changed)."""

    directory: Path
    segment_size_bytes: int
    release: str = "5.x"
    append_crc: bool = False
    store_timestamp_ms: int = 1_767_225_600_100
    _queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    _segment_from: int = 0
    _data: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def phy_offset(self) -> int:
        return self._segment_from + len(self._data)

    def put(self, msg: Message, kept_bytes: int | None = None) -> tuple[int, int]:
        """Append ``msg``; returns its (phy_offset, queue_offset). ``kept_bytes``: only that
        much of it reaches the disk (a crash mid-append: nothing may be put after it)."""
        self.store_timestamp_ms += 1
        tx = msg.sysflag & TRANSACTION_ROLLBACK_TYPE
        key = (msg.topic, msg.queue_id)
        queue_offset = self._queue_offsets.get(key, 0)
        if tx in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            queue_offset = 0
        else:
            self._queue_offsets[key] = queue_offset + 1
        v2 = self.release == "5.x" and len(msg.topic) > 127
        record = encode(
            msg, queue_offset, self.phy_offset, self.store_timestamp_ms, v2, self.append_crc
        )
        left = self.segment_size_bytes - len(self._data)
        if len(record) + END_FILE_MIN_BLANK_LENGTH > left:
            self._data += struct.pack(">ii", left, BLANK_MAGIC_CODE)
            self._flush()
            self._segment_from += self.segment_size_bytes
            self._data = bytearray()
            record = encode(
                msg, queue_offset, self.phy_offset, self.store_timestamp_ms, v2, self.append_crc
            )
        phy_offset = self.phy_offset
        self._data += record if kept_bytes is None else record[:kept_bytes]
        self._flush()
        return phy_offset, queue_offset

    def _flush(self) -> None:
        path = self.directory / f"{self._segment_from:020d}"
        path.write_bytes(bytes(self._data).ljust(self.segment_size_bytes, b"\0"))

    # -- transactions -----------------------------------------------------------------------------
    def half(self, msg: Message) -> tuple[int, int, Message]:
        """4.3+: the half message parked; returns its phy_offset, queue offset and the record."""
        parked = Message(
            topic=HALF_TOPIC,
            body=msg.body,
            queue_id=0,
            born_host=msg.born_host,
            store_host=msg.store_host,
            born_timestamp_ms=msg.born_timestamp_ms,
            properties=msg.properties
            + properties_text(
                [
                    ("TRAN_MSG", "true"),
                    ("PGROUP", "tx-group"),
                    ("REAL_TOPIC", msg.topic),
                    ("REAL_QID", str(msg.queue_id)),
                ]
            ),
        )
        phy_offset, queue_offset = self.put(parked)
        return phy_offset, queue_offset, msg

    def end_transaction(self, half: tuple[int, int, Message], commit: bool, op_id: str) -> None:
        """4.3+: on commit the message in its real topic; the op record either way."""
        phy_offset, queue_offset, msg = half
        if commit:
            self.put(
                Message(
                    topic=msg.topic,
                    body=msg.body,
                    queue_id=msg.queue_id,
                    properties=msg.properties
                    + properties_text([("TRAN_MSG", "true"), ("PGROUP", "tx-group")]),
                    sysflag=TRANSACTION_COMMIT_TYPE,
                    born_host=msg.born_host,
                    store_host=msg.store_host,
                    prepared_transaction_offset=phy_offset,
                )
            )
        self.put(
            Message(
                topic=OP_HALF_TOPIC,
                body=str(queue_offset).encode(),
                store_host=msg.store_host,
                born_host=msg.store_host,
                properties=properties_text([("TAGS", "d"), ("UNIQ_KEY", op_id)]),
            )
        )

    def prepared_in_topic(self, msg: Message) -> int:
        """Before 4.3: the prepared message in its real topic; returns its phy_offset."""
        msg.sysflag = TRANSACTION_PREPARED_TYPE
        return self.put(msg)[0]

    def end_in_topic(self, msg: Message, prepared_at: int, commit: bool) -> None:
        """Before 4.3: the commit (with the body) or the rollback (without) in the same topic."""
        self.put(
            Message(
                topic=msg.topic,
                body=msg.body if commit else b"",
                queue_id=msg.queue_id,
                properties=msg.properties,
                born_host=msg.born_host,
                store_host=msg.store_host,
                sysflag=TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE,
                prepared_transaction_offset=prepared_at,
            )
        )

    # -- delayed messages -------------------------------------------------------------------------
    def delayed(self, msg: Message, level: int) -> None:
        """A message with a delay level, parked under SCHEDULE_TOPIC_XXXX in the queue of its
        level (HookUtils.handleScheduleMessage: REAL_TOPIC, REAL_QID, DELAY kept)."""
        self.put(
            Message(
                topic=SCHEDULE_TOPIC, body=msg.body, queue_id=level - 1, born_host=msg.born_host,
                store_host=msg.store_host, born_timestamp_ms=msg.born_timestamp_ms,
                properties=msg.properties + properties_text(
                    [("DELAY", str(level)), ("REAL_TOPIC", msg.topic),
                     ("REAL_QID", str(msg.queue_id))]),
            )
        )  # fmt: skip

    def deliver_delayed(self, msg: Message) -> None:
        """The delayed message come due: its copy in its real topic (ScheduleMessageService's
        messageTimeup, the DELAY property cleared)."""
        self.put(
            Message(
                topic=msg.topic, body=msg.body, queue_id=msg.queue_id, born_host=msg.born_host,
                store_host=msg.store_host, born_timestamp_ms=msg.born_timestamp_ms,
                properties=msg.properties + properties_text(
                    [("REAL_TOPIC", msg.topic), ("REAL_QID", str(msg.queue_id))]),
            )
        )  # fmt: skip
