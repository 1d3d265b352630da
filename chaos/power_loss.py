"""A disk that loses power: chaos/power_loss_fs.py, mounted by a process of its own
(chaos/power_loss_daemon.py), for the chaos suite's power cuts and their tests.

``PowerLossDisk(directory)`` lays out ``directory/backing`` (what was synced: the platters),
``directory/mnt`` (the mount point: what processes use) and ``directory/power-loss-fs.log``
(the daemon's output, kept across mounts); its control socket is an abstract one.

- ``start`` (``mount``) installs what it needs when missing (Debian's fuse3 for fusermount3 and
  libfuse3; root runs apt-get, as the Makefile does for chromium) and returns once the
  filesystem is mounted and its control socket answers; a daemon that exits first, or is not
  ready in MOUNT_DEADLINE_S, is a ``PowerLossError`` carrying its log.
- ``cut`` is the power cut: every file's unsynced writes are dropped at once and every later
  operation on the mount fails with EIO. The processes that used the mount must be killed then
  (a power cut kills them too): chaos/power_cut.py does it in that order.
- ``remount`` unmounts the dead filesystem and mounts a fresh one over the same backing
  directory: the machine after the power came back. ``stop`` (``unmount``, or leaving the
  ``with`` block) unmounts it (lazily when a process still holds a file on it) and waits for the
  daemon to exit.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Self

from chaos.disk import MountedDisk
from chaos.processes import REPO_ROOT, log_tail

FUSERMOUNT = "fusermount3"
FUSE_DEVICE = Path("/dev/fuse")
MOUNT_DEADLINE_S = 30.0
UNMOUNT_DEADLINE_S = 30.0
CONTROL_DEADLINE_S = 30.0
INSTALL_DEADLINE_S = 600.0
CONTROL_ANSWER_BYTES_MAX = 64 * 1024
APT_GET = ("apt-get", "-o", "DPkg::Lock::Timeout=300")
# Unsynced bytes the filesystem keeps in all before it writes back the file being written (as
# a kernel writes dirty pages back): more than a scenario leaves unsynced, and memory it may take.
UNSYNCED_BYTES_MAX_DEFAULT = 512 * 1024 * 1024
UNSYNCED_BYTES_MIN = 4096
# What the daemon prints once the kernel has connected and its control socket listens.
READY_LINE = "power-loss fs mounted on"


_LIBC = ctypes.CDLL(None, use_errno=True)


class PowerLossError(RuntimeError):
    """The power-loss filesystem could not be mounted, controlled or unmounted."""


def ensure_fuse() -> None:
    """fusermount3 and libfuse3 on the machine (Debian's fuse3, installed when missing), the
    kernel's /dev/fuse, and the Python binding (the dev extra's mfusepy)."""
    if shutil.which(FUSERMOUNT) is None:
        install = [*APT_GET, "install", "-y", "--no-install-recommends", "fuse3"]
        if _apt(install) != 0 and (_apt([*APT_GET, "update"]) != 0 or _apt(install) != 0):
            raise PowerLossError(
                f"{FUSERMOUNT} is missing and apt-get could not install Debian's fuse3 "
                "(it needs root)"
            )
    if not FUSE_DEVICE.exists():
        raise PowerLossError(f"{FUSE_DEVICE} is missing: the kernel's FUSE module is not loaded")
    try:
        importlib.import_module("mfusepy")
    except (ImportError, OSError) as e:
        raise PowerLossError(f"mfusepy (pyproject's dev extra) cannot be loaded: {e}") from e


def _apt(args: list[str]) -> int:
    try:
        done = subprocess.run(
            args, stdin=subprocess.DEVNULL, capture_output=True, timeout=INSTALL_DEADLINE_S,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return -1
    return done.returncode


class PowerLossDisk(MountedDisk):
    def __init__(
        self, directory: Path, unsynced_bytes_max: int = UNSYNCED_BYTES_MAX_DEFAULT
    ) -> None:
        if unsynced_bytes_max < UNSYNCED_BYTES_MIN:
            raise ValueError(
                f"unsynced_bytes_max must be at least {UNSYNCED_BYTES_MIN}, not "
                f"{unsynced_bytes_max}"
            )
        self.unsynced_bytes_max = unsynced_bytes_max
        self.dir = directory.resolve()
        self.backing_dir = self.dir / "backing"
        self.mount_dir = self.dir / "mnt"
        # An abstract socket: a scenario's directory may be longer than a socket path can be.
        self.control_name = f"chaos-power-loss-{os.getpid()}-{uuid.uuid4().hex}"
        self.log_path = self.dir / "power-loss-fs.log"
        self._proc: subprocess.Popen[str] | None = None
        self.cuts = 0

    @property
    def mounted(self) -> bool:
        return self._proc is not None

    # -- mounting -----------------------------------------------------------------------------
    def mount(self) -> Self:
        if self._proc is not None:
            raise PowerLossError(f"{self.mount_dir} is already mounted by this PowerLossDisk")
        ensure_fuse()
        self.backing_dir.mkdir(parents=True, exist_ok=True)
        self.mount_dir.mkdir(parents=True, exist_ok=True)
        if os.path.ismount(self.mount_dir):
            raise PowerLossError(f"{self.mount_dir} is a mount point already: not mounting over it")
        with self.log_path.open("a", encoding="utf-8") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "chaos.power_loss_daemon",
                 "--backing", str(self.backing_dir), "--mount", str(self.mount_dir),
                 "--control", self.control_name,
                 "--unsynced-bytes-max", str(self.unsynced_bytes_max)],
                cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                text=True, errors="replace",
            )  # fmt: skip
        self._proc = proc
        ready = threading.Event()
        threading.Thread(target=self._read, args=(proc, ready), daemon=True).start()
        if not ready.wait(MOUNT_DEADLINE_S) or proc.poll() is not None:
            code = proc.poll()
            self._abandon()
            why = f"in {MOUNT_DEADLINE_S} s" if code is None else f"(it exited {code})"
            raise PowerLossError(
                f"the power-loss fs did not mount on {self.mount_dir} {why}:\n{self.log_tail()}"
            )
        if not os.path.ismount(self.mount_dir):
            self._abandon()
            raise PowerLossError(f"{self.mount_dir} is not a mount point after the daemon's ready")
        return self

    def _read(self, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        """The daemon's stdout: its ready line, then anything else it prints, into the log."""
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if line.startswith(READY_LINE):
                    ready.set()
                with self.log_path.open("a", encoding="utf-8") as log:
                    log.write(line)
        finally:
            ready.set()
            proc.stdout.close()

    def unmount(self) -> None:
        """Unmount (lazily when busy) and wait for the daemon to exit."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None or os.path.ismount(self.mount_dir):
            done = _fusermount("-u", self.mount_dir)
            if done.returncode != 0:
                # Busy: a process still holds a file on it. Detached now, gone when it lets go.
                lazy = _fusermount("-uz", self.mount_dir)
                if lazy.returncode != 0 and os.path.ismount(self.mount_dir):
                    raise PowerLossError(
                        f"cannot unmount {self.mount_dir}: {done.stderr.strip()}; lazily: "
                        f"{lazy.stderr.strip()}"
                    )
        try:
            proc.wait(UNMOUNT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(UNMOUNT_DEADLINE_S)
        self._proc = None

    def remount(self) -> Self:
        """The dead filesystem unmounted, a fresh one mounted over what was synced."""
        self.unmount()
        return self.mount()

    def _abandon(self) -> None:
        proc = self._proc
        self._proc = None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(UNMOUNT_DEADLINE_S)
        if os.path.ismount(self.mount_dir):
            _fusermount("-uz", self.mount_dir)

    # -- the power ------------------------------------------------------------------------------
    def cut(self) -> dict[str, Any]:
        """Drop every unsynced write; the mount answers EIO from now on. What was dropped:
        ``unsynced_files``, ``unsynced_bytes`` (dirty pages), and the counts so far."""
        answer = self._control("cut")
        self.cuts += 1
        return answer

    def write_back_page_cache(self) -> None:
        """The kernel's dirty pages of the mount (shared mappings' writes it has not sent yet)
        sent to the filesystem now, as writeback would, without syncing any file: syncfs(2).
        Before a cut, so that its counts include them; they are dropped all the same."""
        fd = os.open(self.mount_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _LIBC.syncfs(fd) != 0:
                code = ctypes.get_errno()
                raise PowerLossError(f"syncfs of {self.mount_dir}: {os.strerror(code)}")
        finally:
            os.close(fd)

    def stats(self) -> dict[str, Any]:
        return self._control("stats")

    def _control(self, op: str) -> dict[str, Any]:
        if self._proc is None:
            raise PowerLossError(f"the power-loss fs on {self.mount_dir} is not mounted")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(CONTROL_DEADLINE_S)
                s.connect("\0" + self.control_name)
                s.sendall(json.dumps({"op": op}).encode() + b"\n")
                line = s.makefile("rb").readline(CONTROL_ANSWER_BYTES_MAX)
        except OSError as e:
            raise PowerLossError(f"the power-loss fs's control socket: {op}: {e}") from e
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise PowerLossError(f"the power-loss fs refused {op}: {answer['error']}")
        return answer

    def log_tail(self) -> str:
        return log_tail(self.log_path)

    # -- as the other parts of the suite ---------------------------------------------------------


def _fusermount(flags: str, mount_dir: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [FUSERMOUNT, flags, str(mount_dir)], capture_output=True, text=True,
            timeout=UNMOUNT_DEADLINE_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PowerLossError(f"{FUSERMOUNT} {flags} {mount_dir} failed: {e}") from e
