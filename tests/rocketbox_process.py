"""A real ``rocketbox`` process for integration tests (``python -m rocketbox <command> …``).

The process itself is chaos/processes.py's (one implementation for the tests and the chaos
suite); what this adds is the tests' way with it: it is started as it is built, a process that
does not become ready fails the test, and ``stop`` (SIGTERM) fails the test unless the process
exits 0. ``kill`` is SIGKILL. Its output is kept for failure reports.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from chaos import processes
from chaos.processes import READY_DEADLINE_S, REPO_ROOT, STOP_DEADLINE_S, ProcessError

__all__ = [
    "CLI_DEADLINE_S",
    "READY_DEADLINE_S",
    "REPO_ROOT",
    "STOP_DEADLINE_S",
    "RocketboxProcess",
    "rocketbox_cli",
    "wait_until",
]

# A command-line run is a short-lived process; one that passes this has hung.
CLI_DEADLINE_S = 90.0


class RocketboxProcess(processes.RocketboxProcess):
    def __init__(
        self,
        name: str,
        ready_line: re.Pattern[str],
        args: list[str],
        metrics_line: re.Pattern[str] | None = None,
    ) -> None:
        super().__init__(name, ready_line, args, metrics_line=metrics_line)
        try:
            self.start()
        except ProcessError as e:
            pytest.fail(str(e))

    def stop(self) -> int:
        """SIGTERM, and the process must stop cleanly."""
        code = super().stop()
        assert code == 0, f"{self.name} exited {code}:\n{self.output()}"
        return code


def wait_until(condition: Callable[[], object], deadline_s: float, what: str) -> None:
    """Poll ``condition()`` until true; fail naming ``what`` after ``deadline_s``."""
    try:
        processes.wait_until(condition, deadline_s, what)
    except TimeoutError as e:
        pytest.fail(str(e))


def rocketbox_cli(
    *args: str,
    sidecar: str | None = None,
    broker: str | None = None,
    stdin: bytes = b"",
    encoding: str = "utf-8",
) -> subprocess.CompletedProcess[str]:
    """``rocketbox ARGS`` as a user runs it, the endpoints given by the environment (and no other
    ROCKETBOX_ variable of the test's); its output decoded with ``encoding`` (latin-1 takes any
    bytes: a binary body)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETBOX_")}
    if sidecar is not None:
        env["ROCKETBOX_SIDECAR"] = sidecar
    if broker is not None:
        env["ROCKETBOX_BROKER"] = broker
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=CLI_DEADLINE_S,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(encoding), done.stderr.decode(encoding)
    )
