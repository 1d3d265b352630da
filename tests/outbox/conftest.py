"""Fixtures for the outbox tests: every backend, on its real service, fresh for each test.

``backend`` is one of BACKENDS (a test restricts it with ``parametrize(..., indirect=True)``),
``features`` what it declares (``OutboxFeatures``);
``outbox_url`` names an outbox no other test uses — a RocksDB directory under tmp_path, a Redis
key prefix, a MySQL table — and removes it after the test; ``open_ob(limits)`` opens it (again,
for reopen tests) and closes everything it opened at teardown; ``outbox`` is one opened with the
default limits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from outbox import Outbox, OutboxFeatures, OutboxLimits, open_outbox
from outbox.factory import backend_class
from tests.services import mysql_url, redis_url, unique_name

# Each backend by its URL scheme (outbox/factory.py).
BACKEND_SCHEMES = {
    "memory": "memory",
    "rocksdb": "rocksdb",
    "redis": "redis",
    "mysql": "mysql+pymysql",
}
BACKENDS = list(BACKEND_SCHEMES)


def backend_features(backend: str) -> OutboxFeatures:
    """What ``backend`` declares it offers beyond the contract."""
    return backend_class(BACKEND_SCHEMES[backend]).features


# The backends several sidecars may share, as they declare.
SHARED_BACKENDS = [b for b in BACKENDS if backend_features(b).shared_by_sidecars]
# The RocksDB outboxes' disk reserve (outbox/disk_reserve.py): the tests make many of them.
TEST_RESERVE_BYTES = 1024 * 1024

OpenOutbox = Callable[..., Outbox]


@contextlib.contextmanager
def backend_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh outbox URL of ``backend``, whose data is removed afterwards."""
    if backend == "memory":
        yield "memory://"
    elif backend == "rocksdb":
        yield f"rocksdb://{tmp_path / 'outbox'}?reserve_bytes={TEST_RESERVE_BYTES}"
    elif backend == "redis":
        prefix = unique_name("rocketbox_test")
        try:
            yield f"{redis_url()}?prefix={prefix}"
        finally:
            client = redis.Redis.from_url(redis_url())
            try:
                keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
                if keys:
                    client.delete(*keys)
            finally:
                client.close()
    elif backend == "mysql":
        table = unique_name("outbox")
        try:
            yield f"{mysql_url()}?table={table}"
        finally:
            engine = sa.create_engine(mysql_url())
            try:
                with engine.begin() as conn:
                    # The backend keeps its counters and stats row beside its table
                    # (outbox/backends/mysql/schema.py).
                    tables = f"`{table}`, `{table}_counters`, `{table}_stats`"
                    conn.execute(sa.text(f"DROP TABLE IF EXISTS {tables}"))
            finally:
                engine.dispose()
    else:
        raise AssertionError(f"no such backend {backend!r}")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def features(backend: str) -> OutboxFeatures:
    return backend_features(backend)


@pytest.fixture
def outbox_url(backend: str, tmp_path: Path) -> Iterator[str]:
    with backend_url(backend, tmp_path) as url:
        yield url


@pytest.fixture
def open_ob(outbox_url: str) -> Iterator[OpenOutbox]:
    opened: list[Outbox] = []

    def open_(limits: OutboxLimits | None = None) -> Outbox:
        ob = open_outbox(outbox_url, limits)
        opened.append(ob)
        return ob

    yield open_
    for ob in reversed(opened):
        ob.close()  # close is idempotent: a test may have closed it already


@pytest.fixture
def outbox(open_ob: OpenOutbox) -> Outbox:
    return open_ob()
