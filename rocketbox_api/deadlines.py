"""Waits with a deadline that a cancel always ends: the project's stand-in for ``asyncio.wait_for``.

On Python 3.11, ``asyncio.wait_for`` loses a cancel that arrives while what it waits on has just
finished: it returns that result, and the cancelled task runs on as if never cancelled. A
background loop that its owner's stop cancels (a state log, the resend pool's claimer, the timer
wheel) then never ends, and the stop waits on it for ever. It happened: a ``rocketbox up`` whose
state log woke on a delivery just as SIGTERM's stop cancelled it was SIGKILLed a minute later.

``asyncio.timeout`` counts cancels (``Task.uncancel``), so it tells its own deadline from a cancel
from outside and lets the latter through; Python 3.12 rebuilt ``wait_for`` on it. ruff bans
``asyncio.wait_for`` in this repository (pyproject.toml) so that it does not creep back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """``awaitable``'s result; TimeoutError after ``timeout_s`` (``awaitable`` is then
    cancelled). A cancel of the caller is never lost."""
    async with asyncio.timeout(timeout_s):
        return await awaitable


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """True once ``event`` is set, False after ``timeout_s``. A cancel of the caller is never
    lost, also one that arrives as the event is set."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
