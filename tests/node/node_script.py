"""Run one of tests/node's scripts with ``node``, as the Node tests do."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent


def text_of(output: str | bytes | None) -> str:
    """A child's captured output (bytes when a timeout cut it short), as text."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def run_node_script(
    command: list[str], deadline_s: float, env: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """Run ``command`` (``[node, script, args…]``) in tests/node; its stdout, and a report of
    its whole output for failure messages. Fails the test on a timeout or a non-zero exit.
    ``env``: variables set for the script, beside this process's."""
    name = Path(command[1]).name
    try:
        done = subprocess.run(
            command,
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=deadline_s,
            check=False,
            env=None if env is None else {**os.environ, **env},
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"{name} still running after {deadline_s} s\n"
            f"stdout:\n{text_of(e.stdout)}\nstderr:\n{text_of(e.stderr)}"
        )
    report = (
        f"{name} {' '.join(command[2:])} exited {done.returncode}\nstdout:\n{done.stdout}\n"
        f"stderr (the client's log):\n{done.stderr}"
    )
    assert done.returncode == 0, report
    return done.stdout, report
