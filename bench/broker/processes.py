"""The broker bench's child processes: brokers (the checkout's store or the compiled one the image
ships) and the bench's own peer servers, each ready when it prints where it listens.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

from bench.broker.figures import QUEUES, REPO_ROOT, TOPIC
from bench.process_control import READY_DEADLINE_S, BenchError, Child, wait_idle

BROKER_READY = re.compile(r"^broker listening on 127\.0\.0\.1:(\d+)\b")


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


def start_broker(data_dir: Path, flush: str, segment_mib: int, *extra: str) -> Child:
    """A fresh broker on ``data_dir``, its log beside it."""
    argv = [
        sys.executable, "-m", "rocketbox", "broker",
        "--data-dir", str(data_dir), "--listen", "127.0.0.1:0",
        "--flush", flush, "--segment-size-mib", str(segment_mib),
        "--topic", f"{TOPIC}:{QUEUES}:NORMAL", *extra,
    ]  # fmt: skip
    log = data_dir.parent / f"{data_dir.name}.log"
    if compiled_site is None:
        return Child(f"broker ({flush})", argv, BROKER_READY, log, cwd=REPO_ROOT)
    # Outside the checkout, so that `-m rocketbox` does not find the checkout's modules first.
    env = {**os.environ, "PYTHONPATH": str(compiled_site)}
    name = f"broker ({flush}, compiled store)"
    child = Child(name, argv, BROKER_READY, log, env=env, cwd=compiled_site.parent)
    if "(store compiled)" not in log.read_text(errors="replace"):
        child.stop()
        raise BenchError(f"{child.name} did not run the compiled store:\n{child.output()}")
    return child


def wait_quiet(child: Child) -> None:
    """Until ``child`` is idle after a load (process_control.wait_idle)."""
    if not wait_idle(child.cpu_seconds, READY_DEADLINE_S):
        raise BenchError(f"{child.name} still busy {READY_DEADLINE_S:.0f} s after the warm-up")


def start_helper(flag: str, name: str, log_dir: Path) -> Child:
    """The bench in a child process, serving ``flag``'s server; its log in ``log_dir``."""
    argv = [sys.executable, "-m", "bench.broker", flag]
    ready = re.compile(rf"^{re.escape(name)} listening on 127\.0\.0\.1:(\d+)\b")
    log = log_dir / f"{flag.strip('-')}-{uuid.uuid4().hex[:8]}.log"
    return Child(name, argv, ready, log, cwd=REPO_ROOT)
