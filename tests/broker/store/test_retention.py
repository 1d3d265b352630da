"""Retention: DefaultMessageStore.clean_expired_files on real segment files and their mtimes.

Proves:
- exactly the expired commitlog segments go, and only as a prefix of the log: a fresh segment
  keeps every later one, however old, and the active (last) segment is never deleted;
- the log's min phy_offset moves to the first kept segment: messages in deleted segments are
  gone (OFFSET_TOO_SMALL, no lookup by offset or id finds them) and the rest read as before;
- consume-queue and index files whose entries all point below the new min offset are deleted,
  the others kept, a queue whose every message expired included;
- delete_files_batch_max bounds the segments one pass deletes;
- after retention and a restart, every min offset and every read is as before.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.store.codec.message import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageExtBrokerInner,
)
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.message_store import DefaultMessageStore
from broker.store.status import AppendMessageResult, GetMessageStatus, PutMessageStatus

MakeConfig = Callable[..., MessageStoreConfig]
OpenStore = Callable[..., DefaultMessageStore]

TOPIC = "TopicTest"
EARLY_TOPIC = "EarlyTopic"  # only in the oldest segments: every message of it expires
SEGMENT_BYTES = 4096
CQ_ENTRIES_PER_FILE = 4  # small, so consume-queue segments expire too
RESERVED_HOURS = 1.0
HOUR_S = 3600
DISPATCH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Put:
    topic: str
    queue_id: int
    msg_id: str
    append: AppendMessageResult

    @property
    def segment(self) -> int:
        return self.append.wrote_offset // SEGMENT_BYTES


def retention_config(make_config: MakeConfig, **overrides: object) -> MessageStoreConfig:
    return make_config(
        mapped_file_size_commit_log_bytes=SEGMENT_BYTES,
        mapped_file_size_consume_queue_entries=CQ_ENTRIES_PER_FILE,
        # Three records a file (entry 0 is unused; each record has an id and a key), so several
        # index files exist and the older ones can expire.
        hash_slot_num=16,
        index_num_max=7,
        file_reserved_hours=RESERVED_HOURS,
        # Every put returns flushed, so the cleaner may take any segment behind the active one.
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        # No segment prepared ahead: the commitlog directory holds exactly the log's segments.
        warm_mapped_file_enable=False,
        **overrides,
    )


def put(store: DefaultMessageStore, topic: str, queue_id: int, i: int) -> Put:
    msg_id = f"{topic}-{i:04d}"
    msg = MessageExtBrokerInner(
        topic=topic,
        body=msg_id.encode() * 12,
        queue_id=queue_id,
        properties={PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: msg_id, PROPERTY_KEYS: f"key-{i}"},
    )
    [result] = store.put_messages([msg])
    assert result.status is PutMessageStatus.PUT_OK, result
    assert result.append is not None
    return Put(topic, queue_id, msg_id, result.append)


def fill_segments(store: DefaultMessageStore, segments: int) -> list[Put]:
    """Puts until the log has ``segments`` segments; EARLY_TOPIC only in the first one."""
    puts = [put(store, EARLY_TOPIC, 0, i) for i in range(3)]
    assert {p.segment for p in puts} == {0}
    i = 0
    while puts[-1].segment < segments - 1:
        assert i < 10_000, "the log did not grow"
        puts.append(put(store, TOPIC, i % 2, i))
        i += 1
    assert store.wait_dispatched(DISPATCH_TIMEOUT_S)
    return puts


def segment_name(n: int) -> str:
    return f"{n * SEGMENT_BYTES:020d}"


def set_age(config: MessageStoreConfig, now_s: float, ages_h: dict[int, float]) -> None:
    """Set segment n's mtime to ``ages_h[n]`` hours before now_s."""
    for n, age_h in ages_h.items():
        mtime = now_s - age_h * HOUR_S
        os.utime(config.store_path_commit_log / segment_name(n), (mtime, mtime))


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()}


def queues(puts: list[Put]) -> list[tuple[str, int]]:
    return sorted({(p.topic, p.queue_id) for p in puts})


def expired_queue_offsets(puts: list[Put], min_phy_offset: int) -> dict[tuple[str, int], int]:
    """Per queue: how many of its messages lie below min_phy_offset (its new min offset)."""
    return {
        q: sum(
            1 for p in puts if (p.topic, p.queue_id) == q and p.append.wrote_offset < min_phy_offset
        )
        for q in queues(puts)
    }


def expected_cq_deletions(
    config: MessageStoreConfig, puts: list[Put], min_phy_offset: int
) -> set[Path]:
    """Consume-queue segments, never a queue's last, whose entries all lie below the new min."""
    doomed = set()
    for (topic, queue_id), expired in expired_queue_offsets(puts, min_phy_offset).items():
        count = sum(1 for p in puts if (p.topic, p.queue_id) == (topic, queue_id))
        last_file = (count - 1) // CQ_ENTRIES_PER_FILE
        for k in range(min(expired // CQ_ENTRIES_PER_FILE, last_file)):
            start_byte = k * CQ_ENTRIES_PER_FILE * 20
            doomed.add(Path(topic) / str(queue_id) / f"{start_byte:020d}")
    assert doomed, "the test needs consume-queue segments that expire"
    return doomed


def expected_index_deletions(config: MessageStoreConfig, min_phy_offset: int) -> set[Path]:
    """Index files, never the newest, whose last entry (header end_phy_offset) lies below."""
    names = sorted(p.name for p in config.store_path_index.iterdir())
    doomed = set()
    for name in names[:-1]:
        header = (config.store_path_index / name).read_bytes()[:40]
        end_phy_offset = struct.unpack_from(">q", header, 24)[0]
        if end_phy_offset < min_phy_offset:
            doomed.add(Path(name))
    assert doomed, "the test needs index files that expire"
    assert len(doomed) < len(names)
    return doomed


def assert_reads_match_the_log(store: DefaultMessageStore, puts: list[Put]) -> None:
    """Messages below the log's min offset are gone everywhere; the others read as stored."""
    min_phy = store.min_phy_offset
    expired = expired_queue_offsets(puts, min_phy)
    for (topic, queue_id), expired_count in expired.items():
        kept = [p for p in puts if (p.topic, p.queue_id) == (topic, queue_id)]
        kept = kept[expired_count:]
        assert store.get_min_offset_in_queue(topic, queue_id) == expired_count
        assert store.get_max_offset_in_queue(topic, queue_id) == expired_count + len(kept)
        if expired_count:
            got = store.get_message(topic, queue_id, 0, 8)
            assert got.status is GetMessageStatus.OFFSET_TOO_SMALL
            assert got.next_begin_offset == expired_count
        if kept:
            got = store.get_message(topic, queue_id, expired_count, 1024)
            assert got.status is GetMessageStatus.FOUND
            assert [m.commit_log_offset for m in got.messages] == [
                p.append.wrote_offset for p in kept
            ]
            assert [m.msg_id for m in got.messages] == [p.msg_id for p in kept]
    for p in puts:
        found = store.query_message_by_id(p.msg_id)
        if p.append.wrote_offset < min_phy:
            assert store.look_message_by_offset(p.append.wrote_offset) is None
            assert found == []
        else:
            assert [m.commit_log_offset for m in found] == [p.append.wrote_offset]


# -- tests ----------------------------------------------------------------------------------------
def test_retention_deletes_exactly_the_expired_prefix(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    config = retention_config(make_config)
    store = open_store(config)
    puts = fill_segments(store, 6)
    cq_before = files_under(config.store_path_consume_queue)
    index_before = files_under(config.store_path_index)
    assert sorted(p.name for p in config.store_path_commit_log.iterdir()) == [
        segment_name(n) for n in range(6)
    ]

    now_s = time.time()
    # 0 and 1 expired; 2 fresh; 3 and 4 expired but behind a fresh one; 5 is the active one.
    set_age(config, now_s, {0: 3, 1: 2, 2: 0, 3: 5, 4: 2, 5: 9})
    expected_index = expected_index_deletions(config, 2 * SEGMENT_BYTES)
    cleaned = store.clean_expired_files(int(now_s * 1000))

    assert [p.name for p in cleaned.commit_log] == [segment_name(0), segment_name(1)]
    assert sorted(p.name for p in config.store_path_commit_log.iterdir()) == [
        segment_name(n) for n in range(2, 6)
    ]
    assert store.min_phy_offset == 2 * SEGMENT_BYTES
    expected_cq = expected_cq_deletions(config, puts, 2 * SEGMENT_BYTES)
    cq_root, index_root = config.store_path_consume_queue, config.store_path_index
    assert {p.relative_to(cq_root) for p in cleaned.consume_queue} == expected_cq
    assert files_under(cq_root) == cq_before - expected_cq
    assert {p.relative_to(index_root) for p in cleaned.index} == expected_index
    assert files_under(index_root) == index_before - expected_index
    assert expired_queue_offsets(puts, store.min_phy_offset)[(EARLY_TOPIC, 0)] == 3
    assert_reads_match_the_log(store, puts)

    # A second pass with nothing newly expired deletes nothing.
    again = store.clean_expired_files(int(now_s * 1000))
    assert (again.commit_log, again.consume_queue, again.index) == ([], [], [])

    # Once 2 expires, 2..4 go; the active segment stays however old it is.
    set_age(config, now_s, {2: 2})
    cleaned = store.clean_expired_files(int(now_s * 1000))
    assert [p.name for p in cleaned.commit_log] == [segment_name(n) for n in (2, 3, 4)]
    assert store.min_phy_offset == 5 * SEGMENT_BYTES
    assert sorted(p.name for p in config.store_path_commit_log.iterdir()) == [segment_name(5)]
    assert_reads_match_the_log(store, puts)


def test_delete_files_batch_max_bounds_one_pass(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    config = retention_config(make_config, delete_files_batch_max=2)
    store = open_store(config)
    puts = fill_segments(store, 6)
    later_ms = int(time.time() * 1000) + 2 * HOUR_S * 1000  # every segment has expired by then

    passes = [[p.name for p in store.clean_expired_files(later_ms).commit_log] for _ in range(4)]
    assert passes == [
        [segment_name(0), segment_name(1)],
        [segment_name(2), segment_name(3)],
        [segment_name(4)],
        [],  # the active segment is never deleted
    ]
    assert store.min_phy_offset == 5 * SEGMENT_BYTES
    assert_reads_match_the_log(store, puts)


def test_min_offsets_stay_correct_after_retention_and_restart(
    make_config: MakeConfig, open_store: OpenStore
) -> None:
    config = retention_config(make_config)
    store = open_store(config)
    puts = fill_segments(store, 5)
    now_s = time.time()
    set_age(config, now_s, {0: 2, 1: 2, 2: 0, 3: 2, 4: 2})
    assert len(store.clean_expired_files(int(now_s * 1000)).commit_log) == 2
    assert_reads_match_the_log(store, puts)
    max_offsets = {q: store.get_max_offset_in_queue(*q) for q in queues(puts)}
    store.shutdown()

    store = open_store(config)
    assert store.min_phy_offset == 2 * SEGMENT_BYTES
    assert store.wait_dispatched(DISPATCH_TIMEOUT_S)
    assert_reads_match_the_log(store, puts)
    for q in queues(puts):
        assert store.get_offset_in_queue_by_time(*q, 0) == store.get_min_offset_in_queue(*q)
    # Queues continue at their old max, the fully expired one too.
    more = [
        put(store, topic, queue_id, 9000 + i) for i, (topic, queue_id) in enumerate(queues(puts))
    ]
    for p in more:
        assert p.append.queue_offset == max_offsets[(p.topic, p.queue_id)]
    assert store.wait_dispatched(DISPATCH_TIMEOUT_S)
    assert_reads_match_the_log(store, puts + more)
