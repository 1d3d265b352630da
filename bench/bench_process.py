"""What the bench scripts share about the processes they measure: CPU time read from Linux /proc,
a wait until a process is idle, and a stop that escalates from SIGTERM to SIGKILL. The scripts
run as ``python bench/NAME.py``, so this module is found beside them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
# Idle: below QUIET_CORES of CPU over QUIET_SAMPLE_S.
QUIET_SAMPLE_S = 0.25
QUIET_CORES = 0.05


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def wait_idle(cpu_seconds: Callable[[], float], deadline_s: float) -> bool:
    """Until a process's background work after a load (the broker preparing its next segment,
    the sidecar's outbox compacting) is done, so the next measurement sees its steady state:
    True once it is idle, False when it is still busy at ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        before = cpu_seconds()
        time.sleep(QUIET_SAMPLE_S)
        if cpu_seconds() - before < QUIET_CORES * QUIET_SAMPLE_S:
            return True
    return False


def stop_process(proc: subprocess.Popen[Any], deadline_s: float) -> tuple[int, bool]:
    """SIGTERM, then SIGKILL if it has not exited within ``deadline_s``: (exit code, killed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(deadline_s), False
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(deadline_s), True
