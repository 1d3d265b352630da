"""What the `rocketbox outbox` tests share: the command run in this process (CliRunner, its clock
pinned) or as a real process, and a known outbox of five entries (one per state and cause).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from click.testing import CliRunner, Result

from outbox import DeliveryReceipt, OutboxEntry, OutboxMessage, SpoolCause, open_outbox
from outbox.export import export_row
from rocketbox.outbox_cli import outbox_group
from tests.outbox.entries import LEASE_MS, NOW_MS, message_id
from tests.rocketbox_process import REPO_ROOT

CLI_BACKENDS = ["rocksdb", "redis", "mysql"]
CLI_DEADLINE_S = 60.0
DELIVERY_DEADLINE_S = 30.0
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
SECRET = "s3cret-pw"


def cli(url: str, *args: str) -> Result:
    """The command in this process, its clock pinned to NOW_MS."""
    command, *rest = args
    argv = [command, "--outbox", url, "--now-ms", str(NOW_MS), *rest]
    return CliRunner().invoke(outbox_group, argv, catch_exceptions=False)


def cli_json(url: str, *args: str) -> Any:
    result = cli(url, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def run(*args: str, stdin: int = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    """``python -m rocketbox outbox ARGS`` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "rocketbox", "outbox", *args],
        cwd=REPO_ROOT,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=CLI_DEADLINE_S,
        check=False,
    )


def entry(
    n: int, topic: str, cause: SpoolCause, created_ms: int, next_send_time_ms: int, body: bytes
) -> OutboxEntry:
    return OutboxEntry(
        message=OutboxMessage(
            topic=topic,
            body=body,
            message_id=message_id(n),
            keys=(f"order-{n}",),
            message_group="g1" if cause is SpoolCause.FIFO_FENCE else None,
        ),
        cause=cause,
        created_ms=created_ms,
        next_send_time_ms=next_send_time_ms,
    )


E1 = entry(1, "Orders", SpoolCause.UNAVAILABLE, NOW_MS - 3 * HOUR_MS, NOW_MS - HOUR_MS, b"order 1")
E2 = entry(2, "Orders", SpoolCause.THROTTLED, NOW_MS - 2 * HOUR_MS, NOW_MS - 10 * HOUR_MS, b"o 2")
E3 = entry(
    3, "Payments", SpoolCause.AMBIGUOUS, NOW_MS - 30 * MINUTE_MS, NOW_MS - 30 * MINUTE_MS, b"p"
)
E4 = entry(
    4, "Payments", SpoolCause.UNAVAILABLE, NOW_MS - 24 * HOUR_MS, NOW_MS - 20 * HOUR_MS, b"\xff\xfe"
)
E5 = entry(
    5, "Orders", SpoolCause.FIFO_FENCE, NOW_MS - 10 * MINUTE_MS, NOW_MS - 10 * MINUTE_MS, b"fifo"
)
E3_DELIVERED_MS = NOW_MS - 5 * MINUTE_MS
E4_BURIED_MS = NOW_MS - 19 * HOUR_MS


def fail(outbox: Any, e: OutboxEntry, at_ms: int, next_send_time_ms: int) -> None:
    """One failed resend of ``e``, the only entry due at ``at_ms``."""
    claimed = outbox.claim_due(at_ms, 1, LEASE_MS, "w1")
    assert [c.message_id for c in claimed] == [e.message_id]
    assert outbox.reschedule(
        e.message_id, "w1", next_send_time_ms, "busy", at_ms, maybe_stored=False
    )


def seed(url: str) -> dict[str, OutboxEntry]:
    """E1, E2 (2 attempts, due in 10 min) and E5 pending; E3 delivered; E4 dead (4 attempts)."""
    with open_outbox(url) as outbox:
        outbox.put([E1, E2, E3, E4, E5])
        at_ms = E4.next_send_time_ms
        for _ in range(3):  # the fourth failed attempt is the burying one
            fail(outbox, E4, at_ms, at_ms + 1)
            at_ms += 1
        assert [c.message_id for c in outbox.claim_due(at_ms, 1, LEASE_MS, "w1")] == [E4.message_id]
        assert outbox.bury(E4.message_id, "w1", "4 resends failed; last: busy", E4_BURIED_MS)
        fail(outbox, E2, E2.next_send_time_ms, E2.next_send_time_ms + 1)
        fail(outbox, E2, E2.next_send_time_ms + 1, NOW_MS + 10 * MINUTE_MS)
        receipt = DeliveryReceipt(queue_id=2, queue_offset=41, delivered_ms=E3_DELIVERED_MS)
        assert outbox.mark_delivered(E3.message_id, receipt)
        stored = {}
        for e in (E1, E2, E3, E4, E5):
            got = outbox.get(e.message_id)
            assert got is not None
            stored[e.message_id] = got
        return stored


def rows(stored: dict[str, OutboxEntry], *entries: OutboxEntry) -> list[dict[str, Any]]:
    return [export_row(stored[e.message_id]) for e in entries]
