"""A real ``rocketbox broker`` process for integration tests.

It listens on a free port of 127.0.0.1 (port 0; the broker prints the one it bound), is stopped
with SIGTERM (and must exit 0) or killed with SIGKILL, and its output is kept for failure reports.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.store.config import MessageStoreConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_DEADLINE_S = 60.0
STOP_DEADLINE_S = 60.0
# Small files, so that a test's broker reserves about 9 MiB of disk, not RocketMQ's 1.4 GiB.
SEGMENT_MIB = 8
HASH_SLOTS = 4096
INDEX_ENTRIES = 16384
SMALL_STORE_ARGS = (
    f"--segment-size-mib={SEGMENT_MIB}",
    f"--max-hash-slot-num={HASH_SLOTS}",
    f"--max-index-num={INDEX_ENTRIES}",
)


def small_store_config(data_dir: Path) -> MessageStoreConfig:
    """The geometry SMALL_STORE_ARGS gives a broker, to open its store once it has stopped."""
    return MessageStoreConfig(
        data_dir,
        mapped_file_size_commit_log_bytes=SEGMENT_MIB * 1024 * 1024,
        max_hash_slot_num=HASH_SLOTS,
        max_index_num=INDEX_ENTRIES,
    )


READY_LINE = re.compile(r"broker listening on [^\s]+:(\d+)")


class BrokerProcess:
    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.args = args
        self.lines: list[str] = []
        self.port = 0
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rocketbox",
                "broker",
                "--data-dir",
                str(data_dir),
                "--listen-port",
                "0",
                *SMALL_STORE_ARGS,
                *args,
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(READY_DEADLINE_S) or not self.port:
            self.kill()
            pytest.fail(f"broker did not become ready:\n{self.output()}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            ready = READY_LINE.match(line)
            if ready:
                self.port = int(ready.group(1))
                self._ready.set()
        self._ready.set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        """SIGTERM, and the broker must stop cleanly."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self._wait()
        assert code == 0, f"broker exited {code}:\n{self.output()}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self._wait()

    def _wait(self) -> int:
        try:
            code = self.proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(STOP_DEADLINE_S)
        self._reader.join(STOP_DEADLINE_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def wait_until(condition: object, deadline_s: float, what: str) -> None:
    """Poll ``condition()`` until true; fail naming ``what`` after ``deadline_s``."""
    assert callable(condition)
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.02)
