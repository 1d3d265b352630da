"""What puts yield under concurrency, refusal and transactions.

Proves:
- concurrent puts from threads and from asyncio tasks under SYNC_FLUSH: all stored, queue offsets
  without gaps or duplicates, all readable;
- refusals: a stopped store, and a disk above disk_used_space_ratio_max, write nothing;
- transactional records: prepared and rolled-back ones are stored but take no queue offset.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker.store.codec.message import (
    MessageExtBrokerInner,
    MessageSysFlag,
)
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.message_store import DefaultMessageStore
from broker.store.status import (
    AppendMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)
from tests.broker.store.store_helpers import (
    TOPIC,
    assert_stored_as,
    dispatched,
    message,
    put_ok,
    read_queue,
)

MakeConfig = Callable[..., MessageStoreConfig]
OpenStore = Callable[..., DefaultMessageStore]


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
        out: list[tuple[MessageExtBrokerInner, PutMessageResult]] = []
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
    config = make_config(disk_used_space_ratio_max=used_ratio - 0.01)
    store = open_store(config)
    assert store.check_disk() is True

    for result in (
        *store.put_messages([message(b"x", msg_id="ID-X")]),
        *store.put_messages([message(b"y"), message(b"z")]),
        *asyncio.run(store.async_put_messages([message(b"w")])),
    ):
        assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "disk_used_space_ratio_max" in result.detail
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
    store = open_store(make_config(disk_used_space_ratio_max=1.0))
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
