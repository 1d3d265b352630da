"""The outbox export (outbox/export.py) on every backend: JSON lines and Parquet carry the same
rows, under one schema whose columns are exactly ``entry_to_dict``'s fields without the body, and
the Parquet file is written in row groups of at most EXPORT_ROW_GROUP_ROWS_MAX rows."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from outbox import DeliveryReceipt, EntryState, Outbox, OutboxMessage, SpoolCause
from outbox import export as export_module
from outbox.entry import entry_to_dict
from outbox.export import EXPORT_SCHEMA, export_jsonl, export_parquet
from tests.outbox.entries import LEASE_MS, NOW_MS, message_id, receipt
from tests.outbox.entries import entry as new_entry

pytestmark = pytest.mark.slow


def parquet_rows(path: Path) -> list[dict[str, Any]]:
    """The file's rows as JSON would give them (a Parquet map reads back as key/value pairs)."""
    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    for row in rows:
        row["properties"] = dict(row["properties"])
    return rows


def jsonl_rows(outbox: Outbox, state: EntryState | None = None) -> list[dict[str, Any]]:
    out = io.StringIO()
    export_jsonl(outbox, out, state)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def fill(outbox: Outbox) -> None:
    """Entries in every state, with every optional field set on one of them and unset on another."""
    rich = replace(
        new_entry(1),
        message=OutboxMessage(
            topic="OrderTopic",
            body=b"\x00\xff not utf-8",
            message_id=message_id(1),
            tag="TagA",
            keys=("k1", "ключ"),
            message_group="g",
            delivery_timestamp_ms=NOW_MS + 60_000,
            properties={"trace": "x-y", "ünï": "cödé"},
            born_timestamp_ms=NOW_MS - 5_000,
        ),
        cause=SpoolCause.AMBIGUOUS,
        maybe_stored=True,
        last_error="DEADLINE_EXCEEDED",
    )
    outbox.put([rich, *(new_entry(n) for n in range(2, 6))])
    assert outbox.mark_delivered(message_id(2), receipt(2))
    weak = DeliveryReceipt(queue_id=1, queue_offset=9, delivered_ms=NOW_MS + 5, durable=False)
    assert outbox.mark_delivered(message_id(3), weak)
    claimed = outbox.claim_due(NOW_MS, 10, LEASE_MS, "w1")
    assert message_id(4) in [e.message_id for e in claimed]
    assert outbox.bury(message_id(4), "w1", "attempts_max", NOW_MS + 7)
    # 1 and 5 stay PENDING under a lease: lease_owner is exported too.


def test_export_schema_columns_are_the_entry_fields_without_the_body() -> None:
    fields = list(entry_to_dict(new_entry(1), with_body=True))
    assert EXPORT_SCHEMA.names == [f for f in fields if f != "body"]
    delivered = new_entry(1).delivered(receipt(1))
    assert list(entry_to_dict(delivered, with_body=False)) == EXPORT_SCHEMA.names


def test_jsonl_and_parquet_exports_carry_the_same_rows(outbox: Outbox, tmp_path: Path) -> None:
    fill(outbox)
    path = tmp_path / "outbox.parquet"
    assert export_parquet(outbox, path) == 5
    assert pq.read_schema(path).remove_metadata() == EXPORT_SCHEMA
    rows = jsonl_rows(outbox)
    assert parquet_rows(path) == rows
    assert [r["message_id"] for r in rows] == [message_id(n) for n in range(1, 6)]
    assert [r["state"] for r in rows] == ["PENDING", "DELIVERED", "DELIVERED", "DEAD", "PENDING"]
    assert rows[0]["properties"] == {"trace": "x-y", "ünï": "cödé"}
    assert (rows[2]["queue_offset"], rows[2]["durable"]) == (9, False)
    assert rows[4]["lease_owner"] == "w1"

    dead = tmp_path / "dead.parquet"
    assert export_parquet(outbox, dead, EntryState.DEAD) == 1
    assert parquet_rows(dead) == jsonl_rows(outbox, EntryState.DEAD)


def test_parquet_export_of_an_empty_outbox_has_the_schema_and_no_rows(
    outbox: Outbox, tmp_path: Path
) -> None:
    path = tmp_path / "empty.parquet"
    assert export_parquet(outbox, path) == 0
    table = pq.read_table(path)
    assert table.num_rows == 0
    assert table.schema.remove_metadata() == EXPORT_SCHEMA


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_parquet_export_writes_bounded_row_groups_and_reports_progress(
    outbox: Outbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export_module, "EXPORT_ROW_GROUP_ROWS_MAX", 4)
    monkeypatch.setattr(export_module, "EXPORT_PROGRESS_ROWS", 3)
    outbox.put([new_entry(n) for n in range(10)])
    path = tmp_path / "paged.parquet"
    told: list[int] = []
    assert export_parquet(outbox, path, progress=told.append) == 10
    metadata = pq.ParquetFile(path).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [4, 4, 2]
    assert told == [3, 3, 3, 1]
    assert parquet_rows(path) == jsonl_rows(outbox)
