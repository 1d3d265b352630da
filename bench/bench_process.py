"""What the bench scripts share about the processes they measure: CPU time read from Linux /proc
and a stop that escalates from SIGTERM to SIGKILL. The scripts run as ``python bench/NAME.py``,
so this module is found beside them."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def stop_process(proc: subprocess.Popen[Any], deadline_s: float) -> tuple[int, bool]:
    """SIGTERM, then SIGKILL if it has not exited within ``deadline_s``: (exit code, killed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(deadline_s), False
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(deadline_s), True
