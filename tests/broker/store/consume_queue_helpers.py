"""Files, entries and checks shared by test_consume_queue.py and test_consume_queue_store.py."""

from __future__ import annotations

import struct
from pathlib import Path

from broker.store.consume_queue import (
    CQ_STORE_UNIT_SIZE_BYTES,
    ConsumeQueue,
)

PER_FILE = 8  # entries a segment: small, so tests cross segment boundaries
SEGMENT_BYTES = PER_FILE * CQ_STORE_UNIT_SIZE_BYTES
TOPIC = "TopicTest"
SIZE = 100  # every test record is 100 bytes at phy_offset 100 * i


def open_queue(root: Path, topic: str = TOPIC, queue_id: int = 0) -> ConsumeQueue:
    cq = ConsumeQueue(topic, queue_id, root, PER_FILE)
    cq.load()
    cq.recover()
    return cq


def reopen(cq: ConsumeQueue, root: Path) -> ConsumeQueue:
    cq.flush()
    cq.close()
    return open_queue(root, cq.topic, cq.queue_id)


def put(cq: ConsumeQueue, queue_offsets: range | list[int]) -> None:
    for i in queue_offsets:
        cq.put_message_position_info(SIZE * i, SIZE, -i, i)


def segment_names(cq: ConsumeQueue) -> list[str]:
    return sorted(p.name for p in cq.store_dir.iterdir())


def raw_entry(cq: ConsumeQueue, queue_offset: int) -> tuple[int, int, int]:
    byte = queue_offset * CQ_STORE_UNIT_SIZE_BYTES
    data = (cq.store_dir / f"{byte - byte % SEGMENT_BYTES:020d}").read_bytes()
    phy_offset, size, tag_code = struct.unpack_from(">qiq", data, byte % SEGMENT_BYTES)
    return phy_offset, size, tag_code
