"""`rocketbox outbox …` against RocksDB, Redis and MySQL outboxes on the real services.

What it proves, on each of the three backends:
- stats answers the backend's totals and a breakdown by state, topic and cause with an attempts
  histogram; ls filters by state, topic, cause, key and age and pages with its cursor; show
  prints every field and the body; all three exactly, as JSON;
- a DEAD entry requeued, and a PENDING entry due in a year made due by retry-now, are delivered
  to a real broker by a real sidecar (real processes throughout);
- purge refuses without --yes when stdin is no terminal (exit 5) and deletes nothing; on a
  terminal it asks, and deletes only on yes; --dry-run counts and deletes nothing; --yes deletes;
  PENDING is never purged;
- export writes JSONL and Parquet files that read back as the outbox; watch --count 2 prints two
  JSON samples;
- a bad URL exits 2 naming the URL option and the accepted schemes; an unreachable backend, or a
  change to a RocksDB outbox held by another process, exits 3 (reads open it read-only beside
  its holder); a missing entry 4; and no message shows a password.

Checks of output run the command in this process (click's CliRunner, stdin no terminal); the
delivery through a sidecar, the purge refusals, and the bad-URL, unreachable and held-outbox
exit codes run ``python -m rocketbox outbox …`` as a real process.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from outbox import DeliveryReceipt, EntryState, OutboxEntry, OutboxMessage, SpoolCause, open_outbox
from outbox.export import export_row
from rocketbox.outbox_cli import outbox_group
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.outbox.conftest import backend_url
from tests.outbox.entries import LEASE_MS, NOW_MS, message_id
from tests.rocketbox_process import REPO_ROOT
from tests.services import free_port
from tests.sidecar.sidecar_process import BROKER_ARGS, SidecarProcess, wait_stored

CLI_BACKENDS = ["rocksdb", "redis", "mysql"]
CLI_DEADLINE_S = 60.0
DELIVERY_DEADLINE_S = 30.0
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
SECRET = "s3cret-pw"


@pytest.fixture(params=CLI_BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, tmp_path) as outbox_url:
        yield outbox_url


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("broker"), *BROKER_ARGS)
    yield b
    b.kill()


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


# -- a known outbox -------------------------------------------------------------------------------


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
    assert outbox.reschedule(e.message_id, "w1", next_send_time_ms, "busy", at_ms)


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


# -- stats, ls, show ------------------------------------------------------------------------------


def test_stats_counts_and_breaks_the_outbox_down(url: str) -> None:
    seed(url)
    body_bytes = {e.message_id: len(e.message.body) for e in (E1, E2, E3, E4, E5)}
    assert cli_json(url, "stats") == {
        "now_ms": NOW_MS,
        "totals": {
            "pending": 3,
            "in_flight": 0,
            "delivered": 1,
            "dead": 1,
            "bytes": sum(body_bytes.values()) - body_bytes[E3.message_id],
            "oldest_pending_created_ms": E1.created_ms,
            "oldest_pending_age_ms": 3 * HOUR_MS,
            "next_due_ms": E1.next_send_time_ms,
            "next_due_in_ms": -HOUR_MS,
        },
        "scanned": 5,
        "depth": [
            {
                "state": "PENDING",
                "topic": "Orders",
                "cause": "FIFO_FENCE",
                "entries": 1,
                "body_bytes": body_bytes[E5.message_id],
            },
            {
                "state": "PENDING",
                "topic": "Orders",
                "cause": "THROTTLED",
                "entries": 1,
                "body_bytes": body_bytes[E2.message_id],
            },
            {
                "state": "PENDING",
                "topic": "Orders",
                "cause": "UNAVAILABLE",
                "entries": 1,
                "body_bytes": body_bytes[E1.message_id],
            },
            {
                "state": "DEAD",
                "topic": "Payments",
                "cause": "UNAVAILABLE",
                "entries": 1,
                "body_bytes": body_bytes[E4.message_id],
            },
            {
                "state": "DELIVERED",
                "topic": "Payments",
                "cause": "AMBIGUOUS",
                "entries": 1,
                "body_bytes": 0,
            },
        ],
        "attempts": {
            "PENDING": {"0": 2, "1": 0, "2-3": 1, "4-7": 0, "8-15": 0, "16+": 0},
            "DEAD": {"0": 0, "1": 0, "2-3": 0, "4-7": 1, "8-15": 0, "16+": 0},
            "DELIVERED": {"0": 1, "1": 0, "2-3": 0, "4-7": 0, "8-15": 0, "16+": 0},
        },
    }
    people = cli(url, "stats")
    assert people.exit_code == 0, people.output
    for text in ("pending", "oldest pending", "3h old", "FIFO_FENCE", "4-7", "5 entries read"):
        assert text in people.stdout


def test_ls_filters_and_pages_with_a_cursor(url: str) -> None:
    stored = seed(url)

    def ls(*args: str) -> Any:
        return cli_json(url, "ls", *args)

    seq = {e.message_id: stored[e.message_id].seq for e in (E1, E2, E3, E4, E5)}
    assert ls("--state", "pending") == {"entries": rows(stored, E1, E2, E5), "next_after_seq": None}
    assert ls("--topic", "Payments") == {"entries": rows(stored, E3, E4), "next_after_seq": None}
    assert ls("--cause", "THROTTLED") == {"entries": rows(stored, E2), "next_after_seq": None}
    assert ls("--key", "order-4") == {"entries": rows(stored, E4), "next_after_seq": None}
    # Ages by created_ms: E2, spooled exactly 2 h ago, is "older than 2h".
    assert ls("--older-than", "2h") == {"entries": rows(stored, E1, E2, E4), "next_after_seq": None}
    assert ls("--newer-than", "1h") == {"entries": rows(stored, E3, E5), "next_after_seq": None}
    assert ls("--topic", "Orders", "--older-than", "1h", "--newer-than", "150m") == {
        "entries": rows(stored, E2),
        "next_after_seq": None,
    }
    assert ls("--topic", "Nowhere") == {"entries": [], "next_after_seq": None}

    first = ls("--limit", "2")
    assert first == {"entries": rows(stored, E1, E2), "next_after_seq": seq[E2.message_id]}
    second = ls("--limit", "2", "--after-seq", str(first["next_after_seq"]))
    assert second == {"entries": rows(stored, E3, E4), "next_after_seq": seq[E4.message_id]}
    third = ls("--limit", "2", "--after-seq", str(second["next_after_seq"]))
    assert third == {"entries": rows(stored, E5), "next_after_seq": None}
    # Paging a filter: the cursor skips what did not match.
    dead_or_later = ls(
        "--limit", "1", "--topic", "Payments", "--after-seq", str(seq[E3.message_id])
    )
    assert dead_or_later == {"entries": rows(stored, E4), "next_after_seq": seq[E4.message_id]}

    people = cli(url, "ls", "--limit", "2")
    assert people.exit_code == 0, people.output
    assert E1.message_id in people.stdout  # whole: ids are what the other commands take
    assert f"next page: --after-seq {seq[E2.message_id]}" in people.stdout


def test_ls_refuses_a_bad_age_and_a_page_past_its_limit(url: str) -> None:
    bad_age = cli(url, "ls", "--older-than", "2 weeks")
    assert bad_age.exit_code == 2
    assert "'2 weeks' is not an age such as 30s, 5m, 2h or 1d" in bad_age.stderr
    too_many = cli(url, "ls", "--limit", "1001")
    assert too_many.exit_code == 2
    assert "--limit" in too_many.stderr


def test_show_prints_every_field_and_the_body(url: str) -> None:
    stored = seed(url)
    shown = cli_json(url, "show", E4.message_id)
    assert shown == export_row(stored[E4.message_id])
    assert (shown["state"], shown["attempts"]) == ("DEAD", 4)
    assert shown["last_error"] == "4 resends failed; last: busy"
    assert shown["state_changed_ms"] == E4_BURIED_MS
    assert shown["keys"] == ["order-4"]
    assert shown["body_size"] == len(E4.message.body)
    assert "body" not in shown

    binary = cli_json(url, "show", E4.message_id, "--body")
    assert (binary["body"], binary["body_encoding"]) == (
        base64.b64encode(E4.message.body).decode(),
        "base64",
    )
    text = cli_json(url, "show", E1.message_id, "--body")
    assert (text["body"], text["body_encoding"]) == ("order 1", "utf-8")
    delivered = cli_json(url, "show", E3.message_id)
    assert (delivered["state"], delivered["queue_id"], delivered["queue_offset"]) == (
        "DELIVERED",
        2,
        41,
    )

    people = cli(url, "show", E1.message_id, "--body")
    assert people.exit_code == 0, people.output
    assert "order 1" in people.stdout
    assert "2023-11-14T19:13:20.000Z" in people.stdout  # created_ms, as UTC


def test_show_of_a_missing_entry_exits_4(url: str) -> None:
    seed(url)
    missing = message_id(999)
    shown = cli(url, "show", missing, "--json")
    assert shown.exit_code == 4, shown.output
    assert shown.stdout == ""
    assert f"no entry '{missing}' in the outbox" in shown.stderr


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
    assert "purge would delete 1 DEAD entries" in refused.stderr
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
    assert "Delete 1 DELIVERED entries changed before" in declined.stderr
    assert "not confirmed; nothing was deleted" in declined.stderr
    assert counts(url) == (3, 1, 1)
    accepted = run_on_a_terminal(b"y\n", *args)
    assert accepted.returncode == 0, accepted.stderr
    assert "purged 1 DELIVERED entries" in accepted.stdout
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


# -- export, watch --------------------------------------------------------------------------------


def parquet_rows(path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    for row in found:
        row["properties"] = dict(row["properties"])
    return found


def test_export_writes_jsonl_and_parquet_that_read_back(url: str, tmp_path: Path) -> None:
    stored = seed(url)
    every = rows(stored, E1, E2, E3, E4, E5)
    jsonl, parquet = tmp_path / "outbox.jsonl", tmp_path / "outbox.parquet"
    assert cli_json(url, "export", "--out", str(jsonl)) == {
        "format": "jsonl",
        "path": str(jsonl),
        "entries": 5,
        "state": None,
    }
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == every
    assert cli_json(url, "export", "--out", str(parquet))["entries"] == 5
    assert parquet_rows(parquet) == every

    dead = tmp_path / "dead.data"
    answer = cli_json(url, "export", "--out", str(dead), "--format", "parquet", "--state", "dead")
    assert (answer["format"], answer["entries"], answer["state"]) == ("parquet", 1, "DEAD")
    assert parquet_rows(dead) == rows(stored, E4)
    unknown = cli(url, "export", "--out", str(tmp_path / "outbox.csv"))
    assert unknown.exit_code == 2
    assert "say which format" in unknown.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "dead.data",
        "outbox.jsonl",
        "outbox.parquet",
    ]  # and no partial file left behind


def test_watch_prints_one_json_sample_per_interval(url: str) -> None:
    seed(url)
    watched = cli(url, "watch", "--count", "2", "--interval-s", "0.05", "--json")
    assert watched.exit_code == 0, watched.output
    samples = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(samples) == 2
    for sample in samples:
        assert (sample["pending"], sample["dead"], sample["delivered"]) == (3, 1, 1)
        assert sample["oldest_pending_age_ms"] == 3 * HOUR_MS
    assert (samples[0]["delivered_per_s"], samples[0]["interval_s"]) == (None, None)
    assert samples[1]["delivered_per_s"] == 0.0
    assert samples[1]["interval_s"] >= 0.05


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outbox_url", "says"),
    [
        (f"mysq://root:{SECRET}@127.0.0.1:3306/test", "unknown scheme 'mysq'"),
        (f"redis://:{SECRET}@127.0.0.1:notaport/0", "Port could not be cast"),
        (f"mysql+pymysql://root:{SECRET}@127.0.0.1:xx/test", "invalid literal"),
        (f"rocksdb://root:{SECRET}@somehost/outbox", "want rocksdb:///absolute/path"),
        ("rocksdb:///nonexistent/rocketbox/outbox", "no RocksDB database at"),
    ],
)
def test_a_bad_url_exits_2_naming_the_option_and_the_schemes(outbox_url: str, says: str) -> None:
    result = run("stats", "--outbox", outbox_url)
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--outbox' / ROCKETBOX_OUTBOX" in result.stderr
    assert says in result.stderr
    for scheme in ("rocksdb:///", "redis://", "mysql+pymysql://"):
        assert scheme in result.stderr
    assert SECRET not in result.stderr + result.stdout
    assert not Path("/nonexistent").exists()  # an admin command never creates an outbox


def test_the_outbox_url_is_required_and_read_from_the_environment(tmp_path: Path) -> None:
    missing = run("stats")
    assert missing.returncode == 2
    assert "Missing option '--outbox'" in missing.stderr
    with backend_url("rocksdb", tmp_path) as outbox_url:
        open_outbox(outbox_url).close()
        from_env = subprocess.run(
            [sys.executable, "-m", "rocketbox", "outbox", "stats", "--json"],
            cwd=REPO_ROOT,
            env={**os.environ, "ROCKETBOX_OUTBOX": outbox_url},
            capture_output=True,
            text=True,
            timeout=CLI_DEADLINE_S,
            check=False,
        )
    assert from_env.returncode == 0, from_env.stderr
    assert json.loads(from_env.stdout)["totals"]["pending"] == 0


@pytest.mark.parametrize(
    "template",
    [
        f"redis://:{SECRET}@127.0.0.1:{{port}}/0?prefix=rocketbox_test",
        f"mysql+pymysql://root:{SECRET}@127.0.0.1:{{port}}/test",
    ],
    ids=["redis", "mysql"],
)
def test_an_unreachable_backend_exits_3(template: str) -> None:
    url = template.format(port=free_port())  # a port nothing listens on
    for args in (("stats",), ("requeue", "--all")):
        result = run(*args, "--json", "--outbox", url)
        assert result.returncode == 3, (args, result.stderr)
        assert result.stdout == ""
        assert "the outbox is unreachable" in result.stderr
        assert "Connection refused" in result.stderr or "Can't connect" in result.stderr
        assert SECRET not in result.stderr


def test_a_held_rocksdb_outbox_is_read_beside_its_holder_and_changed_only_when_free(
    tmp_path: Path,
) -> None:
    with backend_url("rocksdb", tmp_path) as outbox_url:
        due_later = replace(E1, next_send_time_ms=int(time.time() * 1000) + 10 * HOUR_MS)
        with open_outbox(outbox_url) as holder:  # as a running sidecar holds it
            holder.put([due_later])
            # Reads open it read-only, beside the holder, and see what it wrote (the WAL).
            stats = run("stats", "--json", "--outbox", outbox_url)
            assert stats.returncode == 0, stats.stderr
            assert json.loads(stats.stdout)["totals"]["pending"] == 1
            shown = run("show", E1.message_id, "--json", "--outbox", outbox_url)
            assert shown.returncode == 0, shown.stderr
            # Changes need the lock: refused with exit 3, nothing changed.
            held = run("retry-now", "--all", "--outbox", outbox_url)
            assert held.returncode == 3, held.stderr
            assert "RocksDB allows one process" in held.stderr
            # watch reopens its read-only view at every sample: it sees the holder's later puts.
            with subprocess.Popen(
                [sys.executable, "-m", "rocketbox", "outbox", "watch", "--json",
                 "--interval-s", "0.2", "--outbox", outbox_url],
                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ) as watch:  # fmt: skip
                try:
                    assert watch.stdout is not None
                    assert json.loads(watch.stdout.readline())["pending"] == 1
                    holder.put([E2])
                    deadline = time.monotonic() + CLI_DEADLINE_S
                    pending = 1
                    while pending != 2 and time.monotonic() < deadline:
                        line = watch.stdout.readline()
                        assert line, "watch ended"
                        pending = json.loads(line)["pending"]
                finally:
                    watch.kill()  # it runs until killed, also when an assertion failed
                assert pending == 2, "watch never saw the second entry"
            got = holder.get(E1.message_id)
            assert got is not None
            assert got.next_send_time_ms == due_later.next_send_time_ms, "retry-now changed it"
        free = run("retry-now", "--all", "--json", "--outbox", outbox_url)
        assert free.returncode == 0, free.stderr
        with open_outbox(outbox_url) as outbox:
            got = outbox.get(E1.message_id)
            assert got is not None
            assert got.next_send_time_ms <= int(time.time() * 1000), "made due once free"
