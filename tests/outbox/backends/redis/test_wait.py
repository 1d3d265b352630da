"""``wait_replicas`` (outbox/backends/redis/runner.py): every write waits for replicas, on servers
of the test's own (tests/redis_servers.py).

- With a replica that acknowledges, puts, claims and settlements succeed, and what a put
  returned is on the replica when it returns (read there, not on the master).
- Without one (none there, or one paused), every write fails with OutboxUnavailableError naming
  wait_replicas, after wait_timeout_ms (OutboxUnconfirmedError: applied, not confirmed), chained
  to ReplicasNotAcknowledgedError: the sidecar does not answer SPOOLED. The master did execute
  the write (the put's entry is there, a refused delivered mark did mark it): a put again with
  the same message id writes nothing new. Reads still answer; check_writable fails, so readiness
  says so.
- On a Cluster the WAIT goes to the master of the outbox's slot, on the connection that wrote.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from outbox import OutboxUnavailableError, OutboxUnconfirmedError, open_outbox
from outbox.backends.redis.connection import ReplicasNotAcknowledgedError
from outbox.backends.redis.keys import entry_key
from outbox.backends.redis.urls import Topology, key_base
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, message_id, receipt
from tests.redis_servers import RedisClusterServers, RedisProcess, start_redis, wait_until

pytestmark = pytest.mark.slow
WAIT_MS = 200


def test_writes_fail_when_no_replica_acknowledges(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        master = start_redis(stack, tmp_path / "master", list)
        url = (
            f"redis://127.0.0.1:{master.port}/0?prefix=w&wait_replicas=1&wait_timeout_ms={WAIT_MS}"
        )
        outbox = stack.enter_context(open_outbox(url))
        with pytest.raises(OutboxUnavailableError, match="wait_replicas=1") as refused:
            outbox.put([entry(1)])
        assert refused.value.retriable
        assert isinstance(refused.value, OutboxUnconfirmedError), "applied, not confirmed"
        assert isinstance(refused.value.__cause__, ReplicasNotAcknowledgedError)
        stored = outbox.get(message_id(1))
        assert stored is not None, "the master executed the put"
        with pytest.raises(OutboxUnavailableError, match="wait_replicas"):
            outbox.put([entry(1)])
        for call in (
            outbox.check_writable,
            lambda: outbox.claim_due(NOW_MS, 10, LEASE_MS, "w"),
            lambda: outbox.mark_delivered(message_id(1), receipt(1)),
        ):
            with pytest.raises(OutboxUnavailableError, match="wait_replicas"):
                call()
        # Refused, yet executed on the master (it is told it may not survive a failover).
        assert outbox.stats(NOW_MS).delivered == 1


def test_writes_wait_for_a_replica_and_fail_while_it_is_paused(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        master = start_redis(stack, tmp_path / "master", list)
        replica = start_redis(
            stack, tmp_path / "replica", lambda: ["--replicaof", "127.0.0.1", str(master.port)]
        )
        wait_until("the replica's link", lambda: _linked(replica), 30.0)
        url = (
            f"redis://127.0.0.1:{master.port}/0?prefix=w&wait_replicas=1&wait_timeout_ms={WAIT_MS}"
        )
        outbox = stack.enter_context(open_outbox(url))
        for n in range(1, 50):
            outbox.put([entry(n)])
            assert replica.client.exists(entry_key("w", message_id(n)))
        claimed = outbox.claim_due(NOW_MS, 10, LEASE_MS, "w")
        assert outbox.mark_delivered_many([(e.message_id, receipt(0)) for e in claimed])
        outbox.check_writable()
        replica.pause()
        try:
            with pytest.raises(OutboxUnavailableError, match="0 of the wait_replicas=1"):
                outbox.put([entry(50)])
        finally:
            replica.resume()
        outbox.put([entry(51)])
        assert replica.client.exists(entry_key("w", message_id(51)))


def test_on_a_cluster_the_slot_master_waits_for_its_replica(tmp_path: Path) -> None:
    with RedisClusterServers(tmp_path / "cluster", masters=3, replicas=1) as cluster:
        slot = key_slot(key_base("w", Topology.CLUSTER).encode())
        master = cluster.owner(slot)
        replica = _replica_of(cluster, master)
        with open_outbox(cluster.url(f"prefix=w&wait_replicas=1&wait_timeout_ms={WAIT_MS}")) as ob:
            for n in range(1, 20):
                ob.put([entry(n, group="g" if n % 2 else None)])
                key = entry_key(key_base("w", Topology.CLUSTER), message_id(n))
                # A cluster replica answers reads of its master's slots after READONLY.
                pipe: Any = replica.client.pipeline(transaction=False)  # untyped commands
                pipe.execute_command("READONLY")
                pipe.exists(key)
                assert pipe.execute()[1], "the put returned before the replica had it"
            claimed = ob.claim_due(NOW_MS, 100, LEASE_MS, "w")
            assert all(ob.mark_delivered_many([(e.message_id, receipt(0)) for e in claimed]))
            ob.check_writable()
        with (
            open_outbox(cluster.url(f"prefix=w&wait_replicas=2&wait_timeout_ms={WAIT_MS}")) as ob,
            pytest.raises(OutboxUnavailableError, match="1 of the wait_replicas=2"),
        ):
            ob.put([entry(100)])


def _linked(replica: RedisProcess) -> bool:
    return replica.info("replication").get("master_link_status") == "up"


def _replica_of(cluster: RedisClusterServers, master: RedisProcess) -> RedisProcess:
    for node in cluster.nodes:
        info = node.info("replication")
        if info["role"] == "slave" and info.get("master_port") == master.port:
            return node
    raise AssertionError(f"no replica of the master on port {master.port}")
