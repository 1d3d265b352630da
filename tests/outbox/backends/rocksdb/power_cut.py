"""A power cut of a RocksDB outbox, modelled exactly: what survives is what was fsynced.

A SIGKILL of the process is no power cut: the kernel keeps every byte the process wrote. A power
cut keeps only what an fsync (or fdatasync) made durable. RocksDB syncs its tables, MANIFEST,
CURRENT and OPTIONS files as it makes them (its own contract); what it may leave unsynced is the
tail of its write-ahead log, the ``*.log`` files: the writes made without ``sync``.

So the model: the writer (power_cut_writer.py) runs with fsync_log.c preloaded, which records,
at every fsync/fdatasync that succeeds, the file's path and its size when the call began. At a
cut the writer is stopped (SIGSTOP: nothing moves while the files are read), its directory is
copied, and each WAL file in the copy is cut to its last synced size (to nothing if it was
never synced): the worst a power cut can leave, since writeback may have saved more, never
less. The copy is then opened as a restarted sidecar would open the outbox. Deterministic: no
timing decides what is kept, only the order of the writer's calls.

A C compiler (``cc``) builds the library; without one the tests fail saying so.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest

from tests.rocketbox_process import wait_until

REPO_ROOT = Path(__file__).resolve().parents[4]
FSYNC_LOG_SOURCE = Path(__file__).with_name("fsync_log.c")
STEP_DEADLINE_S = 60.0


def build_fsync_log(directory: Path) -> Path:
    """fsync_log.c built into ``directory``; the shared library's path."""
    library = directory / "fsync_log.so"
    cc = shutil.which("cc")
    if cc is None:
        pytest.fail("the power-cut tests build tests/.../fsync_log.c: no C compiler (cc) found")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(library), str(FSYNC_LOG_SOURCE), "-ldl"],
        check=True,
        timeout=STEP_DEADLINE_S,
    )
    return library


def synced_sizes(log: Path) -> dict[Path, int]:
    """Each file's size at its last successful fsync, from the library's log."""
    sizes: dict[Path, int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            size, name = line.split(" ", 1)
            sizes[Path(name)] = int(size)
    return sizes


class PowerCutWriter:
    """power_cut_writer.py in a child process, fsyncs recorded; ``cut`` copies what a power cut
    would leave of its outbox, ``copy`` what a SIGKILL would."""

    def __init__(self, path: Path, work: Path, *, sync_claims: bool = True) -> None:
        self.path = path.resolve()
        self.log = work / "fsync.log"
        env = dict(os.environ, LD_PRELOAD=str(build_fsync_log(work)), FSYNC_LOG=str(self.log))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.outbox.backends.rocksdb.power_cut_writer",
             str(self.path), "true" if sync_claims else "false"],
            cwd=REPO_ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # the writer is gone

    def run(self, command: str) -> list[str]:
        """Send ``command``; once the writer says it returned, the ids it printed."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=STEP_DEADLINE_S)
        except queue.Empty:
            pytest.fail(f"the writer did not finish {command!r} in {STEP_DEADLINE_S} s")
        if not line:
            assert self.proc.stderr is not None
            pytest.fail(f"the writer died at {command!r}: {self.proc.stderr.read()}")
        done, name, *ids = line.split()
        assert (done, name) == ("DONE", command.split(maxsplit=1)[0]), line
        return ids

    def cut(self, to: Path) -> Path:
        """The outbox as a power cut now would leave it: a copy whose WAL files hold only what
        was fsynced."""
        with self._stopped():
            synced = synced_sizes(self.log)
            shutil.copytree(self.path, to)
        for wal in to.glob("*.log"):
            os.truncate(wal, min(synced.get(self.path / wal.name, 0), wal.stat().st_size))
        return to

    def copy(self, to: Path) -> Path:
        """The outbox as a SIGKILL now would leave it: every byte the kernel has."""
        with self._stopped():
            shutil.copytree(self.path, to)
        return to

    def _stopped(self) -> _Stopped:
        return _Stopped(self.proc)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=STEP_DEADLINE_S)
        self._reader.join(timeout=STEP_DEADLINE_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


class _Stopped:
    """The writer stopped (SIGSTOP) for the block, continued after it."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._proc = proc

    def __enter__(self) -> None:
        self._proc.send_signal(signal.SIGSTOP)
        wait_until(self._is_stopped, STEP_DEADLINE_S, "the writer stopped by SIGSTOP")

    def _is_stopped(self) -> bool:
        # Each thread's /proc/<pid>/task/<tid>/stat: "tid (comm) state ...", T once stopped.
        tasks = Path(f"/proc/{self._proc.pid}/task").iterdir()
        return all((t / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T" for t in tasks)

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._proc.send_signal(signal.SIGCONT)
