"""DefaultMessageStore end to end, on real files with its real service threads.

Proves:
- a put is read back by get_message with every field it carried; queue offsets run 0..n-1 per
  queue; store timestamps never go backwards in log order;
- the commitlog rolls over into segments named by their 20-digit start offset, pads each tail
  with a blank marker, and a record that exactly fills a segment leaves no marker, the next one
  starting at the next segment's first byte, across restarts too;
- tag filtering (by tag code, then by the exact tag) and the GetMessageStatus outcomes;
- lookups by business key and by message id, duplicates included, before and after a restart;
- the queue offset lookup by store time, before, within and after the stored messages;
- consume queues and the index are rebuilt from the commitlog when their files are deleted;
- a clean restart keeps everything; the abort marker exists exactly while the store runs; a
  restart whose checkpoint is torn walks the records to the log's true end; a second store on a
  running directory is refused;
- concurrent puts from threads and from asyncio tasks under SYNC_FLUSH: all stored, queue offsets
  without gaps or duplicates, all readable;
- refusals: a stopped store, and a disk above disk_max_used_space_ratio, write nothing;
- transactional records: prepared and rolled-back ones are stored but take no queue offset.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import struct
import threading
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from broker.store.codec.encode import encode_message
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
    tags_string_to_tags_code,
)
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.errors import StoreLockedError
from broker.store.message_store import DefaultMessageStore
from broker.store.status import (
    AppendMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)

MakeConfig = Callable[..., MessageStoreConfig]
OpenStore = Callable[..., DefaultMessageStore]

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


# -- put and get ----------------------------------------------------------------------------------
def test_put_then_get_returns_every_field_in_queue_order(store: DefaultMessageStore) -> None:
    sent: list[MessageExtBrokerInner] = []
    for i in range(10):
        sent.append(
            message(
                f"body-{i}".encode() * (i + 1),
                queue_id=i % 2,
                tags="TagA" if i % 3 else None,
                keys=[f"order-{i}", "customer-7"] if i % 2 else [],
                msg_id=f"ID-{i:04d}",
                user_properties={"trace": f"t{i}"} if i % 4 == 0 else None,
                born_host=BORN_HOST_V6 if i == 5 else BORN_HOST,
                flag=i,
                reconsume_times=i % 3,
            )
        )
    appends = [put_ok(store, m) for m in sent]

    # Where each record landed: per-queue offsets 0..n-1, contiguous in log order.
    assert [a.queue_offset for a in appends] == [i // 2 for i in range(10)]
    assert [a.msg_id for a in appends] == [f"ID-{i:04d}" for i in range(10)]
    assert appends[0].wrote_offset == 0
    for before, after in itertools.pairwise(appends):
        assert after.wrote_offset == before.wrote_offset + before.wrote_bytes
        assert after.store_timestamp_ms >= before.store_timestamp_ms
    assert store.max_phy_offset == appends[-1].wrote_offset + appends[-1].wrote_bytes

    dispatched(store)
    for queue_id in (0, 1):
        got = store.get_message(TOPIC, queue_id, 0, 32)
        assert got.status is GetMessageStatus.FOUND
        assert (got.min_offset, got.max_offset, got.next_begin_offset) == (0, 5, 5)
        expected = [(m, a) for m, a in zip(sent, appends, strict=True) if m.queue_id == queue_id]
        assert len(got.messages) == len(expected)
        for msg, (m, a) in zip(got.messages, expected, strict=True):
            assert_stored_as(msg, m, a)
    for m, a in zip(sent, appends, strict=True):
        found = store.look_message_by_offset(a.wrote_offset)
        assert found is not None
        assert_stored_as(found, m, a)

    page = store.get_message(TOPIC, 1, 2, 2)  # from the middle, bounded by max_msg_nums
    assert [m.queue_offset for m in page.messages] == [2, 3]
    assert page.next_begin_offset == 4


def test_put_messages_stores_a_batch_in_order(store: DefaultMessageStore) -> None:
    batch = [message(b"b%d" % i, msg_id=f"B-{i}") for i in range(5)]
    results = store.put_messages(batch)
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 5
    appends = [r.append for r in results]
    assert all(a is not None for a in appends)
    assert [a.queue_offset for a in appends if a] == [0, 1, 2, 3, 4]
    bodies = [m.body for m in read_queue(dispatched(store), TOPIC, 0)]
    assert bodies == [m.body for m in batch]


# -- segments -------------------------------------------------------------------------------------
def test_segments_roll_over_with_a_blank_marker_in_each_tail(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    config = make_config(mapped_file_size_commit_log_bytes=TINY_SEGMENT_BYTES)
    seg = TINY_SEGMENT_BYTES
    store = open_store(config)
    record_size = encode_message(message(b"x" * 100, msg_id="ID-0000"), 0).total_size
    assert seg % record_size >= 8, "pick a body length that leaves a blank tail"
    per_segment = seg // record_size
    count = per_segment * 3 + 1  # a fourth segment holds the last record
    appends = [put_ok(store, message(b"x" * 100, msg_id=f"ID-{i:04d}")) for i in range(count)]
    assert len(read_queue(dispatched(store), TOPIC, 0)) == count
    store.shutdown()

    for i, a in enumerate(appends):
        segment, pos = divmod(i, per_segment)
        assert a.wrote_offset == segment * seg + pos * record_size  # never spans segments
        assert read_i32_pair(config, a.wrote_offset) == (record_size, MESSAGE_MAGIC)
    names = commit_log_segments(config)
    assert names[:4] == [f"{n * seg:020d}" for n in range(4)]
    assert all(len(name) == 20 and name.isdigit() for name in names)
    tail_pos = per_segment * record_size
    for segment in range(3):
        # The tail marker claims every byte left; the rest of the tail stays zero.
        blank_at = segment * seg + tail_pos
        assert read_i32_pair(config, blank_at) == (seg - tail_pos, BLANK_MAGIC)
        data = (config.store_path_commit_log / names[segment]).read_bytes()
        assert data[tail_pos + 8 :] == bytes(seg - tail_pos - 8)


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_record_exactly_filling_a_segment_leaves_no_blank_marker(
    make_config: MakeConfig, open_store: OpenStore, warm: bool
) -> None:
    # cold: nothing prepares the next segment, so the log ends exactly at a segment's end with no
    # file after it when the store restarts.
    config = make_config(
        mapped_file_size_commit_log_bytes=TINY_SEGMENT_BYTES, warm_mapped_file_enable=warm
    )
    seg = TINY_SEGMENT_BYTES

    def sized(i: int, body_len: int) -> MessageExtBrokerInner:
        return message(b"y" * body_len, msg_id=f"ID-{i:04d}", tags="T")

    base = encode_message(sized(0, 0), 0).total_size
    record_size = base + 100
    k = (seg - base) // record_size  # records before the exact one
    exact_body_len = seg - k * record_size - base
    assert 0 <= exact_body_len <= config.max_message_size_bytes
    sent = [sized(i, 100) for i in range(k)] + [sized(k, exact_body_len)]
    assert encode_message(sent[-1], 0).total_size == seg - k * record_size

    store = open_store(config)
    appends = [put_ok(store, m) for m in sent]
    exact = appends[-1]
    assert exact.wrote_offset + exact.wrote_bytes == seg  # ends exactly at the segment's end
    store.shutdown()
    assert read_i32_pair(config, exact.wrote_offset) == (seg - exact.wrote_offset, MESSAGE_MAGIC)

    store = open_store(config)  # the log ends exactly at a segment boundary
    assert store.recovery_report is not None
    assert store.recovery_report.max_phy_offset == seg
    assert not store.recovery_report.truncated
    assert store.max_phy_offset == seg
    sent.append(sized(k + 1, 100))
    appends.append(put_ok(store, sent[-1]))
    assert appends[-1].wrote_offset == seg  # the next segment's first byte
    assert appends[-1].queue_offset == k + 1
    for msg, m, a in zip(read_queue(dispatched(store), TOPIC, 0), sent, appends, strict=True):
        assert_stored_as(msg, m, a)
    store.shutdown()
    assert read_i32_pair(config, seg) == (appends[-1].wrote_bytes, MESSAGE_MAGIC)

    store = open_store(config)
    assert store.max_phy_offset == seg + appends[-1].wrote_bytes
    for msg, m, a in zip(read_queue(dispatched(store), TOPIC, 0), sent, appends, strict=True):
        assert_stored_as(msg, m, a)


# -- tags and statuses ----------------------------------------------------------------------------
# "plumless" and "buckeroo" share a crc32: the tag code alone cannot tell them apart.
COLLIDING_TAGS = ("plumless", "buckeroo")


def test_tag_filter_matches_the_tag_code_then_the_exact_tag(store: DefaultMessageStore) -> None:
    assert tags_string_to_tags_code(COLLIDING_TAGS[0]) == tags_string_to_tags_code(
        COLLIDING_TAGS[1]
    )
    tags: list[str | None] = ["a", "b", None, "plumless", "buckeroo", "a", "b", "a"]
    for i, tag in enumerate(tags):
        put_ok(store, message(b"m%d" % i, tags=tag))
    dispatched(store)

    def offsets(got_tags: list[str] | None, start: int = 0, nums: int = 32) -> list[int]:
        got = store.get_message(TOPIC, 0, start, nums, tags=got_tags)
        assert got.status is GetMessageStatus.FOUND
        return [m.queue_offset for m in got.messages]

    assert offsets(["a"]) == [0, 5, 7]
    assert offsets(["b"]) == [1, 6]
    assert offsets(["a", "b"]) == [0, 1, 5, 6, 7]
    assert offsets(["plumless"]) == [3]  # same code as buckeroo: confirmed from the log
    assert offsets(["buckeroo"]) == [4]
    assert offsets(None) == list(range(8))

    # next_begin_offset moves past entries skipped on the way to the match.
    got = store.get_message(TOPIC, 0, 2, 1, tags=["b"])
    assert [m.queue_offset for m in got.messages] == [6]
    assert got.next_begin_offset == 7
    got = store.get_message(TOPIC, 0, 0, 1, tags=["a"])
    assert [m.queue_offset for m in got.messages] == [0]
    assert got.next_begin_offset == 1
    # Nothing matches: every entry was scanned, so the next call starts after them all.
    got = store.get_message(TOPIC, 0, 0, 32, tags=["zzz"])
    assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert (got.messages, got.next_begin_offset) == ([], 8)


def test_get_message_statuses(make_config: MakeConfig, open_store: OpenStore) -> None:
    config = make_config(
        mapped_file_size_commit_log_bytes=TINY_SEGMENT_BYTES,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,  # every put is flushed: retention may take it
        file_reserved_hours=1.0,
    )
    store = open_store(config)
    appends = [put_ok(store, message(b"z" * 200, tags="t")) for _ in range(30)]
    active_start = appends[-1].wrote_offset - appends[-1].wrote_offset % TINY_SEGMENT_BYTES
    assert active_start > 0, "the log needs more than one segment"
    dispatched(store)
    # Two hours on, every segment but the active one has expired.
    cleaned = store.clean_expired_files(appends[-1].store_timestamp_ms + 2 * 3_600_000)
    assert [p.name for p in cleaned.commit_log] == [
        f"{start:020d}" for start in range(0, active_start, TINY_SEGMENT_BYTES)
    ]
    first_kept = sum(1 for a in appends if a.wrote_offset < active_start)

    got = store.get_message(TOPIC, 0, 0, 8)
    assert got.status is GetMessageStatus.OFFSET_TOO_SMALL
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (first_kept, first_kept, 30)
    assert got.messages == []

    got = store.get_message(TOPIC, 0, first_kept, 1)
    assert got.status is GetMessageStatus.FOUND
    assert got.messages[0].commit_log_offset == appends[first_kept].wrote_offset

    got = store.get_message(TOPIC, 0, 30, 8)
    assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert (got.next_begin_offset, got.messages) == (30, [])

    got = store.get_message(TOPIC, 0, 31, 8)
    assert got.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert (got.next_begin_offset, got.messages) == (30, [])

    for topic, queue_id in ((TOPIC, 1), ("NoSuchTopic", 0)):
        got = store.get_message(topic, queue_id, 0, 8)
        assert got.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert (got.next_begin_offset, got.messages) == (0, [])


# -- lookups by key, id and time ------------------------------------------------------------------
def test_query_by_key_and_by_id_before_and_after_restart(open_store: OpenStore) -> None:
    store = open_store()
    a = put_ok(store, message(b"a", keys=["order-1", "customer-7"], msg_id="ID-A"))
    b = put_ok(store, message(b"b", keys=["order-2", "customer-7"], msg_id="ID-B"))
    other = put_ok(store, message(b"o", topic=OTHER_TOPIC, keys=["order-1"], msg_id="ID-O"))
    dup_first = put_ok(store, message(b"d1", msg_id="ID-DUP"))
    dup_second = put_ok(store, message(b"d2", msg_id="ID-DUP"))
    dispatched(store)

    def check(store: DefaultMessageStore) -> None:
        def offsets(msgs: list[MessageExt]) -> list[int]:
            return [m.commit_log_offset for m in msgs]

        # Newest first; a key is scoped to its topic.
        assert offsets(store.query_message(TOPIC, "customer-7")) == [b.wrote_offset, a.wrote_offset]
        assert offsets(store.query_message(TOPIC, "order-1")) == [a.wrote_offset]
        assert offsets(store.query_message(TOPIC, "order-2")) == [b.wrote_offset]
        assert offsets(store.query_message(OTHER_TOPIC, "order-1")) == [other.wrote_offset]
        assert store.query_message(TOPIC, "order-3") == []
        assert offsets(store.query_message(TOPIC, "customer-7", max_num=1)) == [b.wrote_offset]

        by_id = store.query_message_by_id("ID-A")
        assert offsets(by_id) == [a.wrote_offset]
        assert by_id[0].body == b"a"
        found = store.look_message_by_id("ID-O")
        assert found is not None
        assert found.commit_log_offset == other.wrote_offset
        assert store.look_message_by_id("ID-O", topic=TOPIC) is None
        assert store.look_message_by_id("ID-NONE") is None
        # The same id put twice is stored twice, and both copies are found.
        copies = store.query_message_by_id("ID-DUP")
        assert sorted(offsets(copies)) == [dup_first.wrote_offset, dup_second.wrote_offset]
        assert sorted(m.body for m in copies) == [b"d1", b"d2"]

    check(store)
    store.shutdown()
    check(open_store())


def test_offset_in_queue_by_time_before_within_and_after(store: DefaultMessageStore) -> None:
    # Put until the store clock has ticked twice, so the queue spans three store timestamps.
    appends: list[AppendMessageResult] = []
    while len({a.store_timestamp_ms for a in appends}) < 3:
        assert len(appends) < 100_000, "the store clock did not advance"
        appends.append(put_ok(store, message(b"t")))
    dispatched(store)
    stamps = [a.store_timestamp_ms for a in appends]
    assert stamps == sorted(stamps)
    count = len(appends)

    def first_at_or_after(ts_ms: int) -> int:
        return next((i for i, s in enumerate(stamps) if s >= ts_ms), count)

    assert store.get_offset_in_queue_by_time(TOPIC, 0, stamps[0] - 1) == 0  # before: the min
    assert store.get_offset_in_queue_by_time(TOPIC, 0, 0) == 0
    for ts in sorted(set(stamps)):  # within: the first message stored at or after ts
        assert store.get_offset_in_queue_by_time(TOPIC, 0, ts) == first_at_or_after(ts)
    assert first_at_or_after(stamps[-1]) > 0  # a boundary inside the queue was looked up
    assert store.get_offset_in_queue_by_time(TOPIC, 0, stamps[-1] + 1) == count  # after: the max
    assert store.get_offset_in_queue_by_time("NoSuchTopic", 0, stamps[0]) == 0


# -- restart and rebuild --------------------------------------------------------------------------
def _fill_several_queues(store: DefaultMessageStore) -> list[AppendMessageResult]:
    appends = []
    for i in range(60):
        topic = TOPIC if i % 3 else OTHER_TOPIC
        appends.append(
            put_ok(
                store,
                message(
                    b"r" * (50 + i * 7),
                    topic=topic,
                    queue_id=i % 2,
                    tags=("a", "b")[i % 2],
                    keys=[f"k{i}", f"group-{i % 5}"],
                    msg_id=f"ID-{i:04d}",
                ),
            )
        )
    return appends


def _snapshot(store: DefaultMessageStore) -> dict[str, Any]:
    """Everything a client can read, for comparing a store before and after a restart."""
    dispatched(store)
    queues = [(t, q) for t in (TOPIC, OTHER_TOPIC) for q in (0, 1)]
    return {
        "min": {tq: store.get_min_offset_in_queue(*tq) for tq in queues},
        "max": {tq: store.get_max_offset_in_queue(*tq) for tq in queues},
        "messages": {tq: read_queue(store, *tq) for tq in queues},
        "tag_a": {tq: store.get_message(*tq, 0, 1024, tags=["a"]).messages for tq in queues},
        "by_key": {
            (t, k): store.query_message(t, k)
            for t in (TOPIC, OTHER_TOPIC)
            for k in [f"k{i}" for i in range(60)] + [f"group-{g}" for g in range(5)]
        },
        "by_id": {f"ID-{i:04d}": store.query_message_by_id(f"ID-{i:04d}") for i in range(60)},
        "max_phy_offset": store.max_phy_offset,
    }


def test_consume_queues_and_index_are_rebuilt_after_their_files_are_deleted(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    config = make_config(mapped_file_size_commit_log_bytes=TINY_SEGMENT_BYTES)
    store = open_store(config)
    appends = _fill_several_queues(store)
    assert appends[-1].wrote_offset > 2 * TINY_SEGMENT_BYTES  # blank markers to walk over
    before = _snapshot(store)
    assert sum(len(msgs) for msgs in before["messages"].values()) == 60
    assert all(len(found) == 1 for found in before["by_id"].values())
    store.shutdown()

    shutil.rmtree(config.store_path_consume_queue)
    shutil.rmtree(config.store_path_index)
    store = open_store(config)
    report = store.recovery_report
    assert report is not None
    assert report.clean_shutdown
    assert (report.verified_from_offset, report.records_verified) == (0, 60)
    assert report.max_phy_offset == before["max_phy_offset"]
    assert not report.truncated
    assert _snapshot(store) == before
    # The rebuilt queues continue where the old ones ended.
    assert put_ok(store, message(b"next", queue_id=1)).queue_offset == before["max"][(TOPIC, 1)]


def test_clean_restart_keeps_everything_and_abort_marks_a_running_store(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    config = make_config(mapped_file_size_commit_log_bytes=TINY_SEGMENT_BYTES)
    assert not config.abort_file_path.exists()
    store = open_store(config)
    assert config.abort_file_path.exists()
    _fill_several_queues(store)
    before = _snapshot(store)
    store.shutdown()
    assert not config.abort_file_path.exists()
    assert not store.is_running

    store = open_store(config)
    assert config.abort_file_path.exists()
    report = store.recovery_report
    assert report is not None
    assert report.clean_shutdown
    assert not report.truncated
    assert report.max_phy_offset == before["max_phy_offset"]
    # A clean exit's checkpoint vouches for the whole log: nothing is walked again.
    assert report.records_verified == 0
    assert _snapshot(store) == before
    store.shutdown()
    assert not config.abort_file_path.exists()


def test_a_restart_without_a_valid_checkpoint_finds_the_true_end_of_the_log(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    # A torn checkpoint reads as absent (checkpoint.py). Then no offset is vouched for: recovery
    # must walk the records to find where the data ends, not trust the size of the last file.
    config = make_config(mapped_file_size_commit_log_bytes=TINY_SEGMENT_BYTES)
    store = open_store(config)
    appends = [put_ok(store, message(b"c" * 100, msg_id=f"ID-{i}")) for i in range(5)]
    end = store.max_phy_offset
    dispatched(store).shutdown()
    with config.store_checkpoint_path.open("r+b") as f:
        f.write(b"\xff")  # the checkpoint now fails its CRC

    store = open_store(config)
    report = store.recovery_report
    assert report is not None
    assert report.verified_from_offset <= appends[-1].wrote_offset  # the records were walked
    assert report.records_verified >= 1
    assert report.max_phy_offset == store.max_phy_offset == end
    after = put_ok(store, message(b"after", msg_id="ID-after"))
    assert after.wrote_offset == end  # contiguous: no unwritten gap inside the log
    dispatched(store).shutdown()

    # A later full walk (here: rebuilding the consume queues) must still find every message.
    shutil.rmtree(config.store_path_consume_queue)
    store = open_store(config)
    assert [m.commit_log_offset for m in read_queue(dispatched(store), TOPIC, 0)] == [
        a.wrote_offset for a in [*appends, after]
    ]


def test_a_second_store_on_a_running_directory_is_refused(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    config = make_config()
    first = open_store(config)
    put_ok(first, message(b"before"))
    second = DefaultMessageStore(config, first.store_host)
    with pytest.raises(StoreLockedError) as refused:
        second.start()
    assert refused.value.retriable
    assert not second.is_running
    # The refused start took nothing from the running store: the lock is still held...
    with pytest.raises(StoreLockedError):
        DefaultMessageStore(config, first.store_host).start()
    # ...and it still serves.
    put_ok(first, message(b"after"))
    assert [m.body for m in read_queue(dispatched(first), TOPIC, 0)] == [b"before", b"after"]
    first.shutdown()
    third = open_store(config)  # free once the owner shut down
    assert [m.body for m in read_queue(dispatched(third), TOPIC, 0)] == [b"before", b"after"]


# -- concurrency ----------------------------------------------------------------------------------
def _assert_queues_are_gapless_and_readable(
    store: DefaultMessageStore, sent: list[MessageExtBrokerInner], results: list[PutMessageResult]
) -> None:
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * len(sent)
    by_queue: dict[int, list[tuple[MessageExtBrokerInner, AppendMessageResult]]] = defaultdict(list)
    for m, r in zip(sent, results, strict=True):
        assert r.append is not None
        by_queue[m.queue_id].append((m, r.append))
    in_log_order = sorted((r.append for r in results if r.append), key=lambda a: a.wrote_offset)
    for before, after in itertools.pairwise(in_log_order):
        assert before.wrote_offset + before.wrote_bytes <= after.wrote_offset  # no overlap
        assert before.store_timestamp_ms <= after.store_timestamp_ms
    dispatched(store)
    for queue_id, pairs in by_queue.items():
        # A permutation of 0..n-1 (no gap, no duplicate), increasing in log order.
        assert sorted(a.queue_offset for _, a in pairs) == list(range(len(pairs)))
        pairs.sort(key=lambda pair: pair[1].wrote_offset)
        assert [a.queue_offset for _, a in pairs] == list(range(len(pairs)))
        stored = read_queue(store, TOPIC, queue_id)
        assert len(stored) == len(pairs)
        for got, (m, a) in zip(stored, pairs, strict=True):
            assert_stored_as(got, m, a)


def test_threads_putting_concurrently_under_sync_flush(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    threads, per_thread = 8, 200
    store = open_store(make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    start_together = threading.Barrier(threads)

    def producer(t: int) -> list[tuple[MessageExtBrokerInner, PutMessageResult]]:
        start_together.wait(timeout=10)
        out = []
        for i in range(per_thread):
            m = message(b"%d-%d" % (t, i), queue_id=t % 4, msg_id=f"ID-{t}-{i:04d}")
            out.extend((m, r) for r in store.put_messages([m]))
        return out

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(producer, t) for t in range(threads)]
        per_producer = [f.result(timeout=60) for f in futures]
    for pairs in per_producer:  # one producer's puts keep their order in their queue
        offsets = [r.append.queue_offset for _, r in pairs if r.append]
        assert offsets == sorted(offsets)
    pairs = [pair for out in per_producer for pair in out]
    assert len(pairs) == threads * per_thread
    _assert_queues_are_gapless_and_readable(store, [m for m, _ in pairs], [r for _, r in pairs])


def test_asyncio_tasks_putting_concurrently_under_sync_flush(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    store = open_store(make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    sent = [message(b"async-%d" % i, queue_id=i % 4, msg_id=f"ID-{i:04d}") for i in range(200)]

    async def put_all() -> list[PutMessageResult]:
        async with asyncio.timeout(30):
            puts = await asyncio.gather(*(store.async_put_messages([m]) for m in sent))
            return [r for results in puts for r in results]

    results = asyncio.run(put_all())
    _assert_queues_are_gapless_and_readable(store, sent, results)


# -- refusals -------------------------------------------------------------------------------------
def test_put_on_a_stopped_store_is_service_not_available(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    config = make_config()
    never_started = DefaultMessageStore(config)
    [result] = never_started.put_messages([message(b"x")])
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert result.append is None

    store = open_store(config)
    put_ok(store, message(b"kept"))
    store.shutdown()
    for result in (
        *store.put_messages([message(b"late")]),
        *store.put_messages([message(b"late-1"), message(b"late-2")]),
        *asyncio.run(store.async_put_messages([message(b"late-async")])),
    ):
        assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert not result.ok
        assert result.append is None
    store = open_store(config)
    assert [m.body for m in read_queue(dispatched(store), TOPIC, 0)] == [b"kept"]


def test_disk_guard_refuses_puts_above_the_used_space_ratio_and_writes_nothing(
    tmp_path: Path, make_config: MakeConfig, open_store: OpenStore
) -> None:
    usage = shutil.disk_usage(tmp_path)
    used_ratio = (usage.total - usage.free) / usage.total
    if used_ratio <= 0.02:
        pytest.skip(f"the test filesystem is {used_ratio:.3f} used: no ratio fits below it")
    config = make_config(disk_max_used_space_ratio=used_ratio - 0.01)
    store = open_store(config)
    assert store.check_disk() is True

    for result in (
        *store.put_messages([message(b"x", msg_id="ID-X")]),
        *store.put_messages([message(b"y"), message(b"z")]),
        *asyncio.run(store.async_put_messages([message(b"w")])),
    ):
        assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "disk_max_used_space_ratio" in result.detail
        assert result.append is None
    assert store.max_phy_offset == 0
    assert store.get_max_offset_in_queue(TOPIC, 0) == 0
    assert store.get_message(TOPIC, 0, 0, 1).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    store.shutdown()
    # Nothing reached the disk: commitlog segments (one may be prepared ahead) are all zeros.
    for path in config.store_path_commit_log.glob("*"):
        assert path.read_bytes() == bytes(path.stat().st_size), path.name
    assert not (config.store_path_consume_queue / TOPIC).exists()


def test_disk_guard_accepts_puts_below_the_ratio(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    store = open_store(make_config(disk_max_used_space_ratio=1.0))
    assert store.check_disk() is False
    put_ok(store, message(b"fits"))


# -- transactions ---------------------------------------------------------------------------------
def test_only_committed_and_plain_records_take_a_queue_offset(store: DefaultMessageStore) -> None:
    plain = put_ok(store, message(b"plain", msg_id="ID-PLAIN"))
    prepared_msg = message(
        b"half", msg_id="ID-TX", sysflag=MessageSysFlag.TRANSACTION_PREPARED_TYPE
    )
    prepared = put_ok(store, prepared_msg)
    commit = put_ok(
        store,
        message(
            b"half",
            msg_id="ID-TX-COMMIT",
            sysflag=MessageSysFlag.TRANSACTION_COMMIT_TYPE,
            prepared_transaction_offset=prepared.wrote_offset,
        ),
    )
    rollback = put_ok(
        store,
        message(b"undone", msg_id="ID-TX-RB", sysflag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE),
    )
    after = put_ok(store, message(b"after"))

    assert (plain.queue_offset, commit.queue_offset, after.queue_offset) == (0, 1, 2)
    dispatched(store)
    assert store.get_max_offset_in_queue(TOPIC, 0) == 3
    got = store.get_message(TOPIC, 0, 0, 32)
    assert [m.body for m in got.messages] == [b"plain", b"half", b"after"]
    assert got.messages[1].sysflag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE == (
        MessageSysFlag.TRANSACTION_COMMIT_TYPE
    )
    assert got.messages[1].prepared_transaction_offset == prepared.wrote_offset

    # The prepared and rolled-back records are in the log all the same.
    half = store.look_message_by_offset(prepared.wrote_offset)
    assert half is not None
    assert_stored_as(half, prepared_msg, prepared)
    undone = store.look_message_by_offset(rollback.wrote_offset)
    assert undone is not None
    assert undone.body == b"undone"
    # A prepared record can be looked up by id (the broker checks it back); a rolled-back one
    # is not indexed.
    assert [m.commit_log_offset for m in store.query_message_by_id("ID-TX")] == [
        prepared.wrote_offset
    ]
    assert store.query_message_by_id("ID-TX-RB") == []


def test_context_manager_starts_and_shuts_down(make_config: MakeConfig) -> None:
    config = make_config()
    with DefaultMessageStore(config) as store:
        assert store.is_running
        assert config.abort_file_path.exists()
    assert not store.is_running
    assert not config.abort_file_path.exists()
    assert os.path.exists(config.lock_file_path)  # the lock file stays; only the flock goes
