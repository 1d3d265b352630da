"""A real ``rocketbox`` process for integration tests (``python -m rocketbox <command> …``).

The process itself is chaos/processes.py's (one implementation for the tests and the chaos
suite); what this adds is the tests' way with it: it is started as it is built, a process that
does not become ready fails the test, and ``stop`` (SIGTERM) fails the test unless the process
exits 0. ``kill`` is SIGKILL. Its output is kept for failure reports.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from chaos import processes
from chaos.processes import READY_DEADLINE_S, REPO_ROOT, STOP_DEADLINE_S, ProcessError

__all__ = ["READY_DEADLINE_S", "REPO_ROOT", "STOP_DEADLINE_S", "RocketboxProcess", "wait_until"]


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
