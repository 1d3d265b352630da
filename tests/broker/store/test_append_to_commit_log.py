"""A slave's raw write, ``append_to_commit_log`` (RocketMQ's appendToCommitLog), on real files.

Proves: a master's log copied into another store segment by segment comes out byte-identical,
blank end markers included, and the copy's own dispatcher builds consume queues that serve the
same messages, also after a restart; bytes that do not continue the log (a gap, an overlap, a
first segment that does not start on a segment boundary) or that would cross a segment end are
refused with the reason and leave the log as it was; a store told to refuse puts (a slave's)
answers SERVICE_NOT_AVAILABLE naming why, while the raw append still works.
"""

from __future__ import annotations

from pathlib import Path

from broker.store.message_store import DefaultMessageStore
from broker.store.status import PutMessageStatus
from tests.broker.store.conftest import MakeConfig, OpenStore
from tests.broker.store.store_helpers import (
    BLANK_MAGIC,
    dispatched,
    message,
    put_ok,
    read_i32_pair,
    read_queue,
)

SEGMENT_BYTES = 64 * 1024


def copy_log(master: DefaultMessageStore, slave: DefaultMessageStore) -> None:
    """Hand the slave the master's log as whole segments' written parts (whole records)."""
    for mf in master.commit_log.mapped_file_queue:
        data = mf.read(0, mf.wrote_position)
        assert slave.append_to_commit_log(mf.file_from_offset, data) is None


def segment_bytes(root: Path, end: int) -> list[bytes]:
    """The log's segments up to ``end``: a next segment being made ahead in the background
    (``*.warming``, then renamed) is not part of the log and may come and go while we read."""
    names = sorted(p.name for p in (root / "commitlog").iterdir() if p.name.isdigit())
    return [(root / "commitlog" / n).read_bytes() for n in names if int(n) < end]


def test_a_copied_log_is_byte_identical_and_serves_the_same_messages(
    make_config: MakeConfig, open_store: OpenStore, tmp_path: Path
) -> None:
    master = open_store()
    for i in range(150):  # ~150 KiB: three segments, two blank end markers
        put_ok(master, message(bytes([i % 251]) * 900, queue_id=i % 2, keys=[f"k{i}"]))
    dispatched(master)
    slave_config = make_config(store_path_root_dir=tmp_path / "slave")
    slave = open_store(slave_config)
    copy_log(master, slave)
    dispatched(slave)
    end = master.commit_log.max_offset
    assert slave.commit_log.max_offset == end > 2 * SEGMENT_BYTES
    master.flush_logics()
    copied = segment_bytes(tmp_path / "slave", end)
    assert len(copied) == 3
    assert copied == segment_bytes(master.config.store_path_root_dir, end)
    for queue_id in (0, 1):
        got = [(m.msg_id, m.body) for m in read_queue(slave, "TopicTest", queue_id)]
        assert got == [(m.msg_id, m.body) for m in read_queue(master, "TopicTest", queue_id)]
        assert len(got) == 75
    slave.shutdown()
    again = open_store(slave_config)
    assert again.commit_log.max_offset == end
    assert len(read_queue(dispatched(again), "TopicTest", 0)) == 75


def test_bytes_that_do_not_continue_the_log_are_refused(
    make_config: MakeConfig, open_store: OpenStore, tmp_path: Path
) -> None:
    master = open_store()
    for i in range(80):
        put_ok(master, message(b"x" * 900, keys=[f"k{i}"]))
    first, second = master.commit_log.mapped_file_queue.files[:2]
    whole_first = first.read(0, first.wrote_position)
    slave = open_store(make_config(store_path_root_dir=tmp_path / "slave"))

    refused = slave.append_to_commit_log(100, whole_first[:100])
    assert refused == f"phy_offset 100 does not start a segment of {SEGMENT_BYTES} bytes"
    assert slave.append_to_commit_log(0, whole_first[:5000]) is None
    assert slave.append_to_commit_log(6000, whole_first[6000:7000]) == (
        "phy_offset 6000 is not this log's end 5000"
    )
    assert slave.append_to_commit_log(4000, whole_first[4000:7000]) == (
        "phy_offset 4000 is not this log's end 5000"
    )
    crossing = whole_first[5000:] + second.read(0, 100)
    assert slave.append_to_commit_log(5000, crossing) == (
        f"{len(crossing)} bytes at phy_offset 5000 cross a segment end"
    )
    assert slave.commit_log.max_offset == 5000  # nothing refused was written
    assert slave.append_to_commit_log(5000, whole_first[5000:]) is None
    assert slave.append_to_commit_log(SEGMENT_BYTES, second.read(0, second.wrote_position)) is None
    # The master's blank end marker arrived as its bytes: the first segment is full.
    size, magic = read_i32_pair(slave.config, _blank_marker_offset(master))
    assert magic == BLANK_MAGIC
    assert size == SEGMENT_BYTES - _blank_marker_offset(master)


def _blank_marker_offset(master: DefaultMessageStore) -> int:
    """Where the master's first segment's last record ends: its blank marker."""
    offset = 0
    while True:
        size, magic = read_i32_pair(master.config, offset)
        if magic == BLANK_MAGIC:
            return offset
        offset += size


def test_a_store_refusing_puts_still_takes_its_masters_bytes(
    make_config: MakeConfig, open_store: OpenStore, tmp_path: Path
) -> None:
    master = open_store()
    put_ok(master, message(b"from the master"))
    slave = open_store(make_config(store_path_root_dir=tmp_path / "slave"))
    slave.refuse_puts("broker-a-1 is a SLAVE; send to its master")
    [result] = slave.put_messages([message(b"to the slave")])
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert result.detail == "broker-a-1 is a SLAVE; send to its master"
    assert slave.commit_log.max_offset == 0
    copy_log(master, slave)
    [got] = read_queue(dispatched(slave), "TopicTest", 0)
    assert got.body == b"from the master"
