"""The stand-in RocketMQ 5 proxy as the tests use it: a real process of its own.

    from tests.rocketmq_proxy import rocketmq_proxy

    with rocketmq_proxy(tmp_path, topics=["Orders", "Fifo:FIFO", "Later:DELAY"]) as proxy:
        proxy.endpoint                 # "127.0.0.1:PORT": give it to --broker, or to a client
        proxy.stored("Orders")         # [StoredMessage]: what it holds, in store order, with
                                       # broker_name, queue_id, queue_offset it chose, message_id,
                                       # body, tag, keys, properties, message_group ...
        proxy.kill()                   # SIGKILL; nothing answered is lost (fsynced)
        proxy.pause(); proxy.resume()  # SIGSTOP / SIGCONT: a proxy that hangs, then answers
        proxy.start()                  # again, on the same port, over the same data
        proxy.set_flow_control(True)   # every send answered TOO_MANY_REQUESTS from now on
        proxy.acked("group")           # (topic, broker, queue id, queue offset) it acked
        proxy.stop()                   # SIGTERM (also done when the block ends)

``rocketmq_proxy(data_dir, topics, *, groups=(), auto_create_group=True, flow_control=False,
invisible_duration_min_ms=..., long_polling_min_ms=..., long_polling_max_ms=...)``:

- ``topics``: ``Topic`` objects or ``"NAME[:TYPE[:QUEUES]]"`` strings, TYPE one of NORMAL
  (default), FIFO, DELAY, TRANSACTION, MIXED, UNSPECIFIED (RocketMQ's TopicMessageType), QUEUES
  per broker (default 4). Two brokers, broker-a and broker-b. A topic not listed does not exist
  (TOPIC_NOT_FOUND): a proxy does not create topics.
- ``groups``: consumer groups that exist; with ``auto_create_group=False`` any other group's
  receive is answered CONSUMER_GROUP_NOT_FOUND (default: created on first use, the broker's
  autoCreateSubscriptionGroup).
- The receive limits default to the proxy's (invisible duration ≥ 10 s, long polling 5-20 s).

The block's data lives in ``data_dir`` (messages.jsonl, acks.jsonl, groups.jsonl) and the
process's output in ``data_dir/proxy.log``. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from chaos.processes import REPO_ROOT, log_tail
from tests.rocketmq_proxy.config import (
    FLOW_CONTROL_FILE,
    INVISIBLE_DURATION_MIN_MS,
    LONG_POLLING_MAX_MS,
    LONG_POLLING_MIN_MS,
    ProxyConfig,
    Topic,
)
from tests.rocketmq_proxy.store import StoredMessage, read_acked, read_stored

READY_DEADLINE_S = 30.0
STOP_DEADLINE_S = 10.0
POLL_INTERVAL_S = 0.02
BIND_FAILED_EXIT_CODE = 2


class ProxyStartError(RuntimeError):
    """The stand-in did not start (its log's tail says why)."""


class RocketMQProxy:
    """One stand-in proxy over ``data_dir``; ``start`` binds a free port first, then that one."""

    def __init__(self, data_dir: Path, config: ProxyConfig) -> None:
        self.data_dir = data_dir
        self.config = config
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._port_file = data_dir / "port"
        self.log_path = data_dir / "proxy.log"

    @property
    def endpoint(self) -> str:
        if not self.port:
            raise ProxyStartError("the stand-in proxy was never started")
        return f"127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start it and return once it listens (the first start on a free port, later ones on
        the same port: a port still held by the killed process is tried until the deadline)."""
        if self.running():
            raise ProxyStartError("the stand-in proxy is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + READY_DEADLINE_S
        while True:
            self._port_file.unlink(missing_ok=True)
            proc = self._spawn()
            while not self._port_file.exists() and proc.poll() is None:
                if time.monotonic() > deadline:
                    self.kill()
                    raise ProxyStartError(
                        f"not listening after {READY_DEADLINE_S} s:\n{self.log_tail()}"
                    )
                time.sleep(POLL_INTERVAL_S)
            if self._port_file.exists():
                break
            if (
                proc.returncode == BIND_FAILED_EXIT_CODE
                and self.port
                and time.monotonic() < deadline
            ):
                continue  # the old process's port is not free yet
            raise ProxyStartError(f"exited {proc.returncode} before listening:\n{self.log_tail()}")
        port = int(self._port_file.read_text())
        assert not self.port or port == self.port, (self.port, port)
        self.port = port
        return self

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.rocketmq_proxy",
                    "--data-dir",
                    str(self.data_dir),
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    "--port-file",
                    str(self._port_file),
                    *self.config.args(),
                ],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self._proc

    def kill(self) -> int:
        """SIGKILL; its exit status (negative: the signal)."""
        proc = self._started()
        if proc.poll() is None:
            proc.kill()
        return proc.wait(STOP_DEADLINE_S)

    def pause(self) -> None:
        """SIGSTOP: it takes connections (the kernel does) and answers nothing until resumed."""
        self._started().send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._started().send_signal(signal.SIGCONT)

    def stop(self) -> int:
        """SIGTERM, and SIGKILL if it has not stopped within STOP_DEADLINE_S."""
        proc = self._started()
        if proc.poll() is None:
            proc.terminate()
            proc.send_signal(signal.SIGCONT)  # a paused process acts on SIGTERM only once resumed
            try:
                return proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait(STOP_DEADLINE_S)

    def restart(self) -> Self:
        """Stopped (SIGTERM) and started again on the same port."""
        if self.running():
            self.stop()
        return self.start()

    def set_flow_control(self, on: bool) -> None:
        """Every send refused TOO_MANY_REQUESTS ("system busy") while on, across restarts."""
        switch = self.data_dir / FLOW_CONTROL_FILE
        if on:
            switch.touch()
        else:
            switch.unlink(missing_ok=True)

    def stored(self, topic: str | None = None) -> list[StoredMessage]:
        """The messages it holds (of ``topic``), in the order it stored them."""
        return read_stored(self.data_dir, topic)

    def acked(self, group: str) -> list[tuple[str, str, int, int]]:
        """(topic, broker, queue id, queue offset) of what ``group`` acknowledged."""
        return read_acked(self.data_dir, group)

    def log_tail(self) -> str:
        return log_tail(self.log_path)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise ProxyStartError("the stand-in proxy was never started")
        return self._proc

    def __enter__(self) -> Self:
        return self if self.running() else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self.stop()


@contextmanager
def rocketmq_proxy(
    data_dir: Path,
    topics: Sequence[Topic | str],
    *,
    groups: Sequence[str] = (),
    auto_create_group: bool = True,
    flow_control: bool = False,
    invisible_duration_min_ms: int = INVISIBLE_DURATION_MIN_MS,
    long_polling_min_ms: int = LONG_POLLING_MIN_MS,
    long_polling_max_ms: int = LONG_POLLING_MAX_MS,
) -> Iterator[RocketMQProxy]:
    """A running stand-in proxy over ``data_dir``, stopped when the block ends."""
    config = ProxyConfig(
        topics=tuple(t if isinstance(t, Topic) else Topic.parse(t) for t in topics),
        groups=tuple(groups),
        auto_create_group=auto_create_group,
        flow_control=flow_control,
        invisible_duration_min_ms=invisible_duration_min_ms,
        long_polling_min_ms=long_polling_min_ms,
        long_polling_max_ms=long_polling_max_ms,
    )
    with RocketMQProxy(data_dir, config) as proxy:
        yield proxy
