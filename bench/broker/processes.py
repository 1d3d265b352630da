"""The broker bench's child processes: brokers (the checkout's store or the compiled one the image
ships) and the bench's own peer servers, each ready when it prints where it listens.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path

from bench.broker.figures import (
    QUEUES,
    READY_DEADLINE_S,
    REPO_ROOT,
    STOP_DEADLINE_S,
    TOPIC,
    BenchError,
)
from bench.process_control import (
    process_cpu_seconds,
    stop_process,
    wait_idle,
)


# -- child processes ------------------------------------------------------------------------------
class ChildProcess:
    """A child that prints ``<ready_prefix>127.0.0.1:PORT`` once it serves (anything may follow);
    its output is kept for failure reports."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        ready_prefix: str,
        env: dict[str, str] | None = None,
        cwd: Path = REPO_ROOT,
    ) -> None:
        self.name = name
        self.lines: list[str] = []
        self.port = 0
        self._ready_line = re.compile(re.escape(ready_prefix) + r"127\.0\.0\.1:(\d+)\b")
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(READY_DEADLINE_S) or not self.port:
            self.stop()
            raise BenchError(f"{name} did not become ready:\n{self.output()}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            found = self._ready_line.match(line)
            if found:
                self.port = int(found.group(1))
                self._ready.set()
        self._ready.set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self, last: int = 40) -> str:
        return "".join(self.lines[-last:])

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited within the deadline; the exit code."""
        code, killed = stop_process(self.proc, STOP_DEADLINE_S)
        if killed:
            self.lines.append(f"[bench: killed after {STOP_DEADLINE_S:.0f} s without exiting]\n")
        self._reader.join(STOP_DEADLINE_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


# The store the brokers run: the checkout's, or (--store compiled) the one the image ships: the
# wheel built with ROCKETBOX_MYPYC=1 (setup.py), unpacked here and first on the brokers' path.
compiled_site: Path | None = None


def build_compiled_site(base: Path) -> Path:
    """The wheel with the store compiled by mypyc, built from the checkout and unpacked."""
    wheels = base / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
         "--disable-pip-version-check", "-w", str(wheels), str(REPO_ROOT)],
        env={**os.environ, "ROCKETBOX_MYPYC": "1"}, cwd=base, check=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("rocketbox-*.whl")
    site = base / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def start_broker(data_dir: Path, flush: str, segment_mib: int, *extra: str) -> ChildProcess:
    argv = [
        sys.executable, "-m", "rocketbox", "broker",
        "--data-dir", str(data_dir), "--listen-host", "127.0.0.1", "--listen-port", "0",
        "--flush", flush, "--segment-size-mib", str(segment_mib),
        "--topic", f"{TOPIC}:{QUEUES}:NORMAL", *extra,
    ]  # fmt: skip
    if compiled_site is None:
        return ChildProcess(f"broker ({flush})", argv, "broker listening on ")
    # Outside the checkout, so that `-m rocketbox` does not find the checkout's modules first.
    env = {**os.environ, "PYTHONPATH": str(compiled_site)}
    child = ChildProcess(
        f"broker ({flush}, compiled store)", argv, "broker listening on ", env, compiled_site.parent
    )
    if not any("(store compiled)" in line for line in child.lines):
        child.stop()
        raise BenchError(f"{child.name} did not run the compiled store:\n{child.output()}")
    return child


def wait_quiet(child: ChildProcess) -> None:
    """Until ``child`` is idle after a load (process_control.wait_idle)."""
    if not wait_idle(child.cpu_seconds, READY_DEADLINE_S):
        raise BenchError(f"{child.name} still busy {READY_DEADLINE_S:.0f} s after the warm-up")


def stop_checked(child: ChildProcess) -> None:
    code = child.stop()
    if code != 0:
        raise BenchError(f"{child.name} exited {code} on SIGTERM:\n{child.output()}")


def start_helper(flag: str, name: str) -> ChildProcess:
    """The bench in a child process, serving ``flag``'s server."""
    argv = [sys.executable, "-m", "bench.broker", flag]
    return ChildProcess(name, argv, f"{name} listening on ")
