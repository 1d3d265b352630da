"""The outbox seen from the event loop: its blocking calls run on threads this wrapper owns, so a
slow fsync or database round trip never stalls the sidecar's gRPC serving."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from outbox.outbox import Outbox

P = ParamSpec("P")
T = TypeVar("T")


class AsyncOutbox:
    def __init__(self, outbox: Outbox, threads: int) -> None:
        self.outbox = outbox
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="outbox")

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def close(self) -> None:
        """Wait for calls in progress, then close the backend."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._executor.shutdown, True)
        await loop.run_in_executor(None, self.outbox.close)
