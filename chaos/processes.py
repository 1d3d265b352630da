"""rocketbox processes (``python -m rocketbox <command> …``) for the chaos suite and the tests.

The promise:

- ``start`` returns once the process has printed its ready line naming the port it bound (it is
  started with port 0: a free port of 127.0.0.1), and, for a process that serves metrics, its
  metrics line before it; a process that exits first, or is not ready in READY_DEADLINE_S, is a
  ``ProcessError`` carrying its output.
- ``restart`` starts it again with the same arguments but the ports it bound the first time, so
  a client that knows the old address reconnects to the new process. A port taken in between
  (another process, or the old one not yet gone) is retried until the ready deadline.
- ``stop`` is SIGTERM (with SIGCONT, so that a SIGSTOPped process can act on it), then SIGKILL
  after a deadline; leaving the ``with`` block stops it, whatever raised inside.
- The output (stdout and stderr as written) is kept, its last OUTPUT_LINES_MAX lines, for failure
  reports.

Nothing here waits by sleeping: every wait is on a condition, with a deadline.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from broker.store.config import MessageStoreConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
READY_DEADLINE_S = 60.0
# A sidecar's SIGTERM drains for up to its --shutdown-grace-ms (10 s by default) first.
STOP_DEADLINE_S = 60.0
KILL_DEADLINE_S = 10.0
OUTPUT_LINES_MAX = 100_000
POLL_INTERVAL_S = 0.02
# What rocketbox prints when a port it was told to bind is taken: its one line
# (rocketbox/start_checks.py), or a bind's own error (grpc's, the metrics' HTTP server's).
BIND_FAILED = re.compile(
    r"is in use \(another rocketbox|Failed to bind to address|cannot listen on"
    r"|Address already in use"
)

# Small store files, so that a broker reserves about 9 MiB of disk, not RocketMQ's 1.4 GiB.
SEGMENT_MIB = 8
HASH_SLOTS = 4096
INDEX_ENTRIES = 16384
SMALL_STORE_ARGS = (
    f"--segment-size-mib={SEGMENT_MIB}",
    f"--hash-slot-num={HASH_SLOTS}",
    f"--index-num-max={INDEX_ENTRIES}",
)
BROKER_READY_LINE = re.compile(r"broker listening on [^\s]+:(\d+)")
BROKER_METRICS_LINE = re.compile(r"^metrics on http://[^\s]+:(\d+)/metrics")
SIDECAR_READY_LINE = re.compile(r"^sidecar listening on [^\s]+:(\d+)")
SIDECAR_METRICS_LINE = re.compile(r"^sidecar metrics on [^\s]+:(\d+)")
# Resends come quickly: an outage is over in seconds, not minutes.
FAST_RESEND_ARGS = ("--backoff-initial-ms=100", "--backoff-max-ms=500", "--poll-interval-ms=50")


def small_store_config(store_dir: Path) -> MessageStoreConfig:
    """The geometry SMALL_STORE_ARGS gives a broker, to open its store once it has stopped."""
    return MessageStoreConfig(
        store_dir,
        mapped_file_size_commit_log_bytes=SEGMENT_MIB * 1024 * 1024,
        hash_slot_num=HASH_SLOTS,
        index_num_max=INDEX_ENTRIES,
    )


class ProcessError(RuntimeError):
    """A process did not start, or was asked something it cannot do (signalled once gone)."""


def wait_until(condition: Callable[[], object], deadline_s: float, what: str) -> None:
    """Poll ``condition()`` until true; TimeoutError naming ``what`` after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)


class _Run:
    """One spawn of a process: its pipe is read by a thread of its own, which records the ports
    its ready and metrics lines name."""

    def __init__(
        self,
        popen: subprocess.Popen[str],
        ready_line: re.Pattern[str],
        metrics_line: re.Pattern[str] | None,
        keep: Callable[[str], None],
    ) -> None:
        self.popen = popen
        self.port = 0
        self.metrics_port = 0
        self.bind_failed = False
        # Set on the ready line, and at the end of the output (the process is gone).
        self.ready = threading.Event()
        self._ready_line = ready_line
        self._metrics_line = metrics_line
        self._keep = keep
        self.reader = threading.Thread(target=self._read, daemon=True, name="process output")
        self.reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        try:
            for line in self.popen.stdout:
                self._keep(line)
                if self.port:
                    continue
                if BIND_FAILED.search(line):
                    self.bind_failed = True
                if self._metrics_line is not None and not self.metrics_port:
                    metrics = self._metrics_line.search(line)
                    if metrics:
                        self.metrics_port = int(metrics.group(1))
                ready = self._ready_line.search(line)
                if ready:
                    self.port = int(ready.group(1))
                    self.ready.set()
        finally:
            self.ready.set()

    def finish(self) -> None:
        """After the process has exited: the rest of its output read, its pipe closed."""
        self.reader.join(KILL_DEADLINE_S)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


class RocketboxProcess:
    """``python -m rocketbox`` with ``args``; ready on ``ready_line`` (its group 1 is the port).

    The generic process runs the same arguments at every start; subclasses override
    ``command_args`` to place the ports, which is what makes ``restart`` come back on them.
    """

    def __init__(
        self,
        name: str,
        ready_line: re.Pattern[str],
        args: Sequence[str] = (),
        *,
        metrics_line: re.Pattern[str] | None = None,
    ) -> None:
        self.name = name
        self.port = 0
        self.metrics_port = 0
        self._args = list(args)
        self._ready_line = ready_line
        self._metrics_line = metrics_line
        self._lines: deque[str] = deque(maxlen=OUTPUT_LINES_MAX)
        self._lines_lock = threading.Lock()
        self._run: _Run | None = None

    def command_args(self, port: int, metrics_port: int) -> list[str]:
        """The arguments after ``python -m rocketbox`` for a start that is to bind ``port`` and
        ``metrics_port`` (0: a free one)."""
        return list(self._args)

    # -- what it is ---------------------------------------------------------------------------
    @property
    def proc(self) -> subprocess.Popen[str]:
        """The process of the latest start."""
        return self._started().popen

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def lines(self) -> list[str]:
        """The output kept so far (its last OUTPUT_LINES_MAX lines), across restarts."""
        with self._lines_lock:
            return list(self._lines)

    def output(self) -> str:
        return "".join(self.lines)

    def running(self) -> bool:
        return self._run is not None and self._run.popen.poll() is None

    # -- what it is told ----------------------------------------------------------------------
    def start(self) -> Self:
        """Start it and return once it is ready (first start: free ports; later: the same)."""
        if self.running():
            raise ProcessError(f"{self.name} is already running")
        deadline = time.monotonic() + READY_DEADLINE_S
        while True:
            run = self._spawn(self.command_args(self.port, self.metrics_port))
            if not run.ready.wait(max(0.0, deadline - time.monotonic())):
                self.kill()
                raise ProcessError(
                    f"{self.name} printed no ready line in {READY_DEADLINE_S} s:\n{self._tail()}"
                )
            if run.port:
                break
            # Its output ended without the ready line: it is exiting.
            self.wait_exit(KILL_DEADLINE_S)
            # The old port is still someone's: the next try may find it free.
            if run.bind_failed and self.port and time.monotonic() < deadline:
                continue
            raise ProcessError(
                f"{self.name} exited {run.popen.returncode} before it was ready:\n{self._tail()}"
            )
        if self._metrics_line is not None and not run.metrics_port:
            self.kill()
            raise ProcessError(f"{self.name} was ready without its metrics line:\n{self._tail()}")
        assert not self.port or run.port == self.port, (self.port, run.port)
        self.port = run.port
        self.metrics_port = run.metrics_port
        return self

    def restart(self) -> Self:
        """The same process again, on the ports it bound first; a running one is stopped first."""
        if self.running():
            self._terminate(STOP_DEADLINE_S)
        return self.start()

    def signal(self, sig: signal.Signals) -> None:
        if not self.running():
            raise ProcessError(f"{self.name} is not running: cannot send it {sig.name}")
        self.proc.send_signal(sig)

    def wait_exit(self, deadline_s: float) -> int:
        """Its exit status (negative: the signal that ended it) once it has exited."""
        run = self._started()
        try:
            code = run.popen.wait(deadline_s)
        except subprocess.TimeoutExpired as e:
            raise TimeoutError(f"{self.name} still running after {deadline_s} s") from e
        run.finish()
        return code

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it is still running after STOP_DEADLINE_S; its exit status."""
        return self._terminate(STOP_DEADLINE_S)

    def kill(self) -> int:
        run = self._started()
        if run.popen.poll() is None:
            run.popen.kill()
        return self.wait_exit(KILL_DEADLINE_S)

    def __enter__(self) -> Self:
        return self if self.running() else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._run is not None:
            self._terminate(STOP_DEADLINE_S)

    # -- how ----------------------------------------------------------------------------------
    def _spawn(self, args: list[str]) -> _Run:
        popen = subprocess.Popen(
            [sys.executable, "-m", "rocketbox", *args],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        self._run = _Run(popen, self._ready_line, self._metrics_line, self._keep)
        return self._run

    def _keep(self, line: str) -> None:
        with self._lines_lock:
            self._lines.append(line)

    def _started(self) -> _Run:
        if self._run is None:
            raise ProcessError(f"{self.name} was never started")
        return self._run

    def _terminate(self, deadline_s: float) -> int:
        run = self._started()
        if run.popen.poll() is None:
            run.popen.send_signal(signal.SIGTERM)
            run.popen.send_signal(signal.SIGCONT)
            try:
                run.popen.wait(deadline_s)
            except subprocess.TimeoutExpired:
                run.popen.kill()
        return self.wait_exit(KILL_DEADLINE_S)

    def _tail(self, lines_max: int = 200) -> str:
        return "".join(self.lines[-lines_max:])


class BrokerProcess(RocketboxProcess):
    """``rocketbox broker`` over ``store_dir`` with small store files and metrics on a free port.

    SYNC_FLUSH by default: STORED then means on disk, which a SIGKILL must not undo.
    ``extra_args`` come last, so they override (``--topic``, ``--auto-create-topic`` …);
    ``options`` are rocketbox's own (``--log-level``), given before ``broker``.
    """

    def __init__(
        self,
        store_dir: Path,
        flush: str = "SYNC_FLUSH",
        extra_args: Sequence[str] = (),
        *,
        options: Sequence[str] = (),
    ) -> None:
        self.store_dir = store_dir
        self.flush = flush
        self.extra_args = tuple(extra_args)
        self.options = tuple(options)
        super().__init__("broker", BROKER_READY_LINE, metrics_line=BROKER_METRICS_LINE)

    def command_args(self, port: int, metrics_port: int) -> list[str]:
        return [
            *self.options, "broker", "--data-dir", str(self.store_dir),
            "--listen", f"127.0.0.1:{port}", "--flush", self.flush,
            "--metrics-listen", f"127.0.0.1:{metrics_port}",
            *SMALL_STORE_ARGS, *self.extra_args,
        ]  # fmt: skip


class SidecarProcess(RocketboxProcess):
    """``rocketbox sidecar`` sending to ``broker_addresses`` (HOST:PORT each) over the outbox at
    ``outbox_url``, with fast resends and metrics on a free port.

    ``ack_ledger`` records what each app was told; ``sidecar_id`` is passed as ``--sidecar-id``
    only when given. ``extra_args`` come last, so they override; ``options`` are rocketbox's
    own, given before ``sidecar``.
    """

    def __init__(
        self,
        broker_addresses: Sequence[str],
        outbox_url: str,
        ack_ledger: Path | None = None,
        sidecar_id: str | None = None,
        extra_args: Sequence[str] = (),
        *,
        options: Sequence[str] = (),
    ) -> None:
        # A lone "host:port" is a Sequence[str] too, of characters.
        if isinstance(broker_addresses, str) or not broker_addresses:
            raise ValueError(
                f"broker_addresses must be a non-empty sequence of HOST:PORT, "
                f"not {broker_addresses!r}"
            )
        self.broker_addresses = tuple(broker_addresses)
        self.outbox_url = outbox_url
        self.ack_ledger = ack_ledger
        self.sidecar_id = sidecar_id
        self.extra_args = tuple(extra_args)
        self.options = tuple(options)
        super().__init__("sidecar", SIDECAR_READY_LINE, metrics_line=SIDECAR_METRICS_LINE)

    def command_args(self, port: int, metrics_port: int) -> list[str]:
        brokers = [arg for address in self.broker_addresses for arg in ("--broker", address)]
        ledger = ["--ack-ledger", str(self.ack_ledger)] if self.ack_ledger is not None else []
        sidecar_id = ["--sidecar-id", self.sidecar_id] if self.sidecar_id is not None else []
        return [
            *self.options, "sidecar", *brokers, "--outbox", self.outbox_url,
            "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{metrics_port}",
            *FAST_RESEND_ARGS, *ledger, *sidecar_id, *self.extra_args,
        ]  # fmt: skip


# What an error about a server's or a daemon's start shows of its log: its end.
LOG_TAIL_BYTES_MAX = 8 * 1024


def log_tail(log_path: Path) -> str:
    """The last ``LOG_TAIL_BYTES_MAX`` bytes of a log, as text."""
    if not log_path.exists():
        return "(no log)"
    with log_path.open("rb") as log:
        size = log.seek(0, 2)
        log.seek(max(0, size - LOG_TAIL_BYTES_MAX))
        return log.read().decode(errors="replace")
