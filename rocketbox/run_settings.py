"""Settings of the ``rocketbox`` group that every command's run uses (click's context object)."""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from rocketbox import event_loop

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RunSettings:
    event_loop: str = event_loop.EVENT_LOOP_DEFAULT


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine on the loop ``rocketbox --event-loop`` chose."""
    ctx = click.get_current_context(silent=True)
    settings = ctx.find_object(RunSettings) if ctx is not None else None
    return event_loop.run(main, (settings or RunSettings()).event_loop)
