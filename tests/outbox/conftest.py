"""Fixtures for the outbox tests: every backend, on its real service, fresh for each test.

``backend`` is one of BACKENDS (a test restricts it with ``parametrize(..., indirect=True)``);
``redis-cluster`` and ``redis-sentinel`` are the Redis backend on a throwaway Redis Cluster (three
masters) and a master with a replica under three Sentinels (tests/redis_servers.py), started once
per session when a test first needs them;
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
from outbox.backends.redis.urls import Topology, key_base
from outbox.factory import backend_class
from tests.redis_servers import RedisClusterServers, RedisSentinelServers, delete_keys
from tests.services import mysql_url, redis_url, unique_name

# Each backend by its URL scheme (outbox/factory.py).
BACKEND_SCHEMES = {
    "memory": "memory",
    "rocksdb": "rocksdb",
    "redis": "redis",
    "redis-cluster": "redis+cluster",
    "redis-sentinel": "redis+sentinel",
    "mysql": "mysql+pymysql",
}
# The backends whose URL names a deployment of the session's (the fixture that starts it).
DEPLOYMENT_FIXTURES = {"redis-cluster": "redis_cluster", "redis-sentinel": "redis_sentinel"}
BACKENDS = list(BACKEND_SCHEMES)


def backend_features(backend: str) -> OutboxFeatures:
    """What ``backend`` declares it offers beyond the contract."""
    return backend_class(BACKEND_SCHEMES[backend]).features


# The backends several sidecars may share, as they declare.
SHARED_BACKENDS = [b for b in BACKENDS if backend_features(b).shared_by_sidecars]
# The RocksDB outboxes' disk reserve (outbox/disk_reserve.py): the tests make many of them. It
# must hold what a reopen writes: small write buffers keep that within it.
TEST_RESERVE_BYTES = 1024 * 1024
TEST_WRITE_BUFFER_BYTES = 256 * 1024

OpenOutbox = Callable[..., Outbox]


@contextlib.contextmanager
def backend_url(
    backend: str,
    tmp_path: Path,
    deployment: RedisClusterServers | RedisSentinelServers | None = None,
) -> Iterator[str]:
    """A fresh outbox URL of ``backend``, whose data is removed afterwards (``deployment``: the
    servers of a backend of DEPLOYMENT_FIXTURES)."""
    if backend == "memory":
        yield "memory://"
    elif backend == "rocksdb":
        query = f"reserve_bytes={TEST_RESERVE_BYTES}&write_buffer_bytes={TEST_WRITE_BUFFER_BYTES}"
        yield f"rocksdb://{tmp_path / 'outbox'}?{query}"
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
    elif backend in DEPLOYMENT_FIXTURES:
        assert deployment is not None, f"{backend} needs its servers"
        prefix = unique_name("rocketbox_test")
        try:
            yield deployment.url(f"prefix={prefix}")
        finally:
            topology = Topology.CLUSTER if backend == "redis-cluster" else Topology.STANDALONE
            delete_keys(deployment, f"{key_base(prefix, topology)}:*")
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


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    with RedisClusterServers(tmp_path_factory.mktemp("redis-cluster")) as servers:
        yield servers


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinelServers]:
    with RedisSentinelServers(tmp_path_factory.mktemp("redis-sentinel")) as servers:
        yield servers


@pytest.fixture
def outbox_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    fixture = DEPLOYMENT_FIXTURES.get(backend)
    deployment = request.getfixturevalue(fixture) if fixture else None
    with backend_url(backend, tmp_path, deployment) as url:
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
