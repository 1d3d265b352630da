"""The Redis outbox's keys (outbox/backends/redis/keys.py) on one server and on a Cluster:

- one server: the keys are named exactly as before Sentinel and Cluster support (the prefix as
  it is, no hash tag), so an outbox written by an earlier release is read as it was;
- a Cluster: every key of an outbox is in the one slot of its hash-tagged prefix, on the master
  that serves it;
- a ``redis://`` URL naming a Cluster node (as before Cluster support) is told to use
  ``redis+cluster://`` when it meets a key of another node's slot;
- a Cluster drain costs about one script call a claim and one a settlement: the keys a claim finds
  (the entries after those it took, a FIFO group's next entry) are declared by the next call
  without asking (counted by the master's own command statistics).
"""

from __future__ import annotations

import pytest
import redis
from redis.crc import key_slot

from outbox import OutboxError, open_outbox
from outbox.backends.redis.fields import group_name
from outbox.backends.redis.urls import Topology, key_base
from tests.outbox.entries import LEASE_MS, NOW_MS, TOPIC, entry, message_id, receipt
from tests.redis_servers import RedisClusterServers, delete_keys
from tests.services import redis_url, unique_name

pytestmark = pytest.mark.slow


def test_one_server_names_its_keys_as_before() -> None:
    prefix = unique_name("layout")
    admin = redis.Redis.from_url(redis_url())
    try:
        with open_outbox(f"{redis_url()}?prefix={prefix}") as outbox:
            outbox.put([entry(1), entry(2, group="g"), entry(3, group="g")])
            claimed = outbox.claim_due(NOW_MS, 1, LEASE_MS, "w")
            assert outbox.mark_delivered(claimed[0].message_id, receipt(1))
            outbox.claim_due(NOW_MS, 1, LEASE_MS, "w")
            outbox.check_writable()
            keys = {k.decode() for k in admin.scan_iter(match=f"{prefix}:*", count=1000)}
        assert keys == {
            f"{prefix}:{name}"
            for name in (
                f"e:{message_id(1)}", f"e:{message_id(2)}", f"e:{message_id(3)}",
                f"g:{group_name(TOPIC, 'g')}", "due", "leases", "s:PENDING", "s:DELIVERED",
                "t:DELIVERED", "created", "groups", "n", "seq", "probe",
            )
        }  # fmt: skip
    finally:
        for key in admin.scan_iter(match=f"{prefix}:*", count=1000):
            admin.delete(key)
        admin.close()


def test_a_cluster_outbox_keeps_every_key_in_its_slot(redis_cluster: RedisClusterServers) -> None:
    prefix = unique_name("layout")
    base = key_base(prefix, Topology.CLUSTER)
    slot = key_slot(base.encode())
    try:
        with open_outbox(redis_cluster.url(f"prefix={prefix}")) as outbox:
            outbox.put([entry(n, group=f"g{n % 3}" if n % 2 else None) for n in range(40)])
            claimed = outbox.claim_due(NOW_MS, 10, LEASE_MS, "w")
            outbox.mark_delivered_many([(e.message_id, receipt(0)) for e in claimed])
            outbox.bury(outbox.claim_due(NOW_MS, 1, LEASE_MS, "w")[0].message_id, "w", "x", 1)
            assert outbox.pending_groups()
        owner = redis_cluster.owner(slot)
        keys = list(owner.client.scan_iter(match=f"{base}:*", count=1000))
        assert len(keys) > 40
        assert {key_slot(k) for k in keys} == {slot}
        for node in redis_cluster.masters():
            if node is not owner:
                assert not list(node.client.scan_iter(match=f"{base}:*", count=1000))
    finally:
        delete_keys(redis_cluster, f"{base}:*")


def test_a_cluster_drain_is_one_call_a_claim_and_a_settlement(
    redis_cluster: RedisClusterServers,
) -> None:
    prefix = unique_name("calls")
    base = key_base(prefix, Topology.CLUSTER)
    owner = redis_cluster.owner(key_slot(base.encode()))
    try:
        with open_outbox(redis_cluster.url(f"prefix={prefix}")) as outbox:
            outbox.put([entry(n, group=f"g{n % 20}" if n % 2 else None) for n in range(600)])
            outbox.claim_due(NOW_MS, 0, LEASE_MS, "w")  # scripts loaded
            owner.command("CONFIG", "RESETSTAT")
            calls = 0
            while claimed := outbox.claim_due(NOW_MS, 50, LEASE_MS, "w"):
                outbox.mark_delivered_many([(e.message_id, receipt(0)) for e in claimed])
                calls += 2
            assert outbox.stats(NOW_MS).pending == 0
        evalsha = int(owner.client.info("commandstats")["cmdstat_evalsha"]["calls"])
        # Besides one a claim and one a settlement: the first claim finds its keys, the last
        # finds nothing due, stats, and now and then a claim that finds a key no call foresaw.
        assert evalsha <= calls * 1.1 + 4, f"{evalsha} script calls, {calls} claims and marks"
    finally:
        delete_keys(redis_cluster, f"{base}:*")


def test_a_redis_url_naming_a_cluster_node_is_told_to_use_the_cluster_url(
    redis_cluster: RedisClusterServers,
) -> None:
    prefix = unique_name("astray")
    # The put script's first key: its counters, P:n.
    slot = key_slot(key_base(prefix, Topology.STANDALONE).encode() + b":n")
    node = next(m for m in redis_cluster.masters() if m is not redis_cluster.owner(slot))
    with (
        open_outbox(f"redis://127.0.0.1:{node.port}/0?prefix={prefix}") as outbox,
        pytest.raises(OutboxError, match=r"open it with redis\+cluster://"),
    ):
        outbox.put([entry(1)])
