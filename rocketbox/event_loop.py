"""Which asyncio event loop the servers run on: uvloop by default, the standard library's as a
fallback (``rocketbox --event-loop asyncio``).

uvloop's libuv loop makes each gRPC call cheaper for both servers (more throughput under
grpc.aio, docs/benchmarks.md); the standard loop stays selectable for
platforms without a uvloop wheel and for telling a loop bug from ours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

EVENT_LOOPS = ("uvloop", "asyncio")
EVENT_LOOP_DEFAULT = "uvloop"
T = TypeVar("T")


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The factory of the loop ``name`` names; ValueError for an unknown name."""
    if name == "uvloop":
        import uvloop  # noqa: PLC0415 - only the processes that choose it load libuv

        return uvloop.new_event_loop
    if name == "asyncio":
        return asyncio.new_event_loop
    raise ValueError(f"event loop {name!r}: expected one of {', '.join(EVENT_LOOPS)}")


def run(main: Coroutine[Any, Any, T], name: str = EVENT_LOOP_DEFAULT) -> T:
    """``asyncio.run`` on the loop ``name`` names."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        return runner.run(main)
