"""Spools share durable writes: entries spooled while the outbox's previous write is in flight
go to it together as the next write (sidecar/batcher.py over ``Outbox.put_groups``).

So the spools of concurrent sends, of every message of a coalesced request the broker did not
take, and of one SendBatch or SendStream cost one fsync (RocksDB), one round trip (Redis) or one
commit (MySQL) per write rather than per message, and one hop to the outbox's threads. Each entry
keeps put's all-or-nothing answer: an outbox at its bound refuses the entries that do not fit,
not their neighbours. Each write is one ``rocketbox.spool`` span (sidecar/tracing.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from outbox.entry import OutboxEntry
from outbox.errors import OutboxError
from sidecar.async_outbox import AsyncOutbox
from sidecar.batcher import InFlightBatcher
from sidecar.metrics import SidecarMetrics
from sidecar.tracing import spool_span

# Entries and body bytes of one spool write: the backends' group commit takes up to 256
# requests a write (outbox/group_commit.py); 16 MiB keeps one write's memory and time small.
SPOOL_WRITE_ENTRIES_MAX = 256
SPOOL_WRITE_BYTES_MAX = 16 * 1024 * 1024

PutAnswer = list[OutboxEntry] | OutboxError


class SpoolWriter:
    def __init__(self, outbox: AsyncOutbox, metrics: SidecarMetrics) -> None:
        self._outbox = outbox
        self._metrics = metrics
        self._batcher: InFlightBatcher[OutboxEntry, PutAnswer] = InFlightBatcher(
            self._write,
            SPOOL_WRITE_ENTRIES_MAX,
            SPOOL_WRITE_BYTES_MAX,
            requests_in_flight_max=1,
            size_bytes=lambda e: len(e.message.body),
        )

    async def spool(self, entry: OutboxEntry) -> OutboxEntry:
        """The entry as stored, once durable; raises OutboxFullError or OutboxUnavailableError
        when it was not written."""
        answer = await self._batcher.submit(entry)
        if isinstance(answer, OutboxError):
            raise answer
        return answer[0]

    async def wait_idle(self) -> None:
        await self._batcher.wait_idle()

    async def _write(self, entries: Sequence[OutboxEntry]) -> list[PutAnswer]:
        self._metrics.put_entries.observe(len(entries))
        with self._metrics.put_seconds.time(), spool_span(entries):
            return await self._outbox.put_groups([[e] for e in entries])
