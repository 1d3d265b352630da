"""The acknowledgement ledger: what each app was told, one JSON object per line.

``{"message_id", "topic", "state": STORED|SPOOLED, "time_ms", "queue_id", "queue_offset",
"durable", "cause"}``. The reconciliation (reconcile/) reads it as the senders' side of the books:
every id here must be in the commitlog, or pending/dead in the outbox.

Off the hot path: an answer only appends a tuple in memory; every ``flush_interval_ms`` and at
stop the sidecar takes what accumulated and a thread turns it into JSON and writes it. The ledger
is an audit aid: a line lost in a crash only makes the audit see less, never a message lost.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import IO, Any

from sidecar.intake import Accepted, Stored

# Answers held in memory between writes; past it, ``record`` writes them itself (back-pressure
# on a ledger whose writer fell behind, rather than unbounded memory).
LEDGER_BUFFER_LINES_MAX = 100_000

Answer = tuple[int, str, str, Accepted]


class AckLedger:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._answers: list[Answer] = []
        # The writer thread and a back-pressured ``record`` must not interleave their lines.
        self._write_lock = threading.Lock()

    def record(self, time_ms: int, message_id: str, topic: str, accepted: Accepted) -> None:
        self._answers.append((time_ms, message_id, topic, accepted))
        if len(self._answers) >= LEDGER_BUFFER_LINES_MAX:
            self.write(self.take())

    def take(self) -> list[Answer]:
        """What accumulated since the last take (called on the event loop)."""
        answers, self._answers = self._answers, []
        return answers

    def write(self, answers: list[Answer]) -> None:
        """Blocking: serialise and append ``answers`` (run on a thread)."""
        text = "".join(json.dumps(_line(*a), separators=(",", ":")) + "\n" for a in answers)
        with self._write_lock:
            if text:
                self._file.write(text)
            self._file.flush()

    def close(self) -> None:
        self.write(self.take())
        self._file.close()


def _line(time_ms: int, message_id: str, topic: str, accepted: Accepted) -> dict[str, Any]:
    line: dict[str, Any] = {"message_id": message_id, "topic": topic, "time_ms": time_ms}
    if isinstance(accepted, Stored):
        receipt = accepted.receipt
        line |= {
            "state": "STORED",
            "queue_id": receipt.queue_id,
            "queue_offset": receipt.queue_offset,
            "durable": receipt.durable,
        }
    else:
        line |= {"state": "SPOOLED", "cause": accepted.entry.cause.value}
    return line
