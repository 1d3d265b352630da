"""Settings of the ``rocketbox`` group that every command's run uses (click's context object)."""

from __future__ import annotations

import gc
import os
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from rocketbox import event_loop
from rocketbox.tracing_setup import configure_tracing

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RunSettings:
    event_loop: str = event_loop.EVENT_LOOP_DEFAULT
    # The command run (``broker``, ``sidecar``, ...): the default name of its traced service.
    command: str = ""


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine on the loop ``rocketbox --event-loop`` chose, its spans
    exported where the OTEL_* environment says (tracing_setup.py; only the servers run here)."""
    # What start-up made (every imported module's objects) lives as long as the process.
    # Frozen, a full collection no longer walks it: before, each such collection was a pause
    # that every message in flight paid (it showed in the sidecar's p99 latency).
    gc.collect()
    gc.freeze()
    ctx = click.get_current_context(silent=True)
    settings = (ctx.find_object(RunSettings) if ctx is not None else None) or RunSettings()
    try:
        configure_tracing(os.environ, settings.command)
    except click.UsageError:
        main.close()  # never run: closed, so that it is not reported as never awaited
        raise
    return event_loop.run(main, settings.event_loop)
