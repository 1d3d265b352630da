"""What the benches share about the processes they run and measure (bench/broker, bench/sidecar):
CPU time read from Linux /proc, a wait until a process is idle, a stop that escalates from
SIGTERM to SIGKILL, a process found by name, the machine's load, signals that unwind the bench
(so that every process it started is stopped) rather than kill it, generated data removed on the
way out whatever ends the bench (bench/reconcile_*); and ``Child``, a process
the bench starts and waits for until it serves."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

CLK_TCK = os.sysconf("SC_CLK_TCK")
# Idle: below QUIET_CORES of CPU over QUIET_SAMPLE_S.
QUIET_SAMPLE_S = 0.25
QUIET_CORES = 0.05
READY_DEADLINE_S = 60.0
STOP_DEADLINE_S = 60.0
# How often a starting child's log is read for its ready line.
READY_POLL_S = 0.005
T = TypeVar("T")


class BenchError(Exception):
    """A measurement could not be made or gave a wrong result (a process failed, a message was
    lost or refused): the bench exits 1."""


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


def find_process(name: str) -> int | None:
    """The pid of a running process called ``name`` (only read, to report its CPU use)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == name:
                return int(entry.name)
        except OSError:
            continue
    return None


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextmanager
def removed_on_exit(root: Path) -> Iterator[None]:
    """``root`` (a bench's generated data) goes at the end, also on SIGINT/SIGTERM (exit 130)."""

    def removed(signum: int, _frame: object) -> None:
        shutil.rmtree(root, ignore_errors=True)
        print(f"interrupted (signal {signum}): removed {root}", file=sys.stderr)
        os._exit(130)

    previous = {s: signal.signal(s, removed) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for s, handler in previous.items():
            signal.signal(s, handler)


def interrupted(signum: int, _frame: object) -> None:
    """A signal handler: SIGTERM (and SIGINT) unwind like Ctrl-C, so every process started is
    stopped and every data directory removed on the way out."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run``, where SIGTERM and SIGINT cancel the coroutine rather than raise in the
    middle of the event loop: its cleanup runs with every connection intact (NATS streams are
    deleted, consumers stopped), then KeyboardInterrupt is raised as elsewhere."""
    return asyncio.run(cancelled_by_signals(coro))


async def cancelled_by_signals(coro: Coroutine[Any, Any, T]) -> T:
    """SIGTERM and SIGINT cancel ``coro`` (its cleanup runs), then raise KeyboardInterrupt."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    signalled: list[signal.Signals] = []

    def cancel(signum: signal.Signals) -> None:
        signalled.append(signum)
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, cancel, signum)
    try:
        return await coro
    except asyncio.CancelledError:
        if signalled:
            raise KeyboardInterrupt(signalled[0].name) from None
        raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)  # leaves SIG_DFL: ours again
            signal.signal(signum, interrupted)


class Child:
    """A process the bench started, with its output in a log file (never a pipe the bench must
    keep reading: a sidecar logs every spool). Ready once a line of the log matches ``ready``,
    whose first group is the port it listens on; BenchError if it exits or is not ready first."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        ready: re.Pattern[str],
        log: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.port = 0
        self.ready_at = 0.0
        self._log_file: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready(ready)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, ready: re.Pattern[str]) -> None:
        deadline = time.monotonic() + READY_DEADLINE_S
        offset = 0
        pending = b""
        while time.monotonic() < deadline:
            with self.log.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                found = ready.search(line.decode(errors="replace"))
                if found:
                    self.ready_at = time.perf_counter()
                    self.port = int(found.group(1))
                    return
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name} exited {self.proc.returncode}:\n{self.output()}")
            time.sleep(READY_POLL_S)
        raise BenchError(f"{self.name} not ready in {READY_DEADLINE_S:.0f} s:\n{self.output()}")

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self, last: int = 30) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-last:])

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited within the deadline; the exit code."""
        code, killed = stop_process(self.proc, STOP_DEADLINE_S)
        self._log_file.close()
        if killed:
            with self.log.open("a") as f:
                f.write(f"[bench: killed after {STOP_DEADLINE_S:.0f} s without exiting]\n")
        return code

    def stop_checked(self) -> None:
        code = self.stop()
        if code != 0:
            raise BenchError(f"{self.name} exited {code} on SIGTERM:\n{self.output()}")
