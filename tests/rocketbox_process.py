"""A real ``rocketbox`` process for integration tests (``python -m rocketbox <command> …``).

It is ready once it prints its ready line with the port it bound (tests pass port 0: a free port
of 127.0.0.1). It is stopped with SIGTERM (and must exit 0) or killed with SIGKILL, and its
output is kept for failure reports.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
READY_DEADLINE_S = 60.0
STOP_DEADLINE_S = 60.0


class RocketboxProcess:
    def __init__(self, name: str, ready_line: re.Pattern[str], args: list[str]) -> None:
        self.name = name
        self.lines: list[str] = []
        self.port = 0
        self._ready_line = ready_line
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketbox", *args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(READY_DEADLINE_S) or not self.port:
            self.kill()
            pytest.fail(f"{name} did not become ready:\n{self.output()}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            ready = self._ready_line.search(line)
            if ready and not self.port:
                self.port = int(ready.group(1))
                self._ready.set()
        self._ready.set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self) -> str:
        return "".join(self.lines)

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM, and the process must stop cleanly."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self._wait()
        assert code == 0, f"{self.name} exited {code}:\n{self.output()}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self._wait()

    def _wait(self) -> int:
        try:
            code = self.proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(STOP_DEADLINE_S)
        self._reader.join(STOP_DEADLINE_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def wait_until(condition: object, deadline_s: float, what: str) -> None:
    """Poll ``condition()`` until true; fail naming ``what`` after ``deadline_s``."""
    assert callable(condition)
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.02)
