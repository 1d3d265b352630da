"""A real ``rocketbox broker`` process for integration tests, with a small store.

A later ``--listen-port`` in ``args`` overrides the free port: a broker restarted on its old port
is how tests bring "the broker back" to a sidecar that knows only that address.
"""

from __future__ import annotations

import re
from pathlib import Path

from broker.store.config import MessageStoreConfig
from tests.rocketbox_process import REPO_ROOT, RocketboxProcess, wait_until

__all__ = ["REPO_ROOT", "BrokerProcess", "small_store_config", "wait_until"]
# Small files, so that a test's broker reserves about 9 MiB of disk, not RocketMQ's 1.4 GiB.
SEGMENT_MIB = 8
HASH_SLOTS = 4096
INDEX_ENTRIES = 16384
SMALL_STORE_ARGS = (
    f"--segment-size-mib={SEGMENT_MIB}",
    f"--max-hash-slot-num={HASH_SLOTS}",
    f"--max-index-num={INDEX_ENTRIES}",
)


def small_store_config(data_dir: Path) -> MessageStoreConfig:
    """The geometry SMALL_STORE_ARGS gives a broker, to open its store once it has stopped."""
    return MessageStoreConfig(
        data_dir,
        mapped_file_size_commit_log_bytes=SEGMENT_MIB * 1024 * 1024,
        max_hash_slot_num=HASH_SLOTS,
        max_index_num=INDEX_ENTRIES,
    )


READY_LINE = re.compile(r"broker listening on [^\s]+:(\d+)")


class BrokerProcess(RocketboxProcess):
    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.args = args
        super().__init__(
            "broker",
            READY_LINE,
            ["broker", "--data-dir", str(data_dir), "--listen-port", "0", *SMALL_STORE_ARGS, *args],
        )
