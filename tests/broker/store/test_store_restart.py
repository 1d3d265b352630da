"""DefaultMessageStore across restarts, on real files.

Proves: consume queues and the index are rebuilt from the commitlog when their files are deleted;
a clean restart keeps everything; the abort marker exists exactly while the store runs; a restart
whose checkpoint is torn walks the records to the log's true end; a second store on a running
directory is refused.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import pytest

from broker.store.config import MessageStoreConfig
from broker.store.errors import StoreLockedError
from broker.store.message_store import DefaultMessageStore
from broker.store.status import (
    AppendMessageResult,
)
from tests.broker.store.store_helpers import (
    OTHER_TOPIC,
    TINY_SEGMENT_BYTES,
    TOPIC,
    dispatched,
    message,
    put_ok,
    read_queue,
)

MakeConfig = Callable[..., MessageStoreConfig]
OpenStore = Callable[..., DefaultMessageStore]


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
