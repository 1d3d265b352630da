"""The outbox seen from the event loop: its blocking calls run on threads this wrapper owns, so a
slow fsync or database round trip never stalls the sidecar's gRPC serving.

One typed coroutine per Outbox operation the sidecar uses (outbox/outbox.py says what each
promises); nothing else reaches the backend's blocking methods from the loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from outbox.admin import Breakdown, breakdown
from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry, OutboxStats
from outbox.errors import OutboxError
from outbox.outbox import Outbox

P = ParamSpec("P")
T = TypeVar("T")


class AsyncOutbox:
    def __init__(self, outbox: Outbox, threads: int) -> None:
        self.outbox = outbox
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="outbox")

    async def put_groups(
        self, requests: Sequence[Sequence[OutboxEntry]]
    ) -> list[list[OutboxEntry] | OutboxError]:
        return await self._run(self.outbox.put_groups, requests)

    async def claim_due(
        self, now_ms: int, limit: int, lease_ms: int, owner: str
    ) -> list[OutboxEntry]:
        return await self._run(self.outbox.claim_due, now_ms, limit, lease_ms, owner)

    async def expire_leases(self, owner_prefix: str, now_ms: int) -> int:
        return await self._run(self.outbox.expire_leases, owner_prefix, now_ms)

    async def mark_delivered_many(
        self, deliveries: Sequence[tuple[str, DeliveryReceipt]]
    ) -> list[bool]:
        return await self._run(self.outbox.mark_delivered_many, deliveries)

    async def reschedule(
        self,
        message_id: str,
        owner: str,
        next_send_time_ms: int,
        error: str,
        now_ms: int,
        *,
        maybe_stored: bool,
    ) -> bool:
        return await self._run(
            self.outbox.reschedule,
            message_id,
            owner,
            next_send_time_ms,
            error,
            now_ms,
            maybe_stored=maybe_stored,
        )

    async def bury(self, message_id: str, owner: str, error: str, now_ms: int) -> bool:
        return await self._run(self.outbox.bury, message_id, owner, error, now_ms)

    async def release(self, message_id: str, owner: str) -> bool:
        return await self._run(self.outbox.release, message_id, owner)

    async def retry_now(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        return await self._run(self.outbox.retry_now, message_ids, now_ms)

    async def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        return await self._run(self.outbox.requeue, message_ids, now_ms)

    async def scan(self, state: EntryState | None, after_seq: int, limit: int) -> list[OutboxEntry]:
        return await self._run(self.outbox.scan, state, after_seq, limit)

    async def breakdown(self) -> Breakdown:
        """outbox/admin.py's pass over every entry, on the outbox's threads."""
        return await self._run(breakdown, self.outbox)

    async def purge(self, state: EntryState, before_ms: int) -> int:
        return await self._run(self.outbox.purge, state, before_ms)

    async def pending_groups(self) -> set[tuple[str, str]]:
        return await self._run(self.outbox.pending_groups)

    async def has_pending_group(self, topic: str, message_group: str) -> bool:
        return await self._run(self.outbox.has_pending_group, topic, message_group)

    async def stats(self, now_ms: int) -> OutboxStats:
        return await self._run(self.outbox.stats, now_ms)

    async def check_writable(self) -> None:
        await self._run(self.outbox.check_writable)

    async def close(self) -> None:
        """Wait for calls in progress, then close the backend."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._executor.shutdown, True)
        await loop.run_in_executor(None, self.outbox.close)

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
