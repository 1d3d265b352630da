"""The Redis outbox's connection: the client a URL names (urls.py) — redis-py's ``Redis`` over one
server, its Sentinel master client, or ``RedisCluster`` — each with bounded pools and a deadline
on every call, and the one place redis-py's errors become the outbox's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from outbox.backends.redis.urls import RedisUrl, Topology
from outbox.errors import (
    OutboxConfigError,
    OutboxError,
    OutboxNoSpaceError,
    OutboxUnavailableError,
    OutboxUnconfirmedError,
)

# Connections the sidecar's threads share, per server; a caller beyond them waits up to the
# timeout.
REDIS_CONNECTIONS_MAX = 64
REDIS_POOL_WAIT_S = 10.0

Client = redis.Redis | RedisCluster


class ReplicasNotAcknowledgedError(rex.RedisError):
    """A write the master executed, but that fewer replicas than ``wait_replicas`` acknowledged
    within ``wait_timeout_ms`` (WAIT's answer)."""


class BlockingSentinelConnectionPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """Sentinel's pool (connections to whichever master the Sentinels name, dropped when it
    changes) that waits for a free connection at its bound rather than failing at once."""


def translated_error(
    e: rex.RedisError | rex.RedisClusterException, what: str, topology: Topology | None = None
) -> OutboxError:
    if topology is not Topology.CLUSTER and (
        isinstance(e, rex.AskError) or "non local key" in str(e)
    ):
        # A redis:// URL naming a Cluster node: it answers for its own slots only.
        what += " (the server is a Redis Cluster node: open it with redis+cluster://)"
    if isinstance(e, rex.OutOfMemoryError):
        return OutboxNoSpaceError(f"redis outbox {what}: the server is at its maxmemory: {e}")
    transient = (
        rex.ConnectionError,  # MasterNotFoundError (no Sentinel names a master) is one
        rex.TimeoutError,
        rex.ReadOnlyError,
        rex.MasterDownError,
        rex.TryAgainError,
        rex.ClusterDownError,
        rex.AskError,  # MovedError is one: redirects that outlasted the client's retries
        rex.ClusterError,
        rex.SlotNotCoveredError,
        rex.RedisClusterUnreachableError,
        ReplicasNotAcknowledgedError,
    )
    text = str(e)
    if isinstance(e, ReplicasNotAcknowledgedError):
        return OutboxUnconfirmedError(f"redis outbox {what}: {type(e).__name__}: {text}")
    if isinstance(e, transient) or text.startswith(("MISCONF", "NOREPLICAS", "BUSY")):
        return OutboxUnavailableError(f"redis outbox {what}: {type(e).__name__}: {text}")
    # Anything else is a reply the outbox did not expect: trying again will not help.
    return OutboxError(f"redis outbox {what}: unexpected {type(e).__name__}: {text}")


def open_client(url: RedisUrl) -> tuple[Client, Callable[[], None]]:
    """The client ``url`` names, and what closes it and every connection it opened. One server
    and Sentinel connect at the first call; a Cluster client reads the cluster's slots now
    (OutboxUnavailableError when no node answers; OutboxConfigError when a node is no cluster
    node)."""
    try:
        if url.topology is Topology.STANDALONE:
            return _standalone(url)
        if url.topology is Topology.SENTINEL:
            return _sentinel(url)
        return _cluster(url)
    except (ValueError, TypeError) as e:
        raise OutboxConfigError(f"outbox URL {url.where}: {e}") from e
    except (rex.RedisError, rex.RedisClusterUnreachableError) as e:
        raise translated_error(e, f"{url.where} open") from e
    except rex.RedisClusterException as e:
        raise OutboxConfigError(f"outbox URL {url.where}: {e}") from e


def _standalone(url: RedisUrl) -> tuple[Client, Callable[[], None]]:
    pool = redis.BlockingConnectionPool.from_url(
        url.standalone_url,
        max_connections=REDIS_CONNECTIONS_MAX,
        timeout=REDIS_POOL_WAIT_S,
        socket_timeout=url.socket_timeout_s,
        socket_connect_timeout=url.socket_connect_timeout_s,
    )
    client = redis.Redis(connection_pool=pool)

    def close() -> None:
        client.close()
        pool.disconnect()

    return client, close


def _sentinel(url: RedisUrl) -> tuple[Client, Callable[[], None]]:
    timeouts = {
        "socket_timeout": url.socket_timeout_s,
        "socket_connect_timeout": url.socket_connect_timeout_s,
    }
    sentinel = Sentinel(
        list(url.hosts),
        sentinel_kwargs={**timeouts, "password": url.sentinel_password},
        socket_timeout=url.socket_timeout_s,
        socket_connect_timeout=url.socket_connect_timeout_s,
    )
    client = sentinel.master_for(
        url.service_name,
        connection_pool_class=BlockingSentinelConnectionPool,
        max_connections=REDIS_CONNECTIONS_MAX,
        timeout=REDIS_POOL_WAIT_S,
        db=url.db,
        username=url.username,
        password=url.password,
    )

    def close() -> None:
        client.close()
        client.connection_pool.disconnect()
        for s in sentinel.sentinels:
            s.close()
            s.connection_pool.disconnect()

    return client, close


def _cluster(url: RedisUrl) -> tuple[Client, Callable[[], None]]:
    node: Any = ClusterNode  # untyped in redis-py
    seeds = [node(host, port) for host, port in url.hosts]
    client = RedisCluster(
        startup_nodes=seeds,
        username=url.username,
        password=url.password,
        socket_timeout=url.socket_timeout_s,
        socket_connect_timeout=url.socket_connect_timeout_s,
        connection_pool_class=redis.BlockingConnectionPool,
        max_connections=REDIS_CONNECTIONS_MAX,
        timeout=REDIS_POOL_WAIT_S,
        # Redirects and topology refreshes: RedisCluster's own; a failed connection is tried
        # again once, after a refresh, then the outbox's caller is told (it retries later).
        retry=Retry(NoBackoff(), 1),
    )
    return client, client.close


def client_info(client: Client) -> Any:
    """The client's connection options (tests: what a URL opened)."""
    if isinstance(client, RedisCluster):
        return client.nodes_manager.connection_kwargs
    return client.connection_pool.connection_kwargs
