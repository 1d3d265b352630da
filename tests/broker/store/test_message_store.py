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
- the store starts and shuts down as a context manager.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import pytest

from broker.store.codec.encode import encode_message
from broker.store.codec.message import (
    MessageExt,
    MessageExtBrokerInner,
    tags_string_to_tags_code,
)
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.message_store import DefaultMessageStore
from broker.store.status import (
    AppendMessageResult,
    GetMessageStatus,
    PutMessageStatus,
)
from tests.broker.store.store_helpers import (
    BLANK_MAGIC,
    BORN_HOST,
    BORN_HOST_V6,
    MESSAGE_MAGIC,
    OTHER_TOPIC,
    TINY_SEGMENT_BYTES,
    TOPIC,
    assert_stored_as,
    commit_log_segments,
    dispatched,
    message,
    put_ok,
    read_i32_pair,
    read_queue,
)

MakeConfig = Callable[..., MessageStoreConfig]
OpenStore = Callable[..., DefaultMessageStore]


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
    assert 0 <= exact_body_len <= config.message_size_bytes_max
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


def test_context_manager_starts_and_shuts_down(make_config: MakeConfig) -> None:
    config = make_config()
    with DefaultMessageStore(config) as store:
        assert store.is_running
        assert config.abort_file_path.exists()
    assert not store.is_running
    assert not config.abort_file_path.exists()
    assert os.path.exists(config.lock_file_path)  # the lock file stays; only the flock goes
