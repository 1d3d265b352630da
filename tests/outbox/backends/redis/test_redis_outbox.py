"""What the Redis outbox promises beyond the contract (outbox/backends/redis/outbox.py):

- the key prefix isolates outboxes in one database, and two instances on one prefix (two
  sidecars) are one outbox: idempotency, claims and the bound hold across them;
- pending_groups works on an outbox written before its set of groups existed (it builds the set
  once), and drops a name whose group is gone;
- every server refusal reaches the caller as OutboxUnavailableError, chained to redis-py's error:
  no server listening, a read-only replica (READONLY), a server at its maxmemory (OOM, as
  OutboxNoSpaceError) — and a put refused by the server wrote nothing. The last two run a
  private redis-server;
- at maxmemory the drain goes on: claims, reschedules, expire_leases and tombstones still run,
  and the bodies they deliver free the room that puts are taken in again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.exceptions as rex

from outbox import (
    OutboxFullError,
    OutboxLimits,
    OutboxNoSpaceError,
    OutboxUnavailableError,
    open_outbox,
)
from outbox.backends.redis.outbox import RedisOutbox
from outbox.backends.redis.urls import PREFIX_DEFAULT
from tests.outbox.conftest import OpenOutbox
from tests.outbox.entries import LEASE_MS, NOW_MS, TOPIC, entry, ids, message_id, receipt
from tests.services import free_port, redis_url, start_private_redis

pytestmark = pytest.mark.slow

START_DEADLINE_S = 30.0


@contextlib.contextmanager
def private_redis(tmp_path: Path, *args: str) -> Iterator[str]:
    """A redis-server of this test's own (on a free port, in tmp_path), stopped afterwards."""
    port = free_port()
    proc = start_private_redis(port, tmp_path, *args)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=START_DEADLINE_S)


@pytest.fixture
def redis_pair(outbox_url: str) -> Iterator[tuple[RedisOutbox, RedisOutbox]]:
    """Two instances on one prefix, as two sidecars sharing one outbox would have."""
    a = RedisOutbox.from_url(outbox_url, OutboxLimits(outbox_entries_max=5))
    b = RedisOutbox.from_url(outbox_url, OutboxLimits(outbox_entries_max=5))
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture
def backend() -> str:
    """Every outbox_url of this module is a Redis one."""
    return "redis"


def test_prefix_isolates_outboxes_in_one_database(open_ob: OpenOutbox, outbox_url: str) -> None:
    ob = open_ob()
    other = RedisOutbox.from_url(outbox_url.replace("prefix=", "prefix=other_"), OutboxLimits())
    try:
        ob.put([entry(1)])
        assert other.get(message_id(1)) is None
        assert other.claim_due(NOW_MS, 10, LEASE_MS, "w") == []
        (own,) = other.put([entry(1)])
        assert own.seq == 1
        assert other.stats(NOW_MS).pending == 1
    finally:
        other.close()
        admin = redis.Redis.from_url(redis_url())
        keys = list(admin.scan_iter(match=f"{other.prefix}:*"))
        if keys:
            admin.delete(*keys)
        admin.close()


def test_prefix_defaults_to_rocketbox_outbox() -> None:
    outbox = RedisOutbox.from_url(redis_url(), OutboxLimits())  # connects lazily: writes nothing
    try:
        assert outbox.prefix == PREFIX_DEFAULT == "rocketbox:outbox"
    finally:
        outbox.close()


def test_two_instances_on_one_prefix_are_one_outbox(
    redis_pair: tuple[RedisOutbox, RedisOutbox],
) -> None:
    a, b = redis_pair
    a.put([entry(1), entry(2, group="g"), entry(3, group="g")])
    assert b.put([entry(1)])[0] == a.get(message_id(1))
    assert ids(b.claim_due(NOW_MS, 10, LEASE_MS, "sidecar-b")) == [message_id(1), message_id(2)]
    assert a.claim_due(NOW_MS, 10, LEASE_MS, "sidecar-a") == []
    assert a.mark_delivered(message_id(2), receipt(2))
    assert ids(a.claim_due(NOW_MS, 10, LEASE_MS, "sidecar-a")) == [message_id(3)]
    b.put([entry(4), entry(5)])
    with pytest.raises(OutboxFullError):
        a.put([entry(6), entry(7)])  # 4 pending + 2 > 5, whoever asks
    assert b.get(message_id(6)) is None


def test_pending_groups_of_an_outbox_older_than_its_set_of_groups(open_ob: OpenOutbox) -> None:
    ob = open_ob()
    assert isinstance(ob, RedisOutbox)
    ob.put([entry(1, group="g"), entry(2, group="g"), entry(3, group="h", topic="T2"), entry(4)])
    admin = redis.Redis.from_url(redis_url())
    try:
        # As a version before P:groups left it: group keys, no set.
        admin.delete(f"{ob.prefix}:groups", f"{ob.prefix}:groups:ready")
        assert ob.pending_groups() == {(TOPIC, "g"), ("T2", "h")}
        assert admin.exists(f"{ob.prefix}:groups:ready")
        # A name whose group key is gone (emptied by a sidecar that did not keep the set).
        admin.sadd(f"{ob.prefix}:groups", "2:T9:gone")
        assert ob.pending_groups() == {(TOPIC, "g"), ("T2", "h")}
        assert not admin.sismember(f"{ob.prefix}:groups", "2:T9:gone")
    finally:
        admin.close()


def test_no_server_is_unavailable(tmp_path: Path) -> None:
    outbox = open_outbox(f"redis://127.0.0.1:{free_port()}/0?prefix=nobody")
    try:
        for call in (
            outbox.check_writable,
            lambda: outbox.put([entry(1)]),
            lambda: outbox.claim_due(NOW_MS, 1, LEASE_MS, "w"),
            lambda: outbox.stats(NOW_MS),
        ):
            with pytest.raises(OutboxUnavailableError) as refused:
                call()
            assert refused.value.retriable
            assert isinstance(refused.value.__cause__, rex.ConnectionError)
    finally:
        outbox.close()


@pytest.mark.slow
def test_read_only_replica_is_unavailable(tmp_path: Path) -> None:
    # A replica of a master that is not there: it answers, and refuses every write.
    with private_redis(tmp_path, "--replicaof", "127.0.0.1", str(free_port())) as url:
        outbox = open_outbox(f"{url}?prefix=ro")
        try:
            with pytest.raises(OutboxUnavailableError, match=r"READONLY|ReadOnly"):
                outbox.check_writable()
            with pytest.raises(OutboxUnavailableError) as refused:
                outbox.put([entry(1)])
            assert isinstance(refused.value.__cause__, rex.ReadOnlyError)
            assert outbox.get(message_id(1)) is None
        finally:
            outbox.close()


@pytest.mark.slow
def test_server_at_maxmemory_refuses_puts_but_not_the_drain(tmp_path: Path) -> None:
    with private_redis(tmp_path, "--maxmemory-policy", "noeviction") as url:
        admin = redis.Redis.from_url(url)
        outbox = open_outbox(f"{url}?prefix=oom")
        try:
            outbox.put([entry(0)])  # scripts loaded, keys created
            used_bytes = int(admin.info("memory")["used_memory"])
            admin.config_set("maxmemory", used_bytes + 512 * 1024)
            refused: OutboxUnavailableError | None = None
            refused_at = 0
            while refused is None:
                refused_at += 1
                assert refused_at < 200, "maxmemory never refused a put"
                try:
                    outbox.put([entry(refused_at, body=bytes(16 * 1024))])
                except OutboxUnavailableError as e:
                    refused = e
            assert refused.retriable
            assert isinstance(refused, OutboxNoSpaceError)
            assert isinstance(refused.__cause__, rex.OutOfMemoryError)
            assert outbox.get(message_id(refused_at)) is None
            assert outbox.stats(NOW_MS).pending == refused_at  # entry(0) and the ones before
            with pytest.raises(OutboxNoSpaceError, match="maxmemory"):
                outbox.check_writable()

            # The drain is not refused: a claim, a reschedule, a dead run's leases ended, a
            # claim over them, the tombstones.
            claimed = outbox.claim_due(NOW_MS, 1_000, LEASE_MS, "host/1")
            assert len(claimed) == refused_at
            assert outbox.reschedule(
                claimed[0].message_id, "host/1", NOW_MS, "busy", NOW_MS, maybe_stored=False
            )
            assert outbox.expire_leases("host/", NOW_MS) == refused_at - 1
            again = outbox.claim_due(NOW_MS, 1_000, LEASE_MS, "host/2")
            assert sorted(ids(again)) == sorted(ids(claimed))
            deliveries = [(e.message_id, receipt(0)) for e in again]
            assert outbox.mark_delivered_many(deliveries) == [True] * refused_at
            assert outbox.stats(NOW_MS).pending == 0
            # The delivered bodies are freed: room for puts again, at the same maxmemory.
            outbox.put([entry(refused_at)])
            outbox.check_writable()
        finally:
            outbox.close()
            admin.close()
