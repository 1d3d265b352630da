"""`rocketbox outbox` reads, against RocksDB, Redis and MySQL outboxes on the real services.

What it proves, on each of the three backends: stats answers the backend's totals and a breakdown
by state, topic and cause with an attempts histogram; ls filters by state, topic, cause, key and
age and pages with its cursor; show prints every field and the body; all three exactly, as JSON;
export writes JSONL and Parquet files that read back as the outbox; watch --count 2 prints two
JSON samples. The commands run in this process (click's CliRunner, stdin no terminal).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from outbox.export import export_row
from tests.outbox.entries import NOW_MS, message_id
from tests.rocketbox.outbox_cli_support import (
    E1,
    E2,
    E3,
    E4,
    E4_BURIED_MS,
    E5,
    HOUR_MS,
    cli,
    cli_json,
    rows,
    seed,
)

pytestmark = pytest.mark.slow

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
