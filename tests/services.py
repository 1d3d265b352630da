"""Redis and MariaDB servers of the test session's own, for tests that need them.

The first test of a session (of each xdist worker) that asks for ``redis_url()`` or
``mysql_url()`` starts a redis-server or a mariadbd of the session's own, on a free port of
127.0.0.1 with its data in a temporary directory (``chaos.services``' servers); the session stops
them at its end (tests/conftest.py). No server of the machine's is used or started, so neither
a user's ``make run`` nor another test run on the machine shares their tables or keys. Tests
isolate themselves from one another by name (a Redis key prefix, a MySQL table). A program that
is not installed fails the test, saying which package to install: never a silent skip.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import redis

from chaos.services import (
    MARIADB_INSTALL_DB,
    MARIADBD,
    MYSQL_DATABASE,
    REDIS_SERVER,
    PrivateMariaDB,
    PrivateRedis,
    ServiceError,
    executable,
    free_port,  # tests use it too: for a port of their own, or one that refuses connections
)

__all__ = [
    "MYSQL_DATABASE", "MYSQL_HOST", "free_port", "mysql_port", "mysql_url", "redis_url",
    "start_private_redis", "stop_servers", "unique_name",
]  # fmt: skip

MYSQL_HOST = "127.0.0.1"
START_DEADLINE_S = 30.0


def _program(name: str) -> str:
    try:
        return executable(name)
    except ServiceError as e:
        pytest.fail(str(e), pytrace=False)


class _SessionServers:
    """The servers of this process's session, each started when first asked for."""

    def __init__(self) -> None:
        self.redis: PrivateRedis | None = None
        self.mariadb: PrivateMariaDB | None = None
        self.directory: Path | None = None

    def private_redis(self) -> PrivateRedis:
        if self.redis is None:
            _program(REDIS_SERVER)  # a missing program: the install command alone
            redis_server = PrivateRedis(self._dir("redis"), durable=False)
            self._start(redis_server)
            self.redis = redis_server
        return self.redis

    def private_mariadb(self) -> PrivateMariaDB:
        if self.mariadb is None:
            _program(MARIADBD)
            _program(MARIADB_INSTALL_DB)
            mariadbd = PrivateMariaDB(self._dir("mariadb"))
            self._start(mariadbd)
            self.mariadb = mariadbd
        return self.mariadb

    def stop(self) -> None:
        for server in (self.redis, self.mariadb):
            if server is not None and server.running():
                server.stop()
        self.redis = self.mariadb = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def _dir(self, name: str) -> Path:
        # Short, in the system's temporary directory: MariaDB's socket path is limited.
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="rocketbox-services-"))
            atexit.register(self.stop)  # also when the session's own teardown never runs
        return self.directory / name

    @staticmethod
    def _start(server: PrivateRedis | PrivateMariaDB) -> None:
        try:
            server.start()
        except ServiceError as e:
            pytest.fail(f"the test session's own {server.name} did not start: {e}", pytrace=False)


_SERVERS = _SessionServers()


def redis_url(db: int = 0) -> str:
    """The URL of database ``db`` on the session's own Redis (started when first asked)."""
    return f"redis://127.0.0.1:{_SERVERS.private_redis().port}/{db}"


def mysql_url() -> str:
    """The SQLAlchemy URL of database ``test`` on the session's own MariaDB (started when first
    asked), as root without a password."""
    return f"mysql+pymysql://root@{MYSQL_HOST}:{mysql_port()}/{MYSQL_DATABASE}"


def mysql_port() -> int:
    """The port of the session's own MariaDB (started when first asked)."""
    return _SERVERS.private_mariadb().port


def stop_servers() -> None:
    """Stop the servers this session started and remove their data (at the session's end)."""
    _SERVERS.stop()


def unique_name(prefix: str) -> str:
    """A name no other test (or earlier run) uses: a Redis key prefix or a MySQL table."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def start_private_redis(
    port: int, directory: Path, *args: str, password: str | None = None
) -> subprocess.Popen[bytes]:
    """A redis-server of the test's own on ``port`` (nothing kept on disk but in
    ``directory``; ``password``: it requires one), returned once it answers PING; the caller
    stops it."""
    if password is not None:
        args = (*args, "--requirepass", password)
    proc = subprocess.Popen(
        [_program(REDIS_SERVER), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, socket_timeout=1.0, password=password)
    deadline = time.monotonic() + START_DEADLINE_S
    try:
        while True:
            try:
                client.ping()
                return proc
            except redis.ConnectionError:
                if proc.poll() is not None:
                    pytest.fail(f"the private redis-server on port {port} exited")
                if time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"the private redis-server on port {port} did not answer")
                time.sleep(0.05)
    finally:
        client.close()
