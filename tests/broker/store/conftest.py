"""Shared fixtures for store tests: a small-config factory and stores that are always shut down.

Every store here lives in pytest's tmp_path, on real files, with its real service threads. A test
that opens stores through ``open_store`` never has to shut them down itself: whatever it opened
is shut down at teardown, in reverse order, even when the test fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.store import commit_log
from broker.store.codec.message import HostAddress
from broker.store.config import KIB, MessageStoreConfig
from broker.store.message_store import DefaultMessageStore

STORE_HOST: HostAddress = ("10.0.0.1", 10911)

# Small enough that tests cross segment boundaries with a few dozen messages, large enough that
# the config's own check (a segment holds the largest record) passes:
# 115 fixed + 1024 body + 64 topic + 512 properties = 1715 bytes <= the smallest segment used.
SMALL_CONFIG: dict[str, Any] = {
    "mapped_file_size_commit_log_bytes": 64 * KIB,
    "message_size_bytes_max": 1024,
    "topic_length_max": 64,
    "properties_length_max": 512,
    "mapped_file_size_consume_queue_entries": 64,
    "hash_slot_num": 1000,
    "index_num_max": 4000,
    # No background cleaning pass during a test: retention runs only when a test calls it.
    "clean_resource_interval_ms": 3_600_000,
}

MakeConfig = Callable[..., MessageStoreConfig]
OpenStore = Callable[..., DefaultMessageStore]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def make_config(store_dir: Path) -> MakeConfig:
    """``make_config(**overrides)``: SMALL_CONFIG rooted at ``store_dir``, fields overridden."""

    def make(**overrides: Any) -> MessageStoreConfig:
        fields = {"store_path_root_dir": store_dir, **SMALL_CONFIG, **overrides}
        return MessageStoreConfig(**fields)

    return make


@pytest.fixture
def open_store(make_config: MakeConfig) -> Iterator[OpenStore]:
    """``open_store(config=None)``: a started store (SMALL_CONFIG unless a config is given).

    Call it again after ``shutdown()`` to restart on the same directory."""
    stores: list[DefaultMessageStore] = []

    def open_(config: MessageStoreConfig | None = None) -> DefaultMessageStore:
        store = DefaultMessageStore(config or make_config(), STORE_HOST)
        stores.append(store)
        store.start()
        return store

    yield open_
    for store in reversed(stores):
        store.shutdown()  # a no-op for a store already shut down or never started


@pytest.fixture
def store(open_store: OpenStore) -> DefaultMessageStore:
    """A started store with SMALL_CONFIG."""
    return open_store()


# Set by test_compiled_store.py for the run of these tests against the compiled wheel.
EXPECT_COMPILED_ENV = "ROCKETBOX_TEST_EXPECT_COMPILED_STORE"


@pytest.fixture(autouse=True, scope="session")
def _store_build() -> None:
    """When the compiled wheel's store is what is under test, it really is what was imported."""
    if os.environ.get(EXPECT_COMPILED_ENV) == "1":
        assert commit_log.__file__ is not None
        assert commit_log.__file__.endswith(".so"), f"interpreted store: {commit_log.__file__}"
