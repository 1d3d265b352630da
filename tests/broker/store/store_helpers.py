"""Messages, puts and reads the store's end-to-end tests share (test_message_store.py,
test_store_restart.py, test_put_outcomes.py).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from broker.store.codec.message import (
    NO_HOST,
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    HostAddress,
    MessageExt,
    MessageExtBrokerInner,
    MessageSysFlag,
)
from broker.store.config import MessageStoreConfig
from broker.store.message_store import DefaultMessageStore
from broker.store.status import (
    AppendMessageResult,
    GetMessageStatus,
    PutMessageStatus,
)

TOPIC = "TopicTest"
OTHER_TOPIC = "OtherTopic"
BORN_HOST: HostAddress = ("192.168.0.7", 52001)
BORN_HOST_V6: HostAddress = ("2001:db8::7", 52002)
BORN_TS_MS = 1_700_000_000_000
DISPATCH_TIMEOUT_S = 5.0
TINY_SEGMENT_BYTES = 4096  # holds the largest record SMALL_CONFIG allows (1715 bytes)
# On-disk magic codes, as the signed big-endian ints RocketMQ writes.
MESSAGE_MAGIC = -626843481  # 0xDAA320A7
BLANK_MAGIC = -875286124  # 0xCBD43194


# -- helpers --------------------------------------------------------------------------------------
def message(
    body: bytes,
    *,
    topic: str = TOPIC,
    queue_id: int = 0,
    tags: str | None = None,
    keys: Sequence[str] = (),
    msg_id: str | None = None,
    user_properties: dict[str, str] | None = None,
    sysflag: int = 0,
    born_host: HostAddress = BORN_HOST,
    flag: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> MessageExtBrokerInner:
    properties = dict(user_properties or {})
    if tags is not None:
        properties[PROPERTY_TAGS] = tags
    if keys:
        properties[PROPERTY_KEYS] = " ".join(keys)
    if msg_id is not None:
        properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = msg_id
    return MessageExtBrokerInner(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=flag,
        properties=properties,
        sysflag=sysflag,
        born_timestamp_ms=BORN_TS_MS,
        born_host=born_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )


def put_ok(store: DefaultMessageStore, msg: MessageExtBrokerInner) -> AppendMessageResult:
    [result] = store.put_messages([msg])
    assert result.status is PutMessageStatus.PUT_OK, result
    assert result.append is not None
    return result.append


def dispatched(store: DefaultMessageStore) -> DefaultMessageStore:
    assert store.wait_dispatched(DISPATCH_TIMEOUT_S), "dispatch did not catch up"
    return store


def read_queue(store: DefaultMessageStore, topic: str, queue_id: int) -> list[MessageExt]:
    """Every readable message of one queue, paging with next_begin_offset."""
    out: list[MessageExt] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while offset < store.get_max_offset_in_queue(topic, queue_id):
        got = store.get_message(topic, queue_id, offset, 1024)
        assert got.status is GetMessageStatus.FOUND, got.status
        assert got.next_begin_offset > offset
        out.extend(got.messages)
        offset = got.next_begin_offset
    return out


def assert_stored_as(
    got: MessageExt, sent: MessageExtBrokerInner, append: AppendMessageResult
) -> None:
    """``got`` carries every field ``sent`` had, plus where and when the store put it."""
    assert got.topic == sent.topic
    assert got.body == sent.body
    assert got.body_crc == zlib.crc32(sent.body) & 0x7FFFFFFF
    assert got.queue_id == sent.queue_id
    assert got.flag == sent.flag
    assert got.born_timestamp_ms == sent.born_timestamp_ms
    assert got.born_host == sent.born_host
    assert got.store_host == sent.store_host != NO_HOST  # the put stamped the store's host
    assert got.reconsume_times == sent.reconsume_times
    assert got.prepared_transaction_offset == sent.prepared_transaction_offset
    assert MessageSysFlag.transaction_value(got.sysflag) == MessageSysFlag.transaction_value(
        sent.sysflag
    )
    assert bool(got.sysflag & MessageSysFlag.BORNHOST_V6_FLAG) == (":" in sent.born_host[0])
    # The store adds exactly one property: the whole-record CRC.
    assert {k: v for k, v in got.properties.items() if k != PROPERTY_CRC32} == sent.properties
    assert got.properties[PROPERTY_CRC32].isdigit()
    assert got.tags == sent.tags
    assert got.keys == sent.keys
    assert got.msg_id == sent.uniq_key == append.msg_id
    assert got.queue_offset == append.queue_offset
    assert got.commit_log_offset == append.wrote_offset
    assert got.store_size == append.wrote_bytes
    assert got.store_timestamp_ms == append.store_timestamp_ms


def commit_log_segments(config: MessageStoreConfig) -> list[str]:
    return sorted(p.name for p in config.store_path_commit_log.iterdir())


def read_i32_pair(config: MessageStoreConfig, phy_offset: int) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) at ``phy_offset``, read from the segment file's bytes."""
    size = config.mapped_file_size_commit_log_bytes
    path = config.store_path_commit_log / f"{phy_offset - phy_offset % size:020d}"
    with path.open("rb") as f:
        f.seek(phy_offset % size)
        total, magic = struct.unpack(">ii", f.read(8))
    return total, magic
