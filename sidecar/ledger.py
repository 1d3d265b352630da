"""The acknowledgement ledger: what each app was told, one JSON object per line.

``{"message_id", "topic", "state": STORED|SPOOLED, "time_ms", "queue_offset", "durable",
"cause"}``. The reconciliation (reconcile/) reads it as the senders' side of the books: every id
here must be in the commitlog, or pending/dead in the outbox. Lines are buffered and written
every ``flush_interval_ms`` and at stop; the ledger is an audit aid, and a line lost in a crash
only makes the audit see less, never a message lost.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

LEDGER_BUFFER_LINES_MAX = 10_000


class AckLedger:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lines: list[str] = []

    def record(self, entry: dict[str, Any]) -> None:
        self._lines.append(json.dumps(entry, separators=(",", ":")))
        if len(self._lines) >= LEDGER_BUFFER_LINES_MAX:
            self.flush()

    def flush(self) -> None:
        if self._lines:
            self._file.write("\n".join(self._lines) + "\n")
            self._lines.clear()
        self._file.flush()

    def close(self) -> None:
        self.flush()
        self._file.close()
