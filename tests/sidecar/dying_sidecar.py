"""``rocketbox sidecar`` (its real command: options, logging, event loop) whose sidecar has one
more background task, which dies as soon as the sidecar serves. Run as a process by
test_root_task_group.py: ``python -m tests.sidecar.dying_sidecar <rocketbox sidecar options>``."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

import rocketbox.sidecar_cli
from rocketbox.cli import main
from sidecar.sidecar import Sidecar

FAILURE = "a background task died, injected"


class DyingSidecar(Sidecar):
    """A sidecar with one more background loop: it fails once ``failing`` is set (at once by
    default), as a loop of the sidecar's own would with a bug."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failing = asyncio.Event()
        self.failing.set()

    def _background_loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        return [*super()._background_loops(), ("injected", self._die())]

    async def _die(self) -> None:
        await self.failing.wait()
        raise RuntimeError(FAILURE)


if __name__ == "__main__":
    rocketbox.sidecar_cli.Sidecar = DyingSidecar  # type: ignore[attr-defined]  # the fault injected, for this process only
    main(["sidecar", *sys.argv[1:]])
