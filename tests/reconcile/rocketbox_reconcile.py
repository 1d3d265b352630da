"""``rocketbox reconcile`` run as a process, the way an operator or a CI job runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.rocketbox_process import REPO_ROOT

# A cold Spark JVM, the job and its report: well under this on the project's 2 cores.
RECONCILE_DEADLINE_S = 240


@dataclass
class Reconciled:
    code: int
    stdout: str
    stderr: str
    out: Path

    @property
    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = json.loads((self.out / "summary.json").read_text())
        return summary


def reconcile(*args: str, out: Path, env: dict[str, str] | None = None) -> Reconciled:
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox", "reconcile", *args, "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RECONCILE_DEADLINE_S,
        env=env,
        check=False,
    )
    return Reconciled(done.returncode, done.stdout, done.stderr, out)
