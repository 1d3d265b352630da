"""ConsumeQueueStore, on real segment files.

Proves: the store's discovery of <topic>/<queue_id> directories after a restart, ignoring foreign
names; expiry and topic destruction; a missing root is an empty store; find_or_create from many
threads yields one queue.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from broker.store.consume_queue import (
    ConsumeQueue,
)
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.errors import MessageIllegalError
from tests.broker.store.consume_queue_helpers import (
    PER_FILE,
    TOPIC,
    put,
)


# -- the store ------------------------------------------------------------------------------------
def test_store_load_finds_every_queue_after_restart(tmp_path: Path) -> None:
    store = ConsumeQueueStore(tmp_path, PER_FILE)
    store.load()
    assert store.is_empty()
    assert store.max_physic_offset() == -1
    for queue_id in (0, 1, 3):
        put(store.find_or_create(TOPIC, queue_id), range(queue_id + 2))
    put(store.find_or_create("%RETRY%group", 0), [7])
    assert store.find_or_create(TOPIC, 1) is store.find(TOPIC, 1)
    store.flush_all()
    store.close()

    store = ConsumeQueueStore(tmp_path, PER_FILE)
    store.load()
    store.recover()
    assert store.topics() == ["%RETRY%group", TOPIC]
    assert store.queue_ids(TOPIC) == [0, 1, 3]
    assert store.queue_ids("Unknown") == []
    assert store.find(TOPIC, 2) is None
    assert store.find("Unknown", 0) is None
    found = store.find(TOPIC, 3)
    assert found is not None
    assert found.max_offset_in_queue == 5
    assert not store.is_empty()
    assert store.max_physic_offset() == 800  # "%RETRY%group" entry 7
    assert store.truncate_dirty(300) == 2 + 1  # queue 3 keeps 0..2, the retry queue empties
    assert store.max_physic_offset() == 300
    store.close()


def test_store_expiry_and_topic_destruction(tmp_path: Path) -> None:
    store = ConsumeQueueStore(tmp_path, PER_FILE)
    store.load()
    put(store.find_or_create(TOPIC, 0), range(20))
    put(store.find_or_create("Other", 0), range(20))
    assert len(store.delete_expired(1700)) == 4
    queue = store.find(TOPIC, 0)
    assert queue is not None
    assert queue.min_offset_in_queue == 17
    store.destroy_topic(TOPIC)
    assert store.topics() == ["Other"]
    assert not (tmp_path / TOPIC).exists()
    with pytest.raises(MessageIllegalError):
        store.destroy_topic("..")  # would be the parent of the root
    with pytest.raises(MessageIllegalError):
        store.find_or_create("bad topic", 0)
    store.close()


def test_store_ignores_foreign_names(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "consumequeue"
    store = ConsumeQueueStore(root, PER_FILE)
    store.load()
    put(store.find_or_create(TOPIC, 2), range(3))
    store.close()
    (root / "stray.txt").write_text("not a topic")
    for name in ["bad topic", "x" * 128, "dot.ted"]:
        (root / name / "0").mkdir(parents=True)
    for name in ["07", "-1", "abc", "99999999999", "²"]:
        (root / TOPIC / name).mkdir()
    (root / TOPIC / "5").write_text("a file, not a queue directory")

    store = ConsumeQueueStore(root, PER_FILE)
    with caplog.at_level(logging.WARNING, logger="broker.store.consume_queue"):
        store.load()
    store.recover()
    assert store.topics() == [TOPIC]
    assert store.queue_ids(TOPIC) == [2]
    assert caplog.text.count("ignoring") == 10
    store.close()


def test_store_on_a_missing_root_is_empty(tmp_path: Path) -> None:
    store = ConsumeQueueStore(tmp_path / "absent", PER_FILE)
    store.load()
    store.recover()
    assert store.topics() == []
    assert store.is_empty()
    assert store.max_physic_offset() == -1


def test_find_or_create_from_many_threads_yields_one_queue(tmp_path: Path) -> None:
    store = ConsumeQueueStore(tmp_path, PER_FILE)
    store.load()
    barrier = threading.Barrier(8)
    found: list[ConsumeQueue] = []

    def create() -> None:
        barrier.wait()
        found.append(store.find_or_create(TOPIC, 0))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 8
    assert all(cq is found[0] for cq in found)
    store.close()
