"""The machine's real Redis and MariaDB, for tests that need them.

Each is started with the command CONTRIBUTING.md §6 gives when it is not answering, and a test that
still cannot reach it fails with a message saying so: never a silent skip. Tests isolate
themselves by name (a Redis key prefix, a MySQL table), not by a private server.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
MYSQL_HOST = "127.0.0.1"
MYSQL_PORT = 3306
MYSQL_DATABASE = "test"
START_DEADLINE_S = 30.0

REDIS_START = [
    "redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379",
    "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
    "--logfile", "/var/log/redis/ci.log",
]  # fmt: skip
MYSQL_START = [
    "start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd",
]  # fmt: skip


def _answering(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _ensure(name: str, host: str, port: int, start: list[str]) -> None:
    if _answering(host, port):
        return
    try:
        subprocess.run(start, check=False, capture_output=True, timeout=START_DEADLINE_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"{name} is not answering on {host}:{port} and could not be started: {e}")
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if _answering(host, port):
            return
        time.sleep(0.2)
    pytest.fail(
        f"{name} is not answering on {host}:{port}, even after `{' '.join(start)}`; "
        "this test needs the real service (CONTRIBUTING.md §6)"
    )


def redis_url(db: int = 0) -> str:
    """A running Redis's URL (started when needed)."""
    _ensure("Redis", REDIS_HOST, REDIS_PORT, REDIS_START)
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"


def mysql_url() -> str:
    """A running MariaDB's SQLAlchemy URL for database ``test`` (started when needed)."""
    _ensure("MariaDB", MYSQL_HOST, MYSQL_PORT, MYSQL_START)
    return f"mysql+pymysql://root@{MYSQL_HOST}:{MYSQL_PORT}/{MYSQL_DATABASE}"


def unique_name(prefix: str) -> str:
    """A name no other test (or earlier run) uses: a Redis key prefix or a MySQL table."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on (free when asked; a test may bind it, or use it
    as a port that refuses connections)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_private_redis(
    port: int, directory: Path, *args: str, password: str | None = None
) -> subprocess.Popen[bytes]:
    """A redis-server of the test's own on ``port`` (nothing kept on disk but in
    ``directory``; ``password``: it requires one), returned once it answers PING; the caller
    stops it."""
    if password is not None:
        args = (*args, "--requirepass", password)
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
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
