"""The outbox seen from the event loop: its blocking calls run on threads this wrapper owns, so a
slow fsync or database round trip never stalls the sidecar's gRPC serving.

One typed coroutine per Outbox operation the sidecar uses (outbox/outbox.py says what each
promises); nothing else reaches the backend's blocking methods from the loop.

``opened_later``: an outbox on a server that could not be reached at start (Redis, MySQL) is
opened by the first call after it can be; until then every call raises the opening's
OutboxUnavailableError, so the sidecar serves NOT READY instead of exiting, and becomes READY
when the server comes (sidecar/sidecar.py).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar
from urllib.parse import urlsplit

from outbox.admin import Breakdown, breakdown
from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry, OutboxLimits, OutboxStats
from outbox.errors import OutboxError, OutboxUnavailableError
from outbox.factory import backend_class, open_outbox
from outbox.outbox import Outbox

T = TypeVar("T")


class AsyncOutbox:
    def __init__(self, outbox: Outbox | None, threads: int) -> None:
        self.outbox = outbox
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="outbox")
        self._opener: Callable[[], Outbox] | None = None
        self._opening = threading.Lock()

    @classmethod
    def opened_later(cls, opener: Callable[[], Outbox], threads: int) -> AsyncOutbox:
        """An outbox ``opener`` opens at the first call it succeeds in (module docstring)."""
        async_outbox = cls(None, threads)
        async_outbox._opener = opener
        return async_outbox

    def _opened(self) -> Outbox:
        """The backend, opened now if it was not yet (on an outbox thread)."""
        outbox = self.outbox
        if outbox is not None:
            return outbox
        with self._opening:
            if self.outbox is None:
                assert self._opener is not None, "an AsyncOutbox has an outbox or an opener"
                self.outbox = self._opener()
            return self.outbox

    async def put_groups(
        self, requests: Sequence[Sequence[OutboxEntry]]
    ) -> list[list[OutboxEntry] | OutboxError]:
        return await self._run(lambda o: o.put_groups(requests))

    async def claim_due(
        self, now_ms: int, limit: int, lease_ms: int, owner: str
    ) -> list[OutboxEntry]:
        return await self._run(lambda o: o.claim_due(now_ms, limit, lease_ms, owner))

    async def expire_leases(self, owner_prefix: str, now_ms: int) -> int:
        return await self._run(lambda o: o.expire_leases(owner_prefix, now_ms))

    async def mark_delivered_many(
        self, deliveries: Sequence[tuple[str, DeliveryReceipt]]
    ) -> list[bool]:
        return await self._run(lambda o: o.mark_delivered_many(deliveries))

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
            lambda o: o.reschedule(
                message_id, owner, next_send_time_ms, error, now_ms, maybe_stored=maybe_stored
            )
        )

    async def bury(self, message_id: str, owner: str, error: str, now_ms: int) -> bool:
        return await self._run(lambda o: o.bury(message_id, owner, error, now_ms))

    async def release(self, message_id: str, owner: str) -> bool:
        return await self._run(lambda o: o.release(message_id, owner))

    async def retry_now(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        return await self._run(lambda o: o.retry_now(message_ids, now_ms))

    async def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        return await self._run(lambda o: o.requeue(message_ids, now_ms))

    async def scan(self, state: EntryState | None, after_seq: int, limit: int) -> list[OutboxEntry]:
        return await self._run(lambda o: o.scan(state, after_seq, limit))

    async def breakdown(self) -> Breakdown:
        """outbox/admin.py's pass over every entry, on the outbox's threads."""
        return await self._run(breakdown)

    async def purge(self, state: EntryState, before_ms: int) -> int:
        return await self._run(lambda o: o.purge(state, before_ms))

    async def pending_groups(self) -> set[tuple[str, str]]:
        return await self._run(lambda o: o.pending_groups())

    async def has_pending_group(self, topic: str, message_group: str) -> bool:
        return await self._run(lambda o: o.has_pending_group(topic, message_group))

    async def stats(self, now_ms: int) -> OutboxStats:
        return await self._run(lambda o: o.stats(now_ms))

    async def shared_stats(self, now_ms: int, reader: str, interval_ms: int) -> OutboxStats:
        return await self._run(lambda o: o.shared_stats(now_ms, reader, interval_ms))

    async def check_writable(self) -> None:
        await self._run(lambda o: o.check_writable())

    async def close(self) -> None:
        """Wait for calls in progress, then close the backend (if it was ever opened)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._executor.shutdown, True)
        if self.outbox is not None:
            await loop.run_in_executor(None, self.outbox.close)

    async def _run(self, call: Callable[[Outbox], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: call(self._opened()))


async def open_async_outbox(url: str, limits: OutboxLimits, threads: int) -> AsyncOutbox:
    """The outbox, opened. One on a server (Redis, MySQL: shared by sidecars) that cannot be
    reached yet is opened later (AsyncOutbox.opened_later): the sidecar serves NOT READY and
    says why until it can, as a native sidecar whose startup probe waits for it must (a
    RocksDB outbox that cannot be opened, a bad URL, stop the start instead)."""
    loop = asyncio.get_running_loop()
    try:
        outbox = await loop.run_in_executor(None, open_outbox, url, limits)
    except OutboxUnavailableError:
        scheme = urlsplit(url).scheme.lower()
        if not backend_class(scheme).features.shared_by_sidecars:
            raise
        return AsyncOutbox.opened_later(functools.partial(open_outbox, url, limits), threads)
    return AsyncOutbox(outbox, threads)
