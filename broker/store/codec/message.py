"""The message model of the store: what a put carries in, and what a read gives back.

Names follow RocketMQ's MessageExtBrokerInner / MessageExt and MessageConst. Property values are
strings, as in RocketMQ; the codec serialises them as ``name\\x01value\\x02`` pairs.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Final

# -- RocketMQ property names (MessageConst) -------------------------------------------------------
PROPERTY_KEYS = "KEYS"  # space-separated business keys
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"  # the message id
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"  # the message group of FIFO messages
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_CRC32 = "__CRC32#"  # whole-record checksum, always the last property (see layout.py)
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"  # a dead-lettered message's original topic
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"

KEY_SEPARATOR = " "

# Properties the store itself manages; an application may not set them as user properties.
SYSTEM_PROPERTY_NAMES = frozenset(
    {
        PROPERTY_KEYS,
        PROPERTY_TAGS,
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        PROPERTY_DELAY_TIME_LEVEL,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_SHARDING_KEY,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_CRC32,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_ORIGIN_MESSAGE_ID,
    }
)


# -- sysflag bits (MessageSysFlag) -----------------------------------------------------------------
class MessageSysFlag:
    COMPRESSED_FLAG: Final = 0x1
    MULTI_TAGS_FLAG: Final = 0x2
    TRANSACTION_NOT_TYPE: Final = 0
    TRANSACTION_PREPARED_TYPE: Final = 0x1 << 2
    TRANSACTION_COMMIT_TYPE: Final = 0x2 << 2
    TRANSACTION_ROLLBACK_TYPE: Final = 0x3 << 2
    BORNHOST_V6_FLAG: Final = 0x1 << 4
    STOREHOSTADDRESS_V6_FLAG: Final = 0x1 << 5

    @staticmethod
    def transaction_value(sysflag: int) -> int:
        return sysflag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE


def tags_string_to_tags_code(tags: str | None) -> int:
    """The 8-byte tag code a consume queue entry carries, for filtering without reading the log.

    crc32 rather than Java's String.hashCode: it runs in C, and equal codes are always confirmed
    against the exact tag read from the commitlog, so only the spread of the hash matters.
    """
    if not tags:
        return 0
    return zlib.crc32(tags.encode("utf-8"))


# A host is (ip, port); IPv4 and IPv6 addresses are both stored (sysflag says which).
HostAddress = tuple[str, int]
NO_HOST: HostAddress = ("0.0.0.0", 0)  # noqa: S104 - a placeholder address, never bound


class _PropertyViews:
    """Typed views of the properties both message classes carry."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []


@dataclass(slots=True)
class MessageExtBrokerInner(_PropertyViews):
    """A message on its way into the store (RocketMQ's MessageExtBrokerInner)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sysflag: int = 0
    born_timestamp_ms: int = 0
    born_host: HostAddress = NO_HOST
    store_host: HostAddress = NO_HOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


@dataclass(slots=True)
class MessageExt(_PropertyViews):
    """A message as stored: every field of its commitlog record (RocketMQ's MessageExt)."""

    topic: str
    body: bytes
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int  # the record's phy_offset
    store_size: int
    body_crc: int
    sysflag: int
    born_timestamp_ms: int
    born_host: HostAddress
    store_timestamp_ms: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    properties: dict[str, str]

    @property
    def msg_id(self) -> str | None:
        """The message id (UNIQ_KEY) the producer stamped."""
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def properties_for_copy(self) -> dict[str, str]:
        """Properties for a new message made from this one (a delayed message reaching its
        topic, a committed transaction): without the record CRC, which the store writes anew."""
        return {k: v for k, v in self.properties.items() if k != PROPERTY_CRC32}

    @property
    def user_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in SYSTEM_PROPERTY_NAMES}
