"""The broker's background tasks, all in one root asyncio.TaskGroup (CONTRIBUTING.md §2).

The BrokerController owns the group; services start their loops through BackgroundTasks, never
with a bare ``asyncio.create_task``. A task that dies (any exception but cancellation) is logged
at once with its traceback and raised as BackgroundTaskError: the TaskGroup then cancels the others
and the task that serves (the broker's main), so the broker shuts down and exits non-zero instead
of running on without, say, its timer or its progress writer, which would only be noticed at
shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from broker.errors import BackgroundTaskError

LOG = logging.getLogger(__name__)


class BackgroundTasks:
    def __init__(self, group: asyncio.TaskGroup) -> None:
        self._group = group

    def start(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return self._group.create_task(_loudly(coro, name), name=name)


async def _loudly(coro: Coroutine[Any, Any, None], name: str) -> None:
    try:
        await coro
    except Exception as e:
        LOG.critical("broker task %r died; the broker stops", name, exc_info=True)
        raise BackgroundTaskError(f"broker task {name!r} died: {e!r}") from e
