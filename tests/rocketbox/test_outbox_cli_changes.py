"""`rocketbox outbox` changes, against RocksDB, Redis and MySQL outboxes on the real services.

What it proves, on each of the three backends:
- a DEAD entry requeued, and a PENDING entry due in a year made due by retry-now, are delivered
  to a real broker by a real sidecar (real processes throughout);
- purge refuses without --yes when stdin is no terminal (exit 5) and deletes nothing; on a
  terminal it asks, and deletes only on yes; --dry-run counts and deletes nothing; --yes deletes;
  PENDING is never purged.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import replace

import pytest

from outbox import EntryState, SpoolCause, open_outbox
from outbox.export import export_row
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.outbox.entries import LEASE_MS, NOW_MS, message_id
from tests.rocketbox.outbox_cli_support import (
    DELIVERY_DEADLINE_S,
    E1,
    E2,
    E3,
    E4,
    HOUR_MS,
    cli,
    cli_json,
    entry,
    run,
    seed,
)
from tests.sidecar.sidecar_process import SidecarProcess, wait_stored

pytestmark = pytest.mark.slow

# -- requeue and retry-now, then a real sidecar delivers ------------------------------------------


def v1_id() -> str:
    """A message id of RocketMQ's shape, new to the test's broker."""
    return "7F0000010000" + uuid.uuid4().hex[:22].upper()


def test_requeued_dead_entry_and_retried_entry_are_delivered(
    url: str, broker: BrokerProcess
) -> None:
    # The sidecar's clock: an entry it finds older than --age-max-s is buried at its first
    # failed resend.
    now_ms = int(time.time() * 1000)
    dead, later = v1_id(), v1_id()
    with open_outbox(url) as outbox:
        base = entry(1, "Orders", SpoolCause.UNAVAILABLE, now_ms, now_ms, b"requeued")
        year_ms = 365 * 24 * HOUR_MS
        outbox.put(
            [
                replace(base, message=replace(base.message, message_id=dead)),
                replace(
                    base,
                    message=replace(base.message, message_id=later, body=b"retried now"),
                    next_send_time_ms=now_ms + 100 * year_ms,
                ),
            ]
        )
        assert [e.message_id for e in outbox.claim_due(now_ms, 10, LEASE_MS, "w1")] == [dead]
        assert outbox.bury(dead, "w1", "64 resends failed", now_ms)
    # A RocksDB outbox admits one process: the CLI goes first there, while the sidecar is down.
    shared = not url.startswith("rocksdb:")
    sidecar = SidecarProcess(broker.endpoint, url) if shared else None
    try:
        requeued = run("requeue", dead, "--json", "--outbox", url)
        assert requeued.returncode == 0, requeued.stderr
        assert json.loads(requeued.stdout) == {"requeued": 1, "asked": 1}
        retried = run("retry-now", later, "--json", "--outbox", url)
        assert retried.returncode == 0, retried.stderr
        assert json.loads(retried.stdout) == {"made_due": 1, "asked": 1}
        if sidecar is None:
            sidecar = SidecarProcess(broker.endpoint, url)
        for sent in (dead, later):
            assert len(wait_stored(broker.endpoint, sent)) == 1
        if shared:
            with open_outbox(url) as outbox:

                def both_delivered() -> bool:
                    got = [outbox.get(i) for i in (dead, later)]
                    return all(e is not None and e.state is EntryState.DELIVERED for e in got)

                wait_until(both_delivered, DELIVERY_DEADLINE_S, "the outbox to mark both delivered")
        sidecar.stop()
    finally:
        if sidecar is not None:
            sidecar.kill()
    for sent in (dead, later):
        shown = run("show", sent, "--json", "--outbox", url)
        assert shown.returncode == 0, shown.stderr
        row = json.loads(shown.stdout)
        assert (row["state"], row["attempts"]) == ("DELIVERED", 0)
        assert row["queue_offset"] is not None


def test_requeue_and_retry_now_take_ids_or_all(url: str) -> None:
    seed(url)
    for command in ("requeue", "retry-now"):
        neither = cli(url, command)
        assert neither.exit_code == 2
        assert "name the entries by message id, or say --all" in neither.stderr
        assert cli(url, command, E1.message_id, "--all").exit_code == 2
    # At NOW_MS only E2 is due later; E1 is due already and E3, E4 are not PENDING.
    asked = [e.message_id for e in (E1, E2, E3, E4)] + [message_id(999)]
    assert cli_json(url, "retry-now", *asked) == {"made_due": 1, "asked": 5}
    assert cli_json(url, "retry-now", "--all") == {"made_due": 0, "asked": None}
    assert cli_json(url, "requeue", E1.message_id) == {"requeued": 0, "asked": 1}
    assert cli_json(url, "requeue", "--all") == {"requeued": 1, "asked": None}
    with open_outbox(url) as outbox:
        e2, e4 = outbox.get(E2.message_id), outbox.get(E4.message_id)
    assert e2 is not None
    assert (e2.next_send_time_ms, e2.attempts) == (NOW_MS, 2)
    assert e4 is not None
    assert (e4.state, e4.attempts, e4.next_send_time_ms) == (EntryState.PENDING, 0, NOW_MS)


# -- purge ----------------------------------------------------------------------------------------


def counts(url: str) -> tuple[int, int, int]:
    with open_outbox(url) as outbox:
        stats = outbox.stats(NOW_MS)
    return stats.pending, stats.dead, stats.delivered


def test_purge_refuses_without_yes_when_stdin_is_no_terminal(url: str) -> None:
    seed(url)
    refused = run("purge", "--state", "dead", "--older-than", "0s", "--outbox", url)
    assert refused.returncode == 5, refused.stderr
    assert "purge would delete 1 DEAD entry" in refused.stderr
    assert "refused: no --yes, and stdin is not a terminal" in refused.stderr
    assert "Nothing was deleted" in refused.stderr
    assert counts(url) == (3, 1, 1)


def run_on_a_terminal(answer: bytes, *args: str) -> subprocess.CompletedProcess[str]:
    """``run``, stdin a terminal (a pseudo-terminal) on which ``answer`` is typed."""
    controller, terminal = os.openpty()
    try:
        os.write(controller, answer)
        return run(*args, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)


# One backend: the prompt and its answer do not depend on it (purge itself is tested on each).
@pytest.mark.parametrize("url", ["rocksdb"], indirect=True)
def test_purge_on_a_terminal_asks_and_deletes_only_on_yes(url: str) -> None:
    seed(url)
    args = ("purge", "--state", "delivered", "--older-than", "1m", "--outbox", url)
    declined = run_on_a_terminal(b"n\n", *args)
    assert declined.returncode == 5, declined.stderr
    assert "Delete 1 DELIVERED entry changed before" in declined.stderr
    assert "not confirmed; nothing was deleted" in declined.stderr
    assert counts(url) == (3, 1, 1)
    accepted = run_on_a_terminal(b"y\n", *args)
    assert accepted.returncode == 0, accepted.stderr
    assert "purged 1 DELIVERED entry" in accepted.stdout
    assert counts(url) == (3, 1, 0)


def test_purge_dry_run_counts_and_yes_deletes(url: str) -> None:
    stored = seed(url)
    # E4 was buried 19 h ago: older than 18 h, not than 20 h.
    assert cli_json(url, "purge", "--state", "dead", "--older-than", "20h", "--dry-run") == {
        "state": "DEAD",
        "before_ms": NOW_MS - 20 * HOUR_MS,
        "matched": 0,
        "purged": 0,
        "dry_run": True,
    }
    assert cli_json(url, "purge", "--state", "dead", "--older-than", "18h", "--dry-run") == {
        "state": "DEAD",
        "before_ms": NOW_MS - 18 * HOUR_MS,
        "matched": 1,
        "purged": 0,
        "dry_run": True,
    }
    assert counts(url) == (3, 1, 1)
    assert cli_json(url, "purge", "--state", "dead", "--older-than", "18h", "--yes") == {
        "state": "DEAD",
        "before_ms": NOW_MS - 18 * HOUR_MS,
        "matched": 1,
        "purged": 1,
        "dry_run": False,
    }
    assert counts(url) == (3, 0, 1)
    assert cli(url, "show", E4.message_id).exit_code == 4
    assert cli_json(url, "show", E1.message_id) == export_row(stored[E1.message_id])


def test_purge_never_takes_pending_entries(url: str) -> None:
    seed(url)
    refused = cli(url, "purge", "--state", "pending", "--older-than", "0s", "--yes")
    assert refused.exit_code == 2
    assert "PENDING entries are never purged: that would lose messages" in refused.stderr
    assert counts(url) == (3, 1, 1)
