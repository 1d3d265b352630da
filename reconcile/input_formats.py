"""The inputs' formats, as both engines read them: ledger lines and outbox export entries.

A ledger is JSON lines, one acknowledgement a line, as the sidecar writes it (sidecar/ledger.py:
the STORED and SPOOLED answers it sent, which is what the ledger can and cannot prove) and as
test and bench load generators write it (tests/reconcile/testdata.py)::

    {"message_id", "topic", "state": "STORED"|"SPOOLED", "time_ms",
     "queue_id", "queue_offset", "durable"}            (STORED)
    {"message_id", "topic", "state": "SPOOLED", "time_ms", "cause"}   (SPOOLED)

Lines are read with a fixed schema (fields not named here are ignored). A line that is not JSON
(a crash may tear the last one), or lacks a message id, topic or time, or has another state, is
*malformed*: counted, shown in the drill-down, never joined.

The outbox export (outbox/export.py) is JSON lines (``.jsonl``) or Parquet (``.parquet``, a file
or a directory of files), the same columns in both. Only ``OUTBOX_COLUMN_NAMES`` are read. A JSON
line that does not parse, or an entry without a message id or with a state other than PENDING /
DELIVERED / DEAD, is malformed: counted, never joined.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from outbox.export import EXPORT_SCHEMA
from reconcile.errors import InputError

ACK_STATES = ("STORED", "SPOOLED")
ENTRY_STATES = ("PENDING", "DELIVERED", "DEAD")
# Characters of a malformed ledger line kept for the drill-down.
MALFORMED_TEXT_CHARS_MAX = 200
JSON_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIX = ".parquet"

LEDGER_ARROW_SCHEMA = pa.schema(
    [
        pa.field("message_id", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("state", pa.string()),
        pa.field("time_ms", pa.int64()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("durable", pa.bool_()),
        pa.field("cause", pa.string()),
    ]
)
# The export's columns that the classification reads. Their types come from outbox/export.py's
# EXPORT_SCHEMA, the export's one definition, so a type changed there is read as changed here.
OUTBOX_COLUMN_NAMES = (
    "message_id",
    "topic",
    "state",
    "cause",
    "maybe_stored",
    "attempts",
    "last_error",
    "created_ms",
    "state_changed_ms",
    "delivered_ms",
)
OUTBOX_ARROW_SCHEMA = pa.schema([EXPORT_SCHEMA.field(name) for name in OUTBOX_COLUMN_NAMES])


def check_ledgers(paths: tuple[Path, ...]) -> None:
    for path in paths:
        if not path.is_file():
            raise InputError(f"acknowledgement ledger {path} is not a readable file")


def export_kind(path: Path) -> str:
    """ "jsonl" or "parquet", by the name; InputError for anything else or a missing path."""
    if not path.exists():
        raise InputError(f"outbox export {path} does not exist")
    if path.suffix in JSON_SUFFIXES and path.is_file():
        return "jsonl"
    if path.suffix == PARQUET_SUFFIX:
        return "parquet"
    raise InputError(
        f"outbox export {path}: expected a {'/'.join(JSON_SUFFIXES)} file or a "
        f"{PARQUET_SUFFIX} file or directory (or an outbox URL)"
    )
