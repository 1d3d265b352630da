"""The outbox export, the reconciliation's input: JSON lines or Parquet, the same rows in both.

The fields are ``entry_to_dict``'s (outbox/entry.py) without the body: message id, topic, tag,
keys, message group, state, cause, maybe_stored, attempts, last error, seq, times, and for a
delivered entry the broker's queue id and queue offset. ``EXPORT_SCHEMA`` is that list, typed,
in that order; a test holds the two equal, so a field added to ``entry_to_dict`` fails it until
the Parquet schema has it too.

Parquet types (readers join the two formats, so each column reads back as its JSON value):
every integer is int64 (JSON readers infer 64-bit integers; one type for both formats), times
stay integers in ms since the epoch as in JSON, ``keys`` is a list of strings, ``properties`` a
map of string to string; nullable exactly where ``entry_to_dict`` may give None.

Both exports page through ``Outbox.scan_all``; the Parquet one holds at most
``EXPORT_ROW_GROUP_ROWS_MAX`` rows in memory, written as one row group each.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

# pyarrow ships no type information: to mypy its values are Any, so EXPORT_SCHEMA's test is what
# holds the columns to entry_to_dict. (unused-ignore: should pyproject.toml come to ignore
# pyarrow's missing stubs for every module, these stay harmless.)
import pyarrow as pa
import pyarrow.parquet as pq

from outbox.entry import EntryState, OutboxEntry, entry_to_dict
from outbox.outbox import Outbox

# Rows per Parquet row group, and so the most rows an export holds in memory at once.
EXPORT_ROW_GROUP_ROWS_MAX = 10_000
# How often ``progress`` hears of rows written (a progress bar redraws on each call).
EXPORT_PROGRESS_ROWS = 1_000
EXPORT_FORMATS = ("jsonl", "parquet")
# File name endings → format, for ``export_format``.
EXPORT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet"}

Progress = Callable[[int], None]

_STRING = pa.string()
_INT = pa.int64()
EXPORT_SCHEMA = pa.schema(
    [
        pa.field("message_id", _STRING, nullable=False),
        pa.field("topic", _STRING, nullable=False),
        pa.field("tag", _STRING),
        pa.field("keys", pa.list_(_STRING), nullable=False),
        pa.field("message_group", _STRING),
        pa.field("delivery_timestamp_ms", _INT),
        pa.field("properties", pa.map_(_STRING, _STRING), nullable=False),
        pa.field("born_timestamp_ms", _INT, nullable=False),
        pa.field("delivery_timeout_ms", _INT),
        pa.field("body_size", _INT, nullable=False),
        pa.field("state", _STRING, nullable=False),
        pa.field("cause", _STRING, nullable=False),
        pa.field("maybe_stored", pa.bool_(), nullable=False),
        pa.field("attempts", _INT, nullable=False),
        pa.field("last_error", _STRING, nullable=False),
        pa.field("seq", _INT, nullable=False),
        pa.field("created_ms", _INT, nullable=False),
        pa.field("next_send_time_ms", _INT, nullable=False),
        pa.field("state_changed_ms", _INT, nullable=False),
        pa.field("lease_owner", _STRING),
        pa.field("lease_until_ms", _INT, nullable=False),
        pa.field("queue_id", _INT),
        pa.field("queue_offset", _INT),
        pa.field("delivered_ms", _INT),
        pa.field("durable", pa.bool_()),
    ]
)


def export_row(entry: OutboxEntry) -> dict[str, Any]:
    """One exported row: the entry without its body."""
    return entry_to_dict(entry, with_body=False)


def export_jsonl(
    outbox: Outbox,
    out: TextIO,
    state: EntryState | None = None,
    *,
    progress: Progress | None = None,
) -> int:
    """Write every entry (of ``state``) to ``out``, one JSON object a line; returns how many."""
    written = 0
    for entry in _counted(outbox.scan_all(state), progress):
        out.write(json.dumps(export_row(entry), separators=(",", ":")))
        out.write("\n")
        written += 1
    return written


def export_parquet(
    outbox: Outbox,
    path: Path,
    state: EntryState | None = None,
    *,
    progress: Progress | None = None,
) -> int:
    """Write every entry (of ``state``) to the Parquet file ``path``; returns how many.

    An empty outbox gives a file with the schema and no rows, so a reader always finds one.
    """
    written = 0
    rows: list[dict[str, Any]] = []
    with pq.ParquetWriter(path, EXPORT_SCHEMA) as writer:
        for entry in _counted(outbox.scan_all(state), progress):
            rows.append(export_row(entry))
            if len(rows) >= EXPORT_ROW_GROUP_ROWS_MAX:
                writer.write_table(pa.Table.from_pylist(rows, schema=EXPORT_SCHEMA))
                written += len(rows)
                rows = []
        if rows:
            writer.write_table(pa.Table.from_pylist(rows, schema=EXPORT_SCHEMA))
            written += len(rows)
    return written


def _counted(entries: Iterable[OutboxEntry], progress: Progress | None) -> Iterable[OutboxEntry]:
    """``entries``, telling ``progress`` how many went by every EXPORT_PROGRESS_ROWS and at the
    end."""
    if progress is None:
        yield from entries
        return
    unreported = 0
    for entry in entries:
        yield entry
        unreported += 1
        if unreported >= EXPORT_PROGRESS_ROWS:
            progress(unreported)
            unreported = 0
    if unreported:
        progress(unreported)


def export_format(path: Path) -> str:
    """The format a file name asks for by its ending; ValueError when it names none."""
    found = EXPORT_SUFFIXES.get(path.suffix.lower())
    if found is None:
        endings = ", ".join(sorted(EXPORT_SUFFIXES))
        raise ValueError(f"{path.name} ends in none of {endings}: say which format")
    return found


def export_file(
    outbox: Outbox,
    path: Path,
    file_format: str,
    state: EntryState | None = None,
    *,
    progress: Progress | None = None,
) -> int:
    """Export to ``path`` in ``file_format`` (EXPORT_FORMATS); returns how many entries.

    The file appears whole or not at all: it is written beside ``path`` and renamed over it once
    complete, so a reader never takes a half-written export for the outbox.
    """
    if file_format not in EXPORT_FORMATS:
        raise ValueError(f"file_format must be one of {EXPORT_FORMATS}, got {file_format!r}")
    partial = path.with_name(f".{path.name}.partial")
    try:
        if file_format == "jsonl":
            with partial.open("w", encoding="utf-8") as out:
                written = export_jsonl(outbox, out, state, progress=progress)
        else:
            written = export_parquet(outbox, partial, state, progress=progress)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return written
