"""What the RocksDB outbox promises beyond the contract (outbox/backends/rocksdb/outbox.py):

- a writer killed by a real SIGKILL mid-stream loses no entry whose put had returned, and the
  reopened outbox is consistent: counts, seqs, FIFO heads, every entry claimable exactly once;
- a clean reopen restores everything the outbox keeps in memory (counts, bytes, group heads,
  the seq counter) but the leases, whose holder is gone: their entries are claimed at once, maybe
  stored, and expire_leases writes them down whatever their owner;
- one process, one instance: a second opener is refused, clearly; a read-only opener
  (``?read_only=true``) reads beside it and every write it tries fails;
- after 20k deliveries a claim is still one range scan: it returns the right entries and RocksDB
  steps over almost no deleted keys to find them (a deterministic count, not a timing);
- a put_groups of 64 requests is one write and one WAL fsync, and so is a claim of 64 entries
  (a claim of none fsyncs nothing); a mark_delivered_many is one write and no fsync of its own
  (test_power_cut.py: why);
- relative paths in the URL.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from outbox import (
    EntryState,
    OutboxLimits,
    OutboxNotFoundError,
    OutboxUnavailableError,
    open_outbox,
)
from outbox.backends.rocksdb.outbox import RocksDBOutbox
from tests.outbox.backends.rocksdb.rocksdb_writer import writer_body
from tests.outbox.entries import LEASE_MS, NOW_MS, TOPIC, entry, ids, message_id, receipt

REPO_ROOT = Path(__file__).resolve().parents[4]
PUT_DEADLINE_S = 60.0
SKIPS = "rocksdb.number.iter.skip"
WAL_SYNCS = "rocksdb.wal.synced"
WRITES = "rocksdb.write.self"


def open_rocksdb(path: Path, *, statistics: bool = False) -> RocksDBOutbox:
    query = "?statistics=true" if statistics else ""
    outbox = open_outbox(f"rocksdb://{path}{query}")
    assert isinstance(outbox, RocksDBOutbox)
    return outbox


class Writer:
    """rocksdb_writer.py (beside this file) in a child process, and the PUT lines it printed."""

    def __init__(self, path: Path, threads: int, puts_max: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.outbox.backends.rocksdb.rocksdb_writer", str(path),
             str(threads), str(puts_max)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self.acked: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("PUT "):
                with self._cond:
                    self.acked.append(line.split()[1])
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for_acks(self, count: int) -> None:
        deadline = time.monotonic() + PUT_DEADLINE_S
        with self._cond:
            while len(self.acked) < count:
                assert self.proc.poll() is None, f"writer exited early: {self._stderr()}"
                left_s = deadline - time.monotonic()
                assert left_s > 0, f"only {len(self.acked)} puts acknowledged in time"
                self._cond.wait(timeout=left_s)

    def kill(self) -> list[str]:
        """SIGKILL (a real signal), reap, and return what had been acknowledged."""
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=PUT_DEADLINE_S) == -signal.SIGKILL
        self._reader.join(timeout=PUT_DEADLINE_S)
        self.close()
        with self._cond:
            return list(self.acked)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=PUT_DEADLINE_S)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def _stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


@pytest.mark.slow
def test_sigkill_mid_stream_loses_no_acknowledged_put(tmp_path: Path) -> None:
    path = tmp_path / "outbox"
    threads = 4
    writer = Writer(path, threads, puts_max=200_000)
    try:
        writer.wait_for_acks(1_500)
        acked = writer.kill()
    finally:
        writer.close()
    assert len(acked) >= 1_500

    outbox = open_rocksdb(path)
    try:
        for acked_id in acked:
            got = outbox.get(acked_id)
            assert got is not None, f"{acked_id} was acknowledged and is gone"
            number = int(acked_id[10:], 16)
            assert got.message.body == writer_body(number)
            assert got.state is EntryState.PENDING

        # The reopened outbox is consistent with itself: counts, seqs, FIFO heads.
        every = list(outbox.scan_all())
        assert len(every) >= len(acked)
        assert outbox.stats(NOW_MS).pending == len(every)
        assert outbox.stats(NOW_MS).bytes == sum(e.body_bytes for e in every)
        seqs = [e.seq for e in every]
        assert seqs == sorted(set(seqs))
        for t in range(threads):
            assert outbox.has_pending_group(TOPIC, f"g{t}")

        # Every entry is claimed exactly once, and each group leaves in seq order.
        left: dict[str | None, list[int]] = {}
        while batch := outbox.claim_due(NOW_MS, 500, LEASE_MS, "w"):
            for e in batch:
                left.setdefault(e.message.message_group, []).append(e.seq)
                assert outbox.mark_delivered(e.message_id, receipt(0))
        assert sum(len(s) for s in left.values()) == len(every)
        for group, group_seqs in left.items():
            if group is not None:
                assert group_seqs == sorted(group_seqs), group
        (late,) = outbox.put([entry(99_999_999)])
        assert late.seq > seqs[-1]
    finally:
        outbox.close()


def test_reopen_restores_counts_heads_and_seq_and_ends_the_dead_process_s_leases(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox"
    outbox = open_rocksdb(path)
    outbox.put(
        [
            *(entry(n, group="g") for n in (1, 2, 3)),
            entry(4),
            entry(5),
            entry(6, body=b"x" * 1000),
            entry(7, group="h"),
        ]
    )
    assert ids(outbox.claim_due(NOW_MS, 3, LEASE_MS, "w1")) == [message_id(n) for n in (1, 4, 5)]
    assert outbox.reschedule(message_id(5), "w1", NOW_MS + 100, "busy", NOW_MS, maybe_stored=False)
    assert outbox.bury(message_id(4), "w1", "dead", NOW_MS)
    assert outbox.mark_delivered(message_id(7), receipt(7))
    before_stats = outbox.stats(NOW_MS)
    assert before_stats.in_flight == 1
    before_entries = list(outbox.scan_all())
    outbox.close()

    outbox = open_rocksdb(path)
    try:
        # 1's lease died with the process that held it (one process per directory): it is not
        # in flight and is claimed at once, maybe stored. The rest is as it was.
        assert outbox.stats(NOW_MS) == replace(before_stats, in_flight=0)
        assert list(outbox.scan_all()) == before_entries
        assert outbox.has_pending_group(TOPIC, "g")
        assert not outbox.has_pending_group(TOPIC, "h")
        taken = outbox.claim_due(NOW_MS, 10, LEASE_MS, "w2")
        assert ids(taken) == [message_id(1), message_id(6)]
        assert [e.maybe_stored for e in taken] == [True, False]
        assert ids(outbox.claim_due(NOW_MS + 100, 10, LEASE_MS, "w2")) == [message_id(5)]
        assert outbox.mark_delivered(message_id(1), receipt(1))
        assert ids(outbox.claim_due(NOW_MS + 101, 10, LEASE_MS, "w2")) == [message_id(2)]
        (new,) = outbox.put([entry(8)])
        assert new.seq == max(e.seq for e in before_entries) + 1
    finally:
        outbox.close()


def test_expire_leases_writes_down_every_lease_found_at_open_whatever_its_owner(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox"
    with open_rocksdb(path) as outbox:
        outbox.put([entry(1), entry(2)])
        assert ids(outbox.claim_due(NOW_MS, 1, LEASE_MS, "host-a/1")) == [message_id(1)]
    with open_rocksdb(path) as outbox:
        assert outbox.expire_leases("host-b/", NOW_MS) == 1
        got = outbox.get(message_id(1))
        assert got is not None
        assert (got.lease_owner, got.lease_until_ms, got.maybe_stored) == (None, 0, True)
        assert ids(outbox.claim_due(NOW_MS, 1, LEASE_MS, "host-b/2")) == [message_id(1)]
    with open_rocksdb(path) as outbox:
        # Found at open again (host-b/2 left no outcome): ended again, whatever the prefix.
        assert outbox.expire_leases("host-c/", NOW_MS) == 1


def test_a_second_open_of_the_same_directory_is_refused(tmp_path: Path) -> None:
    outbox = open_rocksdb(tmp_path / "outbox")
    try:
        with pytest.raises(OutboxUnavailableError, match="one process"):
            open_rocksdb(tmp_path / "outbox")
    finally:
        outbox.close()
    open_rocksdb(tmp_path / "outbox").close()  # free again once closed


def test_read_only_opens_beside_the_holder_and_refuses_every_write(tmp_path: Path) -> None:
    with open_rocksdb(tmp_path) as holder:
        holder.put([entry(1), entry(2)])
        with open_outbox(f"rocksdb://{tmp_path}?read_only=true") as reader:
            assert reader.stats(NOW_MS).pending == 2, "it reads what the holder wrote (its WAL)"
            assert reader.get(message_id(1)) == holder.get(message_id(1))
            with pytest.raises(OutboxUnavailableError):
                reader.check_writable()
            with pytest.raises(OutboxUnavailableError):
                reader.put([entry(3)])
        assert holder.get(message_id(3)) is None
    with pytest.raises(OutboxUnavailableError):
        open_outbox(f"rocksdb://{tmp_path / 'none'}?read_only=true")  # never creates one
    assert not (tmp_path / "none" / "CURRENT").exists(), "no database was created"
    with pytest.raises(OutboxNotFoundError, match="no such outbox: no RocksDB database at"):
        open_outbox(f"rocksdb://{tmp_path / 'gone'}", create=False)  # a reader's open, writable
    assert not (tmp_path / "gone").exists(), "no directory was created"


def test_claim_after_20k_deliveries_is_still_one_range_scan(tmp_path: Path) -> None:
    outbox = open_rocksdb(tmp_path / "outbox", statistics=True)
    try:
        deliveries = 20_000
        for start in range(0, deliveries, 1_000):
            outbox.put([entry(n, body=b"x" * 64) for n in range(start, start + 1_000)])
        skips_before_claims = outbox.ticker(SKIPS)
        while batch := outbox.claim_due(NOW_MS, 500, LEASE_MS, "w1"):
            for e in batch:
                assert outbox.mark_delivered(e.message_id, receipt(0, NOW_MS + 1))
        # Claiming from the front of the due index never walks what earlier claims deleted.
        assert outbox.ticker(SKIPS) - skips_before_claims < 1_000

        # New entries as due as the delivered ones were, claimed after all those leases ended.
        fresh = [entry(deliveries + n, next_send_time_ms=NOW_MS) for n in range(10)]
        outbox.put(fresh)
        skips_before = outbox.ticker(SKIPS)
        claimed = outbox.claim_due(NOW_MS + 2 * LEASE_MS, 100, LEASE_MS, "w2")
        assert ids(claimed) == ids(fresh)
        assert outbox.ticker(SKIPS) - skips_before < 100, "the claim walked tombstones"
        stats = outbox.stats(NOW_MS + 2 * LEASE_MS)
        assert (stats.pending, stats.in_flight, stats.delivered) == (10, 10, deliveries)
        assert outbox.purge(EntryState.DELIVERED, NOW_MS + 2) == deliveries
        assert outbox.stats(NOW_MS).delivered == 0
    finally:
        outbox.close()


def test_put_groups_and_claims_are_one_synced_write_and_deliveries_one_write(
    tmp_path: Path,
) -> None:
    outbox = open_rocksdb(tmp_path / "outbox", statistics=True)
    try:
        synced, writes = outbox.ticker(WAL_SYNCS), outbox.ticker(WRITES)
        answers = outbox.put_groups([[entry(n)] for n in range(64)])
        assert all(isinstance(a, list) for a in answers)
        assert (outbox.ticker(WAL_SYNCS) - synced, outbox.ticker(WRITES) - writes) == (1, 1)

        synced, writes = outbox.ticker(WAL_SYNCS), outbox.ticker(WRITES)
        claimed = outbox.claim_due(NOW_MS, 64, LEASE_MS, "w1")
        assert (outbox.ticker(WAL_SYNCS) - synced, outbox.ticker(WRITES) - writes) == (1, 1)
        synced = outbox.ticker(WAL_SYNCS)
        assert outbox.claim_due(NOW_MS, 64, LEASE_MS, "w1") == []
        assert outbox.ticker(WAL_SYNCS) == synced
        synced, writes = outbox.ticker(WAL_SYNCS), outbox.ticker(WRITES)
        delivered = outbox.mark_delivered_many([(e.message_id, receipt(0)) for e in claimed])
        assert delivered == [True] * 64
        assert (outbox.ticker(WAL_SYNCS) - synced, outbox.ticker(WRITES) - writes) == (0, 1)
    finally:
        outbox.close()


def test_url_may_name_a_relative_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    outbox = open_outbox("rocksdb://./data/outbox", OutboxLimits())
    try:
        outbox.put([entry(1)])
    finally:
        outbox.close()
    assert (tmp_path / "data" / "outbox" / "CURRENT").is_file()
