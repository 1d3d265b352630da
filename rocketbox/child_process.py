"""A rocketbox server run as a child process of ``rocketbox up``'s local cluster.

A cluster's brokers are processes of their own, as on real machines: one can be killed (SIGKILL)
and the rest carry on, which is what a local cluster is for. Each child's output is relayed to
this process's stderr line by line with its name in front, so one terminal shows the cluster;
its ready line ("... listening on HOST:PORT") gives the port it bound (port 0: a free one).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import re
import signal
import sys
from collections.abc import Sequence
from typing import Any

from rocketbox_api.deadlines import within

LOG = logging.getLogger("rocketbox")

# A server recovers its store before it serves: a large one takes a while.
CHILD_READY_DEADLINE_S = 120.0
# SIGTERM lets a broker flush and checkpoint; past this it is killed.
CHILD_STOP_DEADLINE_S = 30.0
# Longest output line relayed whole; a longer one is cut (a line is read into memory first).
CHILD_LINE_BYTES_MAX = 64 * 1024


# Linux's prctl(PR_SET_PDEATHSIG): the kernel signals the child when its parent dies.
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when `up` dies (even by SIGKILL), so a killed
    `up` leaves no broker holding its ports and stores."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class ChildStartError(Exception):
    """A child that exited, or did not print its ready line in time; names it and its output."""


class ChildProcess:
    """``python -m rocketbox <args>``; ``start`` returns once ``ready_line`` was printed."""

    def __init__(self, name: str, args: Sequence[str], ready_line: re.Pattern[str]) -> None:
        self.name = name
        self.args = list(args)
        self._ready_line = ready_line
        self._ready: asyncio.Future[re.Match[str]] | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._relays: list[asyncio.Task[None]] = []
        self._tail: list[str] = []  # the last lines, for a start failure's message
        self.ready_match: re.Match[str] | None = None
        self.stopping = False

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    async def start(self) -> re.Match[str]:
        self._ready = asyncio.get_running_loop().create_future()
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rocketbox",
            *self.args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=CHILD_LINE_BYTES_MAX,
            # Its own session: a terminal's Ctrl-C reaches `up` alone, which stops the cluster
            # in order (the sidecar before the brokers it sends to).
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        assert self._process.stdout is not None
        assert self._process.stderr is not None
        self._relays = [
            asyncio.create_task(self._relay(self._process.stdout)),
            asyncio.create_task(self._relay(self._process.stderr)),
        ]
        exited = asyncio.create_task(self._process.wait())
        either: list[asyncio.Future[Any]] = [self._ready, exited]
        try:
            done, _ = await asyncio.wait(
                either,
                timeout=CHILD_READY_DEADLINE_S,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            exited.cancel()
        if self._ready in done:
            self.ready_match = self._ready.result()
            return self.ready_match
        await self.stop()
        why = (
            f"exited {self._process.returncode}"
            if exited in done
            else f"printed no ready line in {CHILD_READY_DEADLINE_S:.0f} s"
        )
        tail = "\n".join(self._tail[-20:])
        raise ChildStartError(f"{self.name} {why}; its last output:\n{tail}")

    async def _relay(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line past the limit: relay what is buffered, go on
                raw = await stream.read(CHILD_LINE_BYTES_MAX)
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip("\n")
            self._tail = [*self._tail[-19:], line]
            sys.stderr.write(f"[{self.name}] {line}\n")
            sys.stderr.flush()
            ready = self._ready
            if ready is not None and not ready.done():
                match = self._ready_line.search(line)
                if match is not None:
                    ready.set_result(match)

    async def wait(self) -> int:
        assert self._process is not None
        return await self._process.wait()

    async def stop(self) -> int:
        """SIGTERM; SIGKILL past CHILD_STOP_DEADLINE_S. Returns the exit code."""
        process = self._process
        assert process is not None
        self.stopping = True
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await within(process.wait(), CHILD_STOP_DEADLINE_S)
            except TimeoutError:
                LOG.warning("%s did not stop in %.0f s: killed", self.name, CHILD_STOP_DEADLINE_S)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        for relay in self._relays:
            with contextlib.suppress(asyncio.CancelledError):
                await relay
        assert process.returncode is not None
        return process.returncode
