"""Flush services: the commitlog's, ASYNC_FLUSH (periodic) or SYNC_FLUSH (group commit), and the
consume queues' and index's (with the checkpoint).

Group commit: a SYNC_FLUSH put appends its record, then waits until the flushed offset passes the
record's end. One service thread runs fdatasync for everyone waiting; puts that arrive while a
sync is in progress are covered by the next one, so N concurrent puts cost about one fsync, not
N. Waiters are threads (a shared Condition, one notify per fsync) or asyncio tasks (one
``call_soon_threadsafe`` per event loop per fsync), so wake-ups are batched too.

An fsync that fails (EIO, ENOSPC) leaves the page cache in an unknown state (the "fsyncgate"
lesson): the service reports it once through ``on_error`` and stops confirming durability.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.service_thread import ServiceThread

LOG = logging.getLogger(__name__)

FlushFn = Callable[[], int]
FlushedFn = Callable[[int], None]
ErrorFn = Callable[[OSError], None]
IDLE_WAIT_S = 0.05


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: many appends, one fsync (RocketMQ's GroupCommitService)."""

    def __init__(
        self,
        flush: FlushFn,
        flushed_offset: int,
        requests_max: int,
        on_flushed: FlushedFn,
        on_error: ErrorFn,
    ) -> None:
        super().__init__("GroupCommitService")
        self._flush = flush
        self._on_flushed = on_flushed
        self._on_error = on_error
        self._requests_max = requests_max
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the service waits for requests
        self._done = threading.Condition(self._lock)  # thread waiters wait for the fsync
        self._flushed_offset = flushed_offset
        self._requested_offset = flushed_offset
        self._admitted = 0
        self._failed = False
        self.flush_count = 0  # fsyncs done: puts / flush_count is the group-commit batch
        self._async_waiters: dict[
            asyncio.AbstractEventLoop, list[tuple[int, asyncio.Future[bool]]]
        ] = {}

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def admit(self) -> bool:
        """Reserve a waiting slot before appending; False when group_commit_requests_max puts
        already wait (the caller then answers 'system busy' without writing)."""
        with self._lock:
            if self._admitted >= self._requests_max or self._failed:
                return False
            self._admitted += 1
            return True

    def release(self) -> None:
        """Give back a slot reserved by ``admit`` whose put was not appended."""
        with self._lock:
            self._admitted -= 1

    def wait_flushed(self, next_offset: int, timeout_s: float) -> bool:
        """Block until every byte below ``next_offset`` is durable. Releases the admit slot."""
        with self._lock:
            try:
                if self._flushed_offset >= next_offset:
                    return True
                self._request(next_offset)
                return self._done.wait_for(lambda: self._flushed_offset >= next_offset, timeout_s)
            finally:
                self._admitted -= 1

    async def wait_flushed_async(self, next_offset: int, timeout_s: float) -> bool:
        """The asyncio form of ``wait_flushed``: the event loop keeps running meanwhile."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        with self._lock:
            if self._flushed_offset >= next_offset:
                self._admitted -= 1
                return True
            self._async_waiters.setdefault(loop, []).append((next_offset, fut))
            self._request(next_offset)
        # A plain timer rather than asyncio.wait_for, which costs a Task per put.
        timer = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            with self._lock:
                self._admitted -= 1

    def _request(self, next_offset: int) -> None:
        if next_offset > self._requested_offset:
            self._requested_offset = next_offset
            self._work.notify()

    def run(self) -> None:
        while True:
            with self._lock:
                while self._requested_offset <= self._flushed_offset and not self.is_stopped:
                    self._work.wait(IDLE_WAIT_S)
                if self.is_stopped and self._requested_offset <= self._flushed_offset:
                    return
            if not self._flush_once() or self.is_stopped:
                # Stopping: the flush above covered every put appended before shutdown.
                return

    def _flush_once(self) -> bool:
        try:
            flushed = self._flush()
        except OSError as e:
            LOG.error("commitlog fsync failed; durability can no longer be confirmed: %s", e)
            with self._lock:
                self._failed = True
            self._on_error(e)
            return False
        self._on_flushed(flushed)
        with self._lock:
            self.flush_count += 1
            self._flushed_offset = max(self._flushed_offset, flushed)
            self._done.notify_all()
            ready: list[tuple[asyncio.AbstractEventLoop, list[asyncio.Future[bool]]]] = []
            for loop, waiters in list(self._async_waiters.items()):
                done = [f for off, f in waiters if off <= self._flushed_offset]
                if done:
                    rest = [(off, f) for off, f in waiters if off > self._flushed_offset]
                    if rest:
                        self._async_waiters[loop] = rest
                    else:
                        del self._async_waiters[loop]
                    ready.append((loop, done))
        for loop, futures in ready:
            # A closed event loop has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, futures)
        return True


def _resolve(futures: list[asyncio.Future[bool]]) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(True)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)  # not durable in time: the put answers FLUSH_DISK_TIMEOUT


class FlushRealTimeService(ServiceThread):
    """ASYNC_FLUSH: fsync every interval once enough pages are dirty, and at least every
    thorough interval (RocketMQ's FlushRealTimeService)."""

    def __init__(
        self,
        flush: FlushFn,
        dirty_bytes: Callable[[], int],
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        on_flushed: FlushedFn,
        on_error: ErrorFn,
    ) -> None:
        super().__init__("FlushRealTimeService")
        self._flush = flush
        self._dirty_bytes = dirty_bytes
        self._interval_ms = interval_ms
        self._least_bytes = least_pages * 4096
        self._thorough_interval_ms = thorough_interval_ms
        self._on_flushed = on_flushed
        self._on_error = on_error

    def run(self) -> None:
        last_thorough = time.monotonic()
        while not self.is_stopped:
            self.wait_for_running(self._interval_ms)
            now = time.monotonic()
            thorough = (now - last_thorough) * 1000 >= self._thorough_interval_ms
            dirty = self._dirty_bytes()
            if dirty and (thorough or dirty >= self._least_bytes):
                last_thorough = now if thorough else last_thorough
                if not self._flush_once():
                    return
        self._flush_once()  # shutdown: everything appended is made durable

    def _flush_once(self) -> bool:
        try:
            self._on_flushed(self._flush())
        except OSError as e:
            LOG.error("commitlog fsync failed; durability can no longer be confirmed: %s", e)
            self._on_error(e)
            return False
        return True


class FlushConsumeQueueService(ServiceThread):
    """Flushes consume queues and index and advances the checkpoint every interval
    (RocketMQ's FlushConsumeQueueService); ``flush_logics`` does one pass."""

    def __init__(self, flush_logics: Callable[[], None], interval_ms: int) -> None:
        super().__init__("FlushConsumeQueueService")
        self._flush_logics = flush_logics
        self._interval_ms = interval_ms

    def run(self) -> None:
        while not self.is_stopped:
            self.wait_for_running(self._interval_ms)
            try:
                self._flush_logics()
            except OSError as e:
                LOG.error("consume queue / index flush failed: %s", e)


def commit_log_flusher(
    cfg: MessageStoreConfig,
    flush: FlushFn,
    dirty_bytes: Callable[[], int],
    flushed_offset: int,
    on_flushed: FlushedFn,
    on_error: ErrorFn,
) -> ServiceThread:
    """The commitlog's flush service for the configured flush_disk_type: group commit under
    SYNC_FLUSH, the periodic flush otherwise."""
    if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
        return GroupCommitService(
            flush, flushed_offset, cfg.group_commit_requests_max, on_flushed, on_error
        )
    return FlushRealTimeService(
        flush, dirty_bytes, cfg.flush_interval_commit_log_ms, cfg.flush_commit_log_least_pages,
        cfg.flush_commit_log_thorough_interval_ms, on_flushed, on_error,
    )  # fmt: skip
