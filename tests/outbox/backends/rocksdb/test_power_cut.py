"""A power cut while a RocksDB outbox drains (outbox/backends/rocksdb/outbox.py: durability),
on the exact model of power_cut.py: the outbox as the cut leaves it is its synced WAL.

- a claim is durable once claim_due returns: cut right then, the claimed entries come back
  under their dead holder's lease, so the first claim after the restart hands them out
  ``maybe_stored`` (the resend checks the broker's index), the others not;
- without the claims' fsync (the behaviour before, ``sync_claims=False``) the same cut brings
  them back as plain PENDING entries, resent unchecked: the duplicates the fsync prevents. This
  also shows that the model drops what was not synced;
- a delivered mark is not synced of its own (mark_delivered_many writes no fsync): cut right
  after it, the entries come back as after the claim, maybe stored, never as plain PENDING;
  what a SIGKILL leaves (every byte the kernel had) holds the marks;
- the next claim's fsync makes the marks before it durable too: the WAL is one sequence.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox import EntryState, OutboxEntry
from outbox.backends.rocksdb.outbox import RocksDBOutbox
from outbox.entry import OutboxLimits
from tests.outbox.backends.rocksdb.power_cut import PowerCutWriter
from tests.outbox.entries import LEASE_MS, NOW_MS, message_id

pytestmark = pytest.mark.slow

PUT = 12
CLAIM = 5


def after_restart(directory: Path) -> tuple[dict[str, EntryState], dict[str, bool]]:
    """Open the outbox a cut left, as a restarted sidecar: every entry's state, and for every
    entry its first claim hands out, whether it comes ``maybe_stored``."""
    outbox = RocksDBOutbox(directory, OutboxLimits(), reserve_bytes=0)
    try:
        states = {e.message_id: e.state for e in outbox.scan_all()}
        claimed: list[OutboxEntry] = outbox.claim_due(NOW_MS, PUT, LEASE_MS, "restarted")
        return states, {e.message_id: e.maybe_stored for e in claimed}
    finally:
        outbox.close()


def test_a_claim_survives_a_cut_right_after_it_and_its_entries_come_back_maybe_stored(
    tmp_path: Path,
) -> None:
    with PowerCutWriter(tmp_path / "outbox", tmp_path) as writer:
        put = writer.run(f"put {PUT}")
        claimed = writer.run(f"claim {CLAIM}")
        assert claimed == [message_id(n) for n in range(CLAIM)]
        states, maybe_stored = after_restart(writer.cut(tmp_path / "cut"))
    assert states == dict.fromkeys(put, EntryState.PENDING)
    assert maybe_stored == {i: i in claimed for i in put}, "claimed ones: the index check"


def test_without_the_claims_fsync_a_cut_brings_claimed_entries_back_unchecked(
    tmp_path: Path,
) -> None:
    with PowerCutWriter(tmp_path / "outbox", tmp_path, sync_claims=False) as writer:
        put = writer.run(f"put {PUT}")
        writer.run(f"claim {CLAIM}")
        _, maybe_stored = after_restart(writer.cut(tmp_path / "cut"))
        _, after_kill = after_restart(writer.copy(tmp_path / "kill"))
    assert maybe_stored == dict.fromkeys(put, False), "sent maybe, and resent unchecked"
    assert sum(after_kill.values()) == CLAIM, "a SIGKILL keeps the unsynced claim: no model"


def test_a_lost_delivered_mark_brings_its_entry_back_maybe_stored_until_the_next_claim(
    tmp_path: Path,
) -> None:
    with PowerCutWriter(tmp_path / "outbox", tmp_path) as writer:
        put = writer.run(f"put {PUT}")
        first = writer.run(f"claim {CLAIM}")
        assert writer.run("deliver") == first
        cut_states, cut_maybe = after_restart(writer.cut(tmp_path / "cut-after-marks"))
        kill_states, _ = after_restart(writer.copy(tmp_path / "kill-after-marks"))
        second = writer.run(f"claim {CLAIM}")
        next_states, next_maybe = after_restart(writer.cut(tmp_path / "cut-after-next-claim"))
        writer.run("quit")

    # The marks were not synced: the cut loses them, and the entries are checked, not resent.
    assert cut_states == dict.fromkeys(put, EntryState.PENDING)
    assert cut_maybe == {i: i in first for i in put}
    # A process crash keeps them: the kernel had the bytes.
    assert {i for i, s in kill_states.items() if s is EntryState.DELIVERED} == set(first)
    # The next claim's fsync carried them: delivered; its own entries come back maybe stored.
    assert {i for i, s in next_states.items() if s is EntryState.DELIVERED} == set(first)
    assert next_maybe == {i: i in second for i in put if i not in first}
