"""The RocksDB outbox's reopen on a full disk (outbox/disk_reserve.py: how large), on a real
16 MiB filesystem:

- a reserve smaller than what a reopen may write (two write buffers and a margin) is refused at
  open, naming the field and the minimum; so is a write buffer out of bounds; none (0) is not;
- with a reserve of exactly that minimum, a disk filled under an outbox whose log holds most of
  a write buffer: the reopen fits, and everything held is drained, with two log lines (the disk
  is full; reopened), none of them a failure;
- with no reserve, the reopen fails for as long as the disk is full and is tried again every
  half second; those failures log at most one line per REOPEN_LOG_INTERVAL_S (counted against
  the failures, not timed); once there is room the outbox reopens and drains everything;
- an outbox left so still closes without an error, and opens again once there is room.
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

import pytest

from outbox import OutboxConfigError, OutboxError, OutboxUnavailableError, open_outbox
from outbox.backends.rocksdb.outbox import RocksDBOutbox
from outbox.disk_reserve import (
    REOPEN_LOG_INTERVAL_S,
    WRITE_BUFFER_BYTES_DEFAULT,
    WRITE_BUFFER_BYTES_MIN,
    reserve_bytes_min,
)
from outbox.entry import OutboxLimits
from tests.outbox.backends.rocksdb.test_rocksdb_no_space import drain
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, message_id, receipt
from tests.outbox.small_fs import small_disk
from tests.rocketbox_process import wait_until

pytestmark = pytest.mark.slow

FS_BYTES = 16 * 1024 * 1024
WRITE_BUFFER_BYTES = 1024 * 1024
BODY_BYTES = 1_000
# Most of a write buffer (not yet flushed): what the reopen must write to a table from the log.
HELD = 650
LEASED = 100
PUTS_UNTIL_FULL_MAX = 5_000
FAILED_REOPENS = 4
DEADLINE_S = 30.0
LOGGER = "outbox.backends.rocksdb"


def open_rocksdb(directory: Path, reserve_bytes: int) -> RocksDBOutbox:
    sizes = f"reserve_bytes={reserve_bytes}&write_buffer_bytes={WRITE_BUFFER_BYTES}"
    outbox = open_outbox(f"rocksdb://{directory}?{sizes}")
    assert isinstance(outbox, RocksDBOutbox)
    return outbox


def body(n: int) -> bytes:
    """Bytes that do not compress: the table a reopen writes is as large as the log."""
    return random.Random(n).randbytes(BODY_BYTES)


def fill_and_hold(outbox: RocksDBOutbox) -> list[str]:
    """HELD entries put (LEASED of them claimed by w1); the ids."""
    for start in range(0, HELD, 50):
        outbox.put([entry(n, body=body(n)) for n in range(start, start + 50)])
    assert len(outbox.claim_due(NOW_MS, LEASED, LEASE_MS, "w1")) == LEASED
    return [message_id(n) for n in range(HELD)]


def puts_until_refused(outbox: RocksDBOutbox) -> list[str]:
    """Put one entry at a time until one is refused (the disk is full); the ids taken."""
    put: list[str] = []
    for n in range(HELD, HELD + PUTS_UNTIL_FULL_MAX):
        try:
            outbox.put([entry(n, body=body(n))])
        except OutboxError:
            return put
        put.append(message_id(n))
    raise AssertionError(f"{PUTS_UNTIL_FULL_MAX} puts taken on a full disk")


def drain_all(outbox: RocksDBOutbox) -> list[str]:
    """w1's leased entries delivered, then everything else; the ids delivered."""
    leased = [message_id(n) for n in range(LEASED)]
    assert outbox.mark_delivered_many([(i, receipt(0)) for i in leased]) == [True] * LEASED
    return leased + drain(outbox, "w2")


def lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(1 for r in caplog.records if r.name == LOGGER and text in r.getMessage())


def test_a_reserve_smaller_than_a_reopen_needs_is_refused_naming_the_minimum(
    tmp_path: Path,
) -> None:
    least = reserve_bytes_min(WRITE_BUFFER_BYTES_DEFAULT)
    with pytest.raises(OutboxConfigError, match=f"at least reserve_bytes={least} ") as refused:
        open_outbox(f"rocksdb://{tmp_path / 'a'}?reserve_bytes={least - 1}")
    assert f"reserve_bytes={least - 1} is too small" in str(refused.value)
    assert f"write_buffer_bytes={WRITE_BUFFER_BYTES_DEFAULT}" in str(refused.value)
    small = reserve_bytes_min(WRITE_BUFFER_BYTES_MIN)
    with pytest.raises(OutboxConfigError, match=f"at least reserve_bytes={small} "):
        RocksDBOutbox(
            tmp_path / "b",
            OutboxLimits(),
            reserve_bytes=1,
            write_buffer_bytes=WRITE_BUFFER_BYTES_MIN,
        )
    with pytest.raises(OutboxConfigError, match="write_buffer_bytes=1024 is out of bounds"):
        open_outbox(f"rocksdb://{tmp_path / 'c'}?reserve_bytes=0&write_buffer_bytes=1024")
    with pytest.raises(OutboxConfigError, match="write_buffer_bytes must be a whole number"):
        open_outbox(f"rocksdb://{tmp_path / 'c'}?write_buffer_bytes=1e6")
    assert not any((tmp_path / name).exists() for name in "abc"), "refused before any open"
    open_outbox(f"rocksdb://{tmp_path / 'd'}?reserve_bytes=0").close()
    open_outbox(
        f"rocksdb://{tmp_path / 'e'}?reserve_bytes={small}&write_buffer_bytes=65536"
    ).close()


def test_a_reserve_of_the_minimum_holds_the_reopen_and_the_drain_logs_two_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    with small_disk(tmp_path / "fs", FS_BYTES) as disk:
        outbox = open_rocksdb(disk.mount_dir / "outbox", reserve_bytes_min(WRITE_BUFFER_BYTES))
        try:
            held = fill_and_hold(outbox)
            disk.fill()
            held += puts_until_refused(outbox)
            assert sorted(drain_all(outbox)) == sorted(held), "each held entry delivered once"
            assert outbox.stats(NOW_MS).pending == 0
            assert disk.filler.exists()
        finally:
            outbox.close()
    assert outbox.reopen_failures.events == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings
    assert lines(caplog, "the disk is full") == lines(caplog, "reopened") == 1


def test_a_reopen_that_keeps_failing_logs_once_an_interval_and_drains_once_there_is_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    with small_disk(tmp_path / "fs", FS_BYTES) as disk:
        outbox = open_rocksdb(disk.mount_dir / "outbox", 0)
        try:
            held = fill_and_hold(outbox)
            disk.fill()
            started_s = time.monotonic()
            held += puts_until_refused(outbox)

            def failed_again() -> bool:
                with pytest.raises(OutboxUnavailableError):
                    outbox.claim_due(NOW_MS, 10, LEASE_MS, "w2")
                return outbox.reopen_failures.events >= FAILED_REOPENS

            wait_until(failed_again, DEADLINE_S, f"{FAILED_REOPENS} reopens failed")
            failing_s = time.monotonic() - started_s
            failures = outbox.reopen_failures.events
            logged = lines(caplog, "reopening it failed")
            assert 1 <= logged <= 1 + failing_s / REOPEN_LOG_INTERVAL_S < failures

            disk.free()

            def claims_again() -> bool:
                try:
                    outbox.stats(NOW_MS)
                except OutboxUnavailableError:
                    return False
                return True

            wait_until(claims_again, DEADLINE_S, "the outbox reopened once there was room")
            assert sorted(drain_all(outbox)) == sorted(held), "each held entry delivered once"
        finally:
            outbox.close()
    assert lines(caplog, "reopened") == 1
    assert lines(caplog, "reopening it failed") == logged, "no line since"


def test_an_outbox_that_could_not_reopen_closes_and_opens_again_once_there_is_room(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "fs", FS_BYTES) as disk:
        outbox = open_rocksdb(disk.mount_dir / "outbox", 0)
        try:
            held = fill_and_hold(outbox)
            disk.fill()
            held += puts_until_refused(outbox)
            with pytest.raises(OutboxUnavailableError, match="could not be reopened yet"):
                outbox.claim_due(NOW_MS, 10, LEASE_MS, "w2")
        finally:
            outbox.close()  # its database was closed by the failed reopen: no error
        disk.free()
        with open_rocksdb(disk.mount_dir / "outbox", 0) as again:
            assert sorted(drain(again, "w3")) == sorted(held), "w1's leases died with it"
