"""Helpers of the conformance tests: ``claim`` (the ids a claim returns), and the child
processes of the feature tests: ``Claimer`` (claimer.py, beside this file) for the shared-outbox
tests, ``Putter`` (putter.py) for the process-kill test."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

from outbox import Outbox
from tests.outbox.entries import LEASE_MS, NOW_MS, ids

REPO_ROOT = Path(__file__).resolve().parents[3]


def claim(ob: Outbox, now_ms: int = NOW_MS, limit: int = 100, owner: str = "w1") -> list[str]:
    return ids(ob.claim_due(now_ms, limit, LEASE_MS, owner))


class ChildProcess:
    """A ``python -m MODULE ARGS...`` child whose stdout lines are read as they come."""

    DEADLINE_S = 120.0

    def __init__(self, module: str, *args: str) -> None:
        self.module = module
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next_line(self) -> str | None:
        """The next line (None: stdout closed), waiting at most DEADLINE_S."""
        return self._lines.get(timeout=self.DEADLINE_S)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=self.DEADLINE_S)
        self._reader.join(timeout=self.DEADLINE_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def _failure(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=self.DEADLINE_S)
        stderr = self.proc.stderr
        errors = stderr.read() if stderr is not None and not stderr.closed else ""
        return f"{self.module} exited {self.proc.returncode}: {errors}"


class Claimer(ChildProcess):
    """claimer.py in a child process: READY, then GO, then CLAIMED lines, DONE."""

    def __init__(self, url: str, owner: str) -> None:
        super().__init__("tests.outbox.conformance.claimer", url, owner, str(NOW_MS), "3")

    def wait_ready(self) -> None:
        assert self.next_line() == "READY", self._failure()

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("GO\n")
        self.proc.stdin.close()

    def finish(self) -> list[str]:
        assert self.proc.wait(timeout=self.DEADLINE_S) == 0, self._failure()
        self._reader.join(timeout=self.DEADLINE_S)
        lines = []
        while (line := self._lines.get_nowait()) is not None:
            lines.append(line)
        assert lines[-1:] == ["DONE"], self._failure()
        return [line.split()[1] for line in lines if line.startswith("CLAIMED ")]


class Putter(ChildProcess):
    """putter.py in a child process: PUT lines, then HELD with the outbox open."""

    def __init__(self, url: str, count: int) -> None:
        super().__init__("tests.outbox.conformance.putter", url, str(count))

    def wait_held(self) -> list[str]:
        """The ids the child's puts acknowledged, once it holds them all."""
        acked = []
        while (line := self.next_line()) != "HELD":
            assert line is not None, self._failure()
            assert line.startswith("PUT "), self._failure()
            acked.append(line.split()[1])
        return acked
