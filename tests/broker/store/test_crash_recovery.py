"""Crash recovery, proven with a real writer process killed by a real SIGKILL.

- A SYNC_FLUSH writer killed mid-stream loses no message whose put had returned: every
  acknowledged message is found at its phy_offset, in its consume queue at its queue_offset,
  and by its id exactly once; queues have no gaps; the store takes new writes after recovery.
- A torn last record, a corrupt record inside the tail, and stray bytes past the end are cut,
  zeroed and reported (reason, bytes dropped), and everything before them survives.
"""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.store.checkpoint import CheckpointState, StoreCheckpoint
from broker.store.codec.message import MessageExtBrokerInner
from broker.store.config import FlushDiskType
from broker.store.message_store import DefaultMessageStore
from broker.store.status import GetMessageStatus, PutMessageStatus
from tests.broker.store.crash_writer import QUEUES, small_config

REPO_ROOT = Path(__file__).resolve().parents[3]
TOPIC = "CrashTopic"
ACK_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Ack:
    msg_id: str
    phy_offset: int
    queue_id: int
    queue_offset: int


class Writer:
    """The crash_writer child process and the ACK lines it printed."""

    def __init__(
        self, store_dir: Path, flush: FlushDiskType, threads: int, messages: int, *extra: str
    ):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.broker.store.crash_writer",
                str(store_dir),
                flush.value,
                str(threads),
                str(messages),
                *extra,
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.acks: list[Ack] = []
        self.errors = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if parts and parts[0] == "ACK":
                self.acks.append(Ack(parts[1], int(parts[2]), int(parts[3]), int(parts[4])))

    def wait_for_acks(self, count: int) -> None:
        deadline = time.monotonic() + ACK_DEADLINE_S
        while len(self.acks) < count:
            if self.proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(
                    f"writer acknowledged {len(self.acks)} of {count} puts in {ACK_DEADLINE_S} s"
                )
            time.sleep(0.01)
        assert len(self.acks) >= count, self.stderr()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.wait_exit()

    def wait_exit(self) -> int:
        code = self.proc.wait(ACK_DEADLINE_S)
        self._reader.join(ACK_DEADLINE_S)
        assert self.proc.stderr is not None
        assert self.proc.stdout is not None
        self.errors = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code

    def stderr(self) -> str:
        return self.errors


def record_size(store_dir: Path, phy_offset: int, segment_size: int) -> int:
    path = store_dir / "commitlog" / f"{phy_offset - phy_offset % segment_size:020d}"
    with path.open("rb") as f:
        f.seek(phy_offset % segment_size)
        (size,) = struct.unpack(">i", f.read(4))
    return int(size)


def overwrite(store_dir: Path, phy_offset: int, data: bytes, segment_size: int) -> None:
    path = store_dir / "commitlog" / f"{phy_offset - phy_offset % segment_size:020d}"
    with path.open("r+b") as f:
        f.seek(phy_offset % segment_size)
        f.write(data)


def rewind_checkpoint(store_dir: Path) -> None:
    """As after a power loss right after start: the checkpoint vouches for nothing yet."""
    cp = StoreCheckpoint(store_dir / "checkpoint")
    cp.state = CheckpointState()
    cp.flush()
    cp.close()


def assert_all_present(store: DefaultMessageStore, acks: list[Ack]) -> None:
    for ack in acks:
        msg = store.look_message_by_offset(ack.phy_offset)
        assert msg is not None, f"{ack.msg_id} lost at phy_offset {ack.phy_offset}"
        assert (msg.msg_id, msg.queue_id, msg.queue_offset) == (
            ack.msg_id,
            ack.queue_id,
            ack.queue_offset,
        )
        got = store.get_message(TOPIC, ack.queue_id, ack.queue_offset, 1)
        assert got.status is GetMessageStatus.FOUND
        assert got.messages[0].msg_id == ack.msg_id
        assert len(store.query_message_by_id(ack.msg_id)) == 1, f"{ack.msg_id} not exactly once"


def assert_queues_dense(store: DefaultMessageStore) -> int:
    """Every queue reads 0..max-1 without a gap or a repeated id; returns the message count."""
    seen: set[str] = set()
    for queue_id in range(QUEUES):
        offset, end = 0, store.get_max_offset_in_queue(TOPIC, queue_id)
        while offset < end:
            got = store.get_message(TOPIC, queue_id, offset, 256)
            assert got.status is GetMessageStatus.FOUND
            assert [m.queue_offset for m in got.messages] == list(
                range(offset, offset + len(got.messages))
            )
            for m in got.messages:
                assert m.msg_id not in seen
                seen.add(m.msg_id or "")
            offset = got.next_begin_offset
    return len(seen)


@pytest.mark.slow
def test_sigkill_mid_stream_loses_no_acknowledged_sync_flush_put(tmp_path: Path) -> None:
    writer = Writer(tmp_path, FlushDiskType.SYNC_FLUSH, 4, 1_000_000)
    writer.wait_for_acks(1500)
    writer.kill()
    assert writer.proc.returncode == -signal.SIGKILL
    acks = list(writer.acks)

    store = DefaultMessageStore(small_config(tmp_path, FlushDiskType.SYNC_FLUSH))
    report = store.start()
    try:
        assert not report.clean_shutdown
        assert report.max_phy_offset >= max(a.phy_offset for a in acks)
        assert len(store.commit_log.mapped_file_queue.files) > 2, "the stream crossed segments"
        assert_all_present(store, acks)
        stored = assert_queues_dense(store)
        assert stored >= len(acks)
        # The store accepts writes again, right after what survived.
        end = store.get_max_offset_in_queue(TOPIC, 0)
        [result] = store.put_messages(
            [MessageExtBrokerInner(TOPIC, b"after", 0, properties={"UNIQ_KEY": "after-crash"})]
        )
        assert result.status is PutMessageStatus.PUT_OK
        assert result.append is not None
        assert result.append.queue_offset == end
        assert result.append.wrote_offset >= report.max_phy_offset
    finally:
        store.shutdown()


def crashed_store(tmp_path: Path, messages: int) -> list[Ack]:
    """A store whose writer put ``messages`` messages, then died by SIGKILL."""
    writer = Writer(tmp_path, FlushDiskType.SYNC_FLUSH, 1, messages, "--suicide")
    assert writer.wait_exit() == -signal.SIGKILL, writer.stderr()
    assert len(writer.acks) == messages
    return sorted(writer.acks, key=lambda a: a.phy_offset)


SEGMENT = small_config(Path("."), FlushDiskType.SYNC_FLUSH).mapped_file_size_commit_log_bytes


@pytest.mark.slow
def test_torn_last_record_is_truncated_and_reported(tmp_path: Path) -> None:
    acks = crashed_store(tmp_path, 300)
    torn = acks[-1]
    size = record_size(tmp_path, torn.phy_offset, SEGMENT)
    # The last 30 bytes never reached the disk; the checkpoint never advanced past them.
    overwrite(tmp_path, torn.phy_offset + size - 30, bytes(30), SEGMENT)
    rewind_checkpoint(tmp_path)

    store = DefaultMessageStore(small_config(tmp_path, FlushDiskType.SYNC_FLUSH))
    report = store.start()
    try:
        assert not report.clean_shutdown
        assert report.truncated
        assert report.max_phy_offset == torn.phy_offset
        assert report.truncate_reason  # names what failed, e.g. the record CRC
        assert report.dropped_bytes == size - 30  # the torn record's bytes that were written
        assert "truncated the tail" in report.summary()
        assert_all_present(store, acks[:-1])
        assert store.look_message_by_id(torn.msg_id) is None
        assert store.get_max_offset_in_queue(TOPIC, torn.queue_id) == torn.queue_offset
        [result] = store.put_messages(
            [MessageExtBrokerInner(TOPIC, b"next", torn.queue_id, properties={"UNIQ_KEY": "next"})]
        )
        assert result.append is not None
        assert result.append.wrote_offset == torn.phy_offset
        assert result.append.queue_offset == torn.queue_offset
    finally:
        store.shutdown()


@pytest.mark.slow
def test_corrupt_record_inside_the_tail_cuts_the_log_there(tmp_path: Path) -> None:
    acks = crashed_store(tmp_path, 200)
    bad = acks[-5]
    tail_bytes = sum(record_size(tmp_path, a.phy_offset, SEGMENT) for a in acks[-5:])
    # One flipped bit in the body of the fifth record from the end.
    overwrite(tmp_path, bad.phy_offset + 200, b"\xff", SEGMENT)
    rewind_checkpoint(tmp_path)

    store = DefaultMessageStore(small_config(tmp_path, FlushDiskType.SYNC_FLUSH))
    report = store.start()
    try:
        assert report.truncated
        assert report.max_phy_offset == bad.phy_offset
        assert "CRC" in report.truncate_reason
        assert report.dropped_bytes >= tail_bytes - SEGMENT  # all of it, unless it crossed segments
        assert_all_present(store, acks[:-5])
        for lost in acks[-5:]:
            assert store.look_message_by_id(lost.msg_id) is None
        assert assert_queues_dense(store) == len(acks) - 5
    finally:
        store.shutdown()


def test_stray_bytes_past_the_end_are_zeroed_and_reported(tmp_path: Path) -> None:
    config = small_config(tmp_path, FlushDiskType.ASYNC_FLUSH)
    with DefaultMessageStore(config) as store:
        for n in range(10):
            msg = MessageExtBrokerInner(
                TOPIC, b"x" * 100, n % QUEUES, properties={"UNIQ_KEY": f"m{n}"}
            )
            store.put_messages([msg])
        end = store.max_phy_offset
    garbage = bytes(range(1, 65))  # no zero byte: its end is where the damage ends
    overwrite(tmp_path, end + 1000, garbage, SEGMENT)

    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.truncated
        assert report.max_phy_offset == end
        assert report.dropped_bytes == 1000 + len(garbage)
        assert assert_queues_dense(store) == 10
    finally:
        store.shutdown()
    segment = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    assert segment[end:] == bytes(len(segment) - end), "the leftovers were zeroed"
