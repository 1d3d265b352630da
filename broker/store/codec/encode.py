"""Writing records: a message is encoded once outside the put lock, and finished under it.

``encode_message`` does everything that does not depend on the record's place in the log, so the
put lock (commit_log.py) only packs the head and computes the whole-record CRC
(``finish_record``). Per message that is one join for the tail and one for the record: the bytes
of a 1 KiB body are copied twice, never more. The layout is layout.py's.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import NamedTuple

from broker.store.codec.crc import crc32
from broker.store.codec.layout import (
    CRC32_PREFIX,
    HEAD,
    HEAD_TO_STORE_TS,
    I16,
    I32,
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_SEPARATOR_BYTE,
    RECONSUME_PREPARED_BODY_LEN,
    crc32_digits,
)
from broker.store.codec.message import HostAddress, MessageExtBrokerInner, MessageSysFlag

_V6_HOST_FLAGS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG


@functools.lru_cache(maxsize=256)
def encode_host(host: HostAddress) -> tuple[bytes, bool]:
    """(address + port bytes, is_v6). Cached: a broker sees few distinct hosts."""
    ip = ipaddress.ip_address(host[0])
    return ip.packed + I32.pack(host[1]), ip.version == 6


def properties_to_string(properties: dict[str, str]) -> str:
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items()
    )


def body_crc(body: bytes) -> int:
    return crc32(body) & 0x7FFFFFFF


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
    props = properties_to_string(msg.properties).encode() + CRC32_PREFIX
    body = msg.body
    tail = b"".join(
        (
            store_host,
            RECONSUME_PREPARED_BODY_LEN.pack(
                msg.reconsume_times, msg.prepared_transaction_offset, len(body)
            ),
            body,
            _topic_field(msg.topic),
            I16.pack(len(props) + 11),  # + 10 crc digits and the closing separator
            props,
        )
    )
    return EncodedMessage(
        HEAD.size + len(born_host) + 8 + len(tail) + 11,
        crc32(body) & 0x7FFFFFFF,
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
    head = HEAD_TO_STORE_TS[len(enc.born_host)].pack(
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
    record_crc = crc32(memoryview(tail)[: -len(CRC32_PREFIX)], crc32(head)) & 0x7FFFFFFF
    return b"".join((head, tail, crc32_digits(record_crc), PROPERTY_SEPARATOR_BYTE))
