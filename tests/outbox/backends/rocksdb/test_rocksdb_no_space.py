"""The RocksDB outbox on a full disk (outbox/disk_reserve.py), on a real 16 MiB filesystem:

- filled from outside, the outbox finds the disk full at its next write that does not fit: that
  put is refused with OutboxNoSpaceError, and so is every put after it, check_writable says so,
  and its reserve file is gone; every entry it held, leased or not, is still claimed and
  delivered, exactly the ones put before, while the disk stays full;
- once the filler is gone, the reserve is made again and puts are taken again;
- a reserve that does not fit at open leaves the outbox refusing puts from the start, saying
  why, while what it holds is claimed and delivered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox import Outbox, OutboxNoSpaceError, open_outbox
from outbox.disk_reserve import RESERVE_FILE_NAME
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, message_id, receipt
from tests.outbox.small_fs import small_disk
from tests.rocketbox_process import wait_until

pytestmark = pytest.mark.slow

FS_BYTES = 16 * 1024 * 1024
RESERVE_BYTES = 2 * 1024 * 1024
# Small write buffers: a reopen (what the reserve must hold first) writes at most two of them.
WRITE_BUFFER_BYTES = 512 * 1024
SIZES = f"reserve_bytes={RESERVE_BYTES}&write_buffer_bytes={WRITE_BUFFER_BYTES}"
HELD = 300
BODY_BYTES = 1_000
# Puts of one entry tried after the disk is filled: one of them must find it full.
PUTS_UNTIL_FULL_MAX = 2_000
ROOM_AGAIN_DEADLINE_S = 10.0


def drain(outbox: Outbox, owner: str) -> list[str]:
    """Claim and deliver until nothing is due; the ids delivered."""
    delivered: list[str] = []
    while batch := outbox.claim_due(NOW_MS, 64, LEASE_MS, owner):
        ids = [e.message_id for e in batch]
        assert outbox.mark_delivered_many([(i, receipt(0)) for i in ids]) == [True] * len(ids)
        delivered += ids
    return delivered


def puts_until_refused(outbox: Outbox) -> list[str]:
    """Put one entry at a time until the outbox refuses one for want of space; the ids put."""
    put: list[str] = []
    for n in range(HELD, HELD + PUTS_UNTIL_FULL_MAX):
        try:
            outbox.put([entry(n)])
        except OutboxNoSpaceError as e:
            refused = str(e)
            break
        put.append(message_id(n))
    else:
        raise AssertionError(f"{PUTS_UNTIL_FULL_MAX} puts taken on a full disk")
    assert "no room for new entries" in refused
    return put


def test_a_full_disk_refuses_puts_and_still_drains_what_the_outbox_holds(tmp_path: Path) -> None:
    with small_disk(tmp_path / "fs", FS_BYTES) as disk:
        fs = disk.mount_dir
        outbox = open_outbox(f"rocksdb://{fs / 'outbox'}?{SIZES}")
        try:
            reserve = fs / "outbox" / RESERVE_FILE_NAME
            assert reserve.stat().st_size == RESERVE_BYTES
            outbox.put([entry(n, body=bytes(BODY_BYTES)) for n in range(HELD)])
            leased = outbox.claim_due(NOW_MS, 100, LEASE_MS, "w1")
            disk.fill()

            # The log's last page may still take a write or two: puts go on until one does not.
            puts_before_full = puts_until_refused(outbox)
            assert not reserve.exists(), "released for the claims and tombstones to come"
            with pytest.raises(OutboxNoSpaceError, match="spools wait for"):
                outbox.check_writable()
            with pytest.raises(OutboxNoSpaceError):
                outbox.put([entry(10_000)])

            # The drain goes on in the reserve's room: w1 settles what it holds, w2 the rest.
            w1 = [(e.message_id, receipt(1)) for e in leased]
            assert outbox.mark_delivered_many(w1) == [True] * len(leased)
            delivered = [e.message_id for e in leased] + drain(outbox, "w2")
            expected = [message_id(n) for n in range(HELD)] + puts_before_full
            assert sorted(delivered) == sorted(expected), "each held entry delivered once"
            assert outbox.stats(NOW_MS).pending == 0
            assert outbox.get(message_id(10_000)) is None

            # Still full: the filler is there, and puts are still refused.
            assert disk.filler.exists()
            assert disk.free_bytes() < 2 * RESERVE_BYTES
            with pytest.raises(OutboxNoSpaceError):
                outbox.put([entry(10_001)])

            disk.free()

            def put_taken() -> bool:
                try:
                    outbox.put([entry(10_002)])
                except OutboxNoSpaceError:
                    return False
                return True

            wait_until(put_taken, ROOM_AGAIN_DEADLINE_S, "puts taken again once there is room")
            assert reserve.stat().st_size == RESERVE_BYTES, "made again first"
            outbox.check_writable()
            assert [e.message_id for e in outbox.claim_due(NOW_MS, 10, LEASE_MS, "w2")] == [
                message_id(10_002)
            ]
        finally:
            outbox.close()


def test_a_reserve_that_does_not_fit_at_open_refuses_puts_from_the_start(tmp_path: Path) -> None:
    with small_disk(tmp_path / "fs", FS_BYTES) as disk:
        fs = disk.mount_dir
        with open_outbox(f"rocksdb://{fs / 'outbox'}?reserve_bytes=0") as outbox:
            outbox.put([entry(n) for n in range(10)])
        too_large = FS_BYTES * 3 // 4  # spools would wait for twice that free
        sizes = f"reserve_bytes={too_large}&write_buffer_bytes={WRITE_BUFFER_BYTES}"
        outbox = open_outbox(f"rocksdb://{fs / 'outbox'}?{sizes}")
        try:
            with pytest.raises(OutboxNoSpaceError, match="no room for the disk reserve"):
                outbox.check_writable()
            with pytest.raises(OutboxNoSpaceError, match="no room for the disk reserve"):
                outbox.put([entry(10)])
            assert sorted(drain(outbox, "w1")) == [message_id(n) for n in range(10)]
            assert not (fs / "outbox" / RESERVE_FILE_NAME).exists()
        finally:
            outbox.close()
