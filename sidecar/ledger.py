"""The acknowledgement ledger: the STORED and SPOOLED answers the sidecar sent, one JSON line each.

``{"message_id", "topic", "state": STORED|SPOOLED, "time_ms", "queue_id", "queue_offset",
"durable", "cause"}``; a sidecar with a ``--namespace`` writes its topics as the broker stores
them, ``NAMESPACE%TOPIC``. A STORED line's ``queue_offset`` is the broker's answer, in the queue
the broker picked; its ``queue_id`` is -1, as the answer names no queue (sidecar/producer.py's
``SendReceipt``). The reconciliation (reconcile/) reads it as the senders' side of the books.

What is written, when:

- An answer is recorded once gRPC has sent it, never before (sidecar/server.py): a Send or
  SendBatch answer when its call finished without being cancelled, a SendStream answer once it
  was written to the stream. ``time_ms`` is when it was recorded. An answer the sidecar made but
  did not send (its call cancelled or cut off by a stop or a crash first) is not in the ledger;
  REJECTED answers never are.
- ``flush_interval_ms`` (``--ack-ledger-flush-interval-ms``, default
  ``ACK_LEDGER_FLUSH_INTERVAL_MS_DEFAULT`` = 0) says when a recorded answer reaches the file.
  0: at once, on the event loop, one write per call (a SendBatch's answers together, a
  SendStream's one by one). N > 0: answers wait in memory (at most ``LEDGER_BUFFER_LINES_MAX``)
  and a thread appends them every N ms, and at stop: less work per call, more to lose.
- Each write is one write(2) of whole lines (the file is unbuffered), not fsynced: what was
  written survives the sidecar being killed (the operating system holds it), not the machine
  going down before the OS wrote it back. A write that fails (a full disk) loses its lines: it is
  logged with their count (at most once per ``LEDGER_ERROR_LOG_INTERVAL_S``), never raised into
  an answer or the sidecar's stop.

What a crash (SIGKILL) loses: the answers sent in its last moment. With 0, those whose call had
finished but whose record had not yet run (the same event-loop turn); with N, up to the last N ms
of answers. Its last line may be torn; the reconciliation counts it as malformed. The next
sidecar to open the ledger ends that line first, so its own first answer is a line of its own
and not joined to the torn one.

So the ledger proves what is in it, not what is missing from it:

- An id in it was answered STORED or SPOOLED: the sidecar handed that answer to gRPC, on a call
  gRPC then finished or a stream that took it. A loss computed from it (answered, yet neither
  stored nor held by the outbox) is real: the sidecar said so and the message is gone, whether
  or not the app read the answer. "Sent" is not "received": gRPC does not tell a server whether
  its last write reached the app, which may have cancelled as the answer crossed the wire, or
  died before reading it.
- An id missing from it may still have been answered, in a crash's last moment: after a crash,
  "unexpected" computed from a sidecar's ledger (stored, in no ledger and no outbox entry) is an
  upper bound.
- The exact account of what each app was told is the app's own record of the answers it
  received.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rocketbox_api.names import namespaced
from rocketbox_api.rate_limited_log import RateLimitedLog
from sidecar.intake import Accepted, Stored

LOG = logging.getLogger(__name__)

ACK_LEDGER_FLUSH_INTERVAL_MS_DEFAULT = 0
# Answers held in memory between writes (a flush interval above 0); past it, ``record`` writes
# them itself (back-pressure on a ledger whose writer fell behind, rather than unbounded memory).
LEDGER_BUFFER_LINES_MAX = 100_000
# A ledger that cannot be written (a full disk) says so at most this often.
LEDGER_ERROR_LOG_INTERVAL_S = 10.0

# An answer that was sent: (message_id, topic, STORED or SPOOLED).
SentAnswer = tuple[str, str, Accepted]
Line = tuple[int, str, str, Accepted]


def _end_a_torn_line(path: Path, file: IO[bytes]) -> None:
    """A ledger that does not end in a newline ends in a line a crash tore: end it."""
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        if not size:
            return
        f.seek(size - 1)
        torn = f.read(1) != b"\n"
    if torn:
        file.write(b"\n")


class AckLedger:
    def __init__(
        self,
        path: Path,
        flush_interval_ms: int = ACK_LEDGER_FLUSH_INTERVAL_MS_DEFAULT,
        namespace: str = "",
    ) -> None:
        """``namespace``: the sidecar's own; topics are written as the broker stores them,
        NAMESPACE%TOPIC, so the reconciliation finds them in scope."""
        self._topic_prefix = namespaced(namespace, "")
        if flush_interval_ms < 0:
            raise ValueError(f"flush_interval_ms must be >= 0, got {flush_interval_ms}")
        self.flush_interval_ms = flush_interval_ms
        path.parent.mkdir(parents=True, exist_ok=True)
        # Unbuffered: a line is in the file once write returns, and a failed write leaves
        # nothing behind in a buffer to fail again at close.
        self._file: IO[bytes] = path.open("ab", buffering=0)
        _end_a_torn_line(path, self._file)
        self._lines: list[Line] = []
        self._errors = RateLimitedLog(LOG, logging.ERROR, LEDGER_ERROR_LOG_INTERVAL_S)
        # The writer thread and a back-pressured ``record`` must not interleave their lines.
        self._write_lock = threading.Lock()

    def record(self, time_ms: int, answers: Sequence[SentAnswer]) -> None:
        """Answers that were just sent (called on the event loop)."""
        lines = [(time_ms, *answer) for answer in answers]
        if self.flush_interval_ms == 0:
            self.write(lines)
            return
        self._lines += lines
        if len(self._lines) >= LEDGER_BUFFER_LINES_MAX:
            self.write(self.take())

    def take(self) -> list[Line]:
        """What accumulated since the last take (called on the event loop)."""
        lines, self._lines = self._lines, []
        return lines

    def write(self, lines: list[Line]) -> None:
        """Blocking: serialise and append ``lines``; a failure is logged, and they are lost."""
        if not lines:
            return
        text = "".join(
            json.dumps(_line(*line, self._topic_prefix), separators=(",", ":")) + "\n"
            for line in lines
        )
        data = memoryview(text.encode())
        try:
            with self._write_lock:
                while data:  # a regular file takes it all at once, but for signals
                    written = self._file.write(data)
                    if not written:
                        raise OSError("the ledger file took none of a write")
                    data = data[written:]
        except OSError as e:
            self._errors.log("ack ledger: %d answers not written: %s", len(lines), e)

    async def run(self) -> None:
        """With a flush interval: append what accumulated every interval, until cancelled (a
        write under way when it is cancelled ends before it returns, so ``close`` follows it)."""
        if self.flush_interval_ms == 0:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.flush_interval_ms / 1000.0)
            written = loop.run_in_executor(None, self.write, self.take())
            try:
                await asyncio.shield(written)
            except asyncio.CancelledError:
                await written
                raise

    def close(self) -> None:
        self.write(self.take())
        self._file.close()


def _line(
    time_ms: int, message_id: str, topic: str, accepted: Accepted, topic_prefix: str
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "message_id": message_id,
        "topic": topic_prefix + topic,
        "time_ms": time_ms,
    }
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
