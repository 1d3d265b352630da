"""Private outbox services: servers of a suite's own, to kill and restart.

A chaos scenario that kills its outbox's service starts its own, and so does each test session
(tests/services.py) for the tests that need one:

- ``PrivateRedis(data_dir)``: a redis-server with AOF and ``appendfsync always`` (a write it has
  acknowledged survives SIGKILL), its files in ``data_dir``.
- ``PrivateMariaDB(data_dir)``: a mariadbd with a data directory of its own, created by
  mariadb-install-db at the first start, and a database ``test``; InnoDB's defaults (the redo log
  flushed at each commit) keep a committed row across SIGKILL.

Each listens on 127.0.0.1 at a port picked free at its first start (servers that cannot report a
port 0 they bound: a port taken in the meantime is retried with another), and on that same port
after ``kill`` and ``start``, so clients holding its URL reconnect. ``start`` returns once the
server answers (PING, a connection); ``stop`` is SIGTERM, then SIGKILL after a deadline; the
``with`` block stops it. Each server's output is kept in a log file in its directory, whose tail
the errors carry. A server whose program is not installed is a ``ServiceError`` giving the
install command.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import redis
import sqlalchemy
import sqlalchemy.exc

from chaos.processes import log_tail

REDIS_SERVER = "redis-server"
MARIADBD = "mariadbd"
MARIADB_INSTALL_DB = "mariadb-install-db"
MYSQL_DATABASE = "test"
INSTALL_COMMAND = "sudo apt-get install redis-server mariadb-server"
# Debian installs mariadbd in /usr/sbin, which is not on every user's PATH.
SBIN = "/usr/sbin"
START_DEADLINE_S = 60.0
INSTALL_DEADLINE_S = 60.0
STOP_DEADLINE_S = 30.0
KILL_DEADLINE_S = 10.0
PING_DEADLINE_S = 1.0
POLL_INTERVAL_S = 0.05
PORT_RETRY_INTERVAL_S = 0.2
# AF_UNIX paths: 108 bytes with the terminating NUL.
SOCKET_PATH_BYTES_MAX = 107
# redis-server's and mariadbd's words for a port someone else holds.
PORT_TAKEN = re.compile(r"Address already in use|Bind on TCP/IP port")
# Small InnoDB files: a data directory of about 30 MiB that is created and started in seconds.
# The redo log written and flushed at every commit (InnoDB's default, stated): a committed row
# survives SIGKILL and a power cut.
INNODB_ARGS = (
    "--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M",
    "--innodb-flush-log-at-trx-commit=1",
)  # fmt: skip


class ServiceError(RuntimeError):
    """A private server did not start, or its data directory could not be created."""


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on when asked (someone may take it before use)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def executable(name: str) -> str:
    """The path of program ``name``, on PATH or in /usr/sbin."""
    found = shutil.which(name) or shutil.which(name, path=SBIN)
    if found is None:
        raise ServiceError(f"{name} is not installed; install it with `{INSTALL_COMMAND}`.")
    return found


class _PrivateServer:
    """What both servers share: the start on a port kept across restarts, the stop and kill."""

    name = "server"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.log_path = data_dir / f"{self.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    # -- per server ---------------------------------------------------------------------------
    def _command(self, port: int) -> list[str]:
        raise NotImplementedError

    def _answers(self, port: int) -> bool:
        """Whether the server on ``port`` answers (it is not loading, nor shutting down)."""
        raise NotImplementedError

    def _prepare(self) -> None:
        """Before a start: what the data directory needs."""

    def _ready(self) -> None:
        """After a start, once it answers."""

    # -- shared -------------------------------------------------------------------------------
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start it (again: on the same port and data) and return once it answers."""
        if self.running():
            raise ServiceError(f"the private {self.name} is already running on port {self.port}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare()
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            port = self.port or free_port()
            log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with self.log_path.open("ab") as log:
                proc = subprocess.Popen(
                    self._command(port), stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
            self._proc = proc
            while proc.poll() is None and not self._answers(port):
                if time.monotonic() > deadline:
                    self.kill()
                    raise ServiceError(
                        f"the private {self.name} did not answer on port {port} in "
                        f"{START_DEADLINE_S} s:\n{self.log_tail()}"
                    )
                time.sleep(POLL_INTERVAL_S)
            if proc.poll() is None:
                self.port = port
                self._ready()
                return self
            taken = PORT_TAKEN.search(self._log_since(log_offset))
            # A port taken between free_port() and the bind: another one. The port of a
            # restart is the one clients know: the same one again, until the deadline.
            if taken and time.monotonic() < deadline:
                if self.port:
                    time.sleep(PORT_RETRY_INTERVAL_S)
                continue
            raise ServiceError(
                f"the private {self.name} exited {proc.returncode} on port {port}:\n"
                f"{self.log_tail()}"
            )

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` (SIGSTOP, SIGCONT …) to the running server."""
        proc = self._started()
        if proc.poll() is not None:
            raise ServiceError(f"the private {self.name} is not running: cannot send {sig.name}")
        proc.send_signal(sig)

    def kill(self) -> int:
        """SIGKILL; its exit status."""
        proc = self._started()
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        return proc.wait(KILL_DEADLINE_S)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it still runs after STOP_DEADLINE_S; its exit status."""
        proc = self._started()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def log_tail(self) -> str:
        return log_tail(self.log_path)

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

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise ServiceError(f"the private {self.name} was never started")
        return self._proc

    def _log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")


class PrivateRedis(_PrivateServer):
    """A redis-server of the suite's own: AOF with ``appendfsync always``, no RDB snapshots
    (``durable=False``: nothing kept on disk, for tests that never kill it). Its files go to
    ``store_dir`` when given (a disk of their own), its log stays in ``data_dir``."""

    name = "redis-server"

    def __init__(
        self, data_dir: Path, store_dir: Path | None = None, *, durable: bool = True
    ) -> None:
        super().__init__(data_dir)
        self.store_dir = store_dir or data_dir
        self.durable = durable

    def _prepare(self) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)

    def url(self, prefix: str) -> str:
        """The outbox URL of a Redis outbox with key prefix ``prefix`` on this server."""
        return f"redis://127.0.0.1:{self.port}/0?prefix={prefix}"

    def _command(self, port: int) -> list[str]:
        aof = ("yes", "--appendfsync", "always") if self.durable else ("no",)
        return [
            executable(REDIS_SERVER), "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(self.store_dir), "--appendonly", *aof, "--save", "",
            "--daemonize", "no", "--logfile", "",
        ]  # fmt: skip

    def _answers(self, port: int) -> bool:
        client = redis.Redis(
            port=port, socket_timeout=PING_DEADLINE_S, socket_connect_timeout=PING_DEADLINE_S
        )
        try:
            return bool(client.ping())
        # Refused before it listens; LOADING while it replays its AOF.
        except redis.RedisError:
            return False
        finally:
            client.close()


class PrivateMariaDB(_PrivateServer):
    """A mariadbd of the suite's own (root, no password, database ``test``), run as root. Its
    data directory is ``datadir`` when given (a disk of its own), else ``data_dir/data``; its
    socket, pid file and logs stay in ``data_dir``."""

    name = "mariadbd"

    def __init__(self, data_dir: Path, datadir: Path | None = None) -> None:
        super().__init__(data_dir)
        self.datadir = datadir or data_dir / "data"
        self.socket_path = data_dir / "mysqld.sock"
        if len(str(self.socket_path).encode()) > SOCKET_PATH_BYTES_MAX:
            raise ValueError(
                f"data_dir {str(data_dir)!r} is too long for the server's socket in it "
                f"({SOCKET_PATH_BYTES_MAX} bytes at most for {self.socket_path.name!r} in it)"
            )

    def url(self, table: str) -> str:
        """The outbox URL of a MySQL outbox in table ``table`` on this server."""
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{MYSQL_DATABASE}?table={table}"

    def _prepare(self) -> None:
        if (self.datadir / "mysql").is_dir():
            return
        install_log = self.data_dir / "mariadb-install-db.log"
        with install_log.open("wb") as log:
            try:
                done = subprocess.run(
                    [
                        executable(MARIADB_INSTALL_DB), "--no-defaults",
                        f"--datadir={self.datadir}", "--user=root",
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db", "--skip-name-resolve", *INNODB_ARGS,
                    ],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    timeout=INSTALL_DEADLINE_S, check=False,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as e:
                raise ServiceError(f"{MARIADB_INSTALL_DB} failed: {e}") from e
        if done.returncode != 0:
            raise ServiceError(
                f"{MARIADB_INSTALL_DB} exited {done.returncode}:\n{install_log.read_text()}"
            )

    def _command(self, port: int) -> list[str]:
        # --no-defaults: nothing of the machine's own server (its my.cnf, port, socket) applies.
        return [
            executable(MARIADBD), "--no-defaults", f"--datadir={self.datadir}", "--user=root",
            f"--port={port}", "--bind-address=127.0.0.1", f"--socket={self.socket_path}",
            f"--pid-file={self.data_dir / 'mysqld.pid'}", "--skip-name-resolve",
            "--performance-schema=OFF", *INNODB_ARGS,
        ]  # fmt: skip

    def _engine(self, port: int) -> sqlalchemy.Engine:
        # The outbox's own driver, through SQLAlchemy; no pool: one connection, closed after use.
        return sqlalchemy.create_engine(
            f"mysql+pymysql://root@127.0.0.1:{port}/",
            connect_args={"connect_timeout": PING_DEADLINE_S},
            poolclass=sqlalchemy.NullPool,
        )

    def _answers(self, port: int) -> bool:
        engine = self._engine(port)
        try:
            with engine.connect() as connection:
                connection.execute(sqlalchemy.text("SELECT 1"))
        # Refused before it listens; errors while it recovers.
        except sqlalchemy.exc.DBAPIError:
            return False
        finally:
            engine.dispose()
        return True

    def _ready(self) -> None:
        engine = self._engine(self.port)
        try:
            with engine.begin() as connection:
                connection.execute(
                    sqlalchemy.text(f"CREATE DATABASE IF NOT EXISTS {MYSQL_DATABASE}")
                )
        finally:
            engine.dispose()
