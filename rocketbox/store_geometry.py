"""The store's file sizes as options, with each command's defaults, and what an existing store
directory's files say about the sizes it was written with.

Each file is written in full when it is created (the commitlog's next segment ahead of need), so
these sizes are disk held up front, and a store must be reopened with the sizes it was written
with (its files are refused otherwise: broker/store/mapped_file.py, index_service.py).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from broker.store.config import MessageStoreConfig
from broker.store.consume_queue import CQ_STORE_UNIT_SIZE_BYTES
from broker.store.index_file import index_file_size_bytes

MIB = 1024 * 1024
FIELDS = ("segment_size_mib", "hash_slot_num", "index_num_max", "consume_queue_file_entries")


@dataclass(frozen=True, slots=True)
class StoreGeometry:
    """A command's defaults for the store's file sizes. Each file is written in full when it is
    created (the commitlog's next segment ahead of need), so these sizes are disk held up front."""

    segment_size_mib: int
    hash_slot_num: int
    index_num_max: int
    consume_queue_file_entries: int

    def store_config(self, store_dir: Path, **settings: Any) -> MessageStoreConfig:
        """The store's configuration with these sizes, and ``settings`` by field name."""
        return MessageStoreConfig(
            store_path_root_dir=store_dir,
            mapped_file_size_commit_log_bytes=self.segment_size_mib * MIB,
            hash_slot_num=self.hash_slot_num,
            index_num_max=self.index_num_max,
            mapped_file_size_consume_queue_entries=self.consume_queue_file_entries,
            **settings,
        )


# RocketMQ's own (mappedFileSizeCommitLog, maxHashSlotNum, maxIndexNum,
# mappedFileSizeConsumeQueue): what `rocketbox broker`, the production command, keeps.
ROCKETMQ_STORE_GEOMETRY = StoreGeometry(1024, 5_000_000, 20_000_000, 300_000)


def store_geometry_options(
    defaults: StoreGeometry = ROCKETMQ_STORE_GEOMETRY,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """File sizes of the store. RocketMQ's defaults reserve about 2.4 GiB of disk up front (two
    1 GiB commitlog segments and a 400 MiB index file) and 47 MiB per topic of 8 queues; small
    machines and tests shrink them."""
    return lambda command: _store_geometry_options(command, defaults)


def _store_geometry_options(
    command: Callable[..., None], defaults: StoreGeometry
) -> Callable[..., None]:
    command = click.option(
        "--consume-queue-file-entries",
        default=defaults.consume_queue_file_entries,
        type=click.IntRange(min=1),
        help="Entries a consume queue file holds (20 bytes each; one file per queue of every "
        "topic).",
    )(command)
    command = click.option(
        "--index-num-max",
        default=defaults.index_num_max,
        type=click.IntRange(min=2),
        help="Entries an index file holds (20 bytes each).",
    )(command)
    command = click.option(
        "--hash-slot-num",
        default=defaults.hash_slot_num,
        type=click.IntRange(min=1),
        help="Hash slots of an index file (4 bytes each).",
    )(command)
    return click.option(
        "--segment-size-mib",
        default=defaults.segment_size_mib,
        type=click.IntRange(8, 4096),
        help="Size of a commitlog segment file (the next one is prepared ahead: two on disk).",
    )(command)


def sizes_on_disk(
    store_dir: Path, asked: StoreGeometry, defaulted: Container[str]
) -> tuple[StoreGeometry, list[str]]:
    """``asked``, but where an option was left at its default (its name in ``defaulted``) and
    the store's files were written with RocketMQ's size (an earlier ``rocketbox up`` before it
    had its own defaults), RocketMQ's size: that store opens as it was written. Also the names
    of the sizes so kept."""
    rocketmq = ROCKETMQ_STORE_GEOMETRY
    store = MessageStoreConfig(store_dir)
    index_bytes = index_file_size_bytes(rocketmq.hash_slot_num, rocketmq.index_num_max)
    written = {
        "segment_size_mib": _size_of_one(store.store_path_commit_log, "*")
        == rocketmq.segment_size_mib * MIB,
        "consume_queue_file_entries": _size_of_one(store.store_path_consume_queue, "*/*/*")
        == rocketmq.consume_queue_file_entries * CQ_STORE_UNIT_SIZE_BYTES,
        "hash_slot_num": _size_of_one(store.store_path_index, "*") == index_bytes,
    }
    written["index_num_max"] = written["hash_slot_num"]
    kept = [name for name in FIELDS if written[name] and name in defaulted]
    return replace(asked, **{name: getattr(rocketmq, name) for name in kept}), kept


def _size_of_one(directory: Path, pattern: str) -> int:
    """The size of one file matching ``pattern`` under ``directory``; -1 when there is none."""
    for path in sorted(directory.glob(pattern)):
        if path.is_file() and path.name.isdigit():
            return path.stat().st_size
    return -1
