"""chaos/redis_ha.py, the chaos suite's own replicated Redis deployments, with real redis-servers:

- a three-master Redis Cluster takes a Redis outbox (``redis+cluster://``), and ``move_slot``
  moves every key of the outbox's slot to the master named, batch by batch: the old master keeps
  none, every node names the new one, and the outbox reads every entry from there;
- a master, a replica and three Sentinels take a ``redis+sentinel://`` outbox with
  ``wait_replicas=1``; ``start_failover`` and ``failed_over`` promote the replica, and the
  outbox keeps what it acknowledged before and takes writes after;
- leaving the block stops every server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.field_faults import outbox_slot
from chaos.redis_ha import (
    RESHARD_KEYS_PER_MIGRATE,
    SETTLE_DEADLINE_S,
    PrivateRedisCluster,
    PrivateRedisSentinel,
    wait_for,
)
from chaos.stage import REDIS_PREFIX, SENTINEL_OUTBOX_OPTIONS
from outbox import open_outbox
from outbox.errors import OutboxUnavailableError
from tests.outbox.entries import entry, message_id

pytestmark = pytest.mark.slow
ENTRIES = 40
NOW_MS = 2_000_000_000_000
PUT_DEADLINE_S = 60.0


def test_move_slot_moves_every_key_of_the_outbox(tmp_path: Path) -> None:
    with PrivateRedisCluster(tmp_path / "cluster") as cluster:
        slot = outbox_slot()
        source = cluster.owner(slot)
        target = next(n for n in cluster.nodes if n is not source)
        with open_outbox(cluster.url(REDIS_PREFIX)) as outbox:
            outbox.put([entry(i) for i in range(ENTRIES)])
            keys = cluster.keys_in_slot(source, slot)
            assert keys > ENTRIES  # an entry's hash each, and the outbox's own keys
            progress = list(cluster.move_slot(slot, target))
            assert progress[0] == RESHARD_KEYS_PER_MIGRATE
            assert progress[-1] == keys
            assert cluster.keys_in_slot(source, slot) == 0
            assert cluster.keys_in_slot(target, slot) == keys
            assert all(cluster.owner(slot, n) is target for n in cluster.nodes)
            assert outbox.stats(NOW_MS).pending == ENTRIES
            assert outbox.get(message_id(ENTRIES - 1)) is not None
    assert not any(n.running() for n in cluster.nodes)


def test_a_failover_promotes_the_replica_and_the_outbox_follows(tmp_path: Path) -> None:
    with (
        PrivateRedisSentinel(tmp_path / "sentinel") as sentinel,
        open_outbox(sentinel.url(REDIS_PREFIX, SENTINEL_OUTBOX_OPTIONS)) as outbox,
    ):
        outbox.put([entry(i) for i in range(ENTRIES)])
        old_port = sentinel.start_failover()
        wait_for("the failover", lambda: sentinel.failed_over(old_port), 2 * SETTLE_DEADLINE_S)
        new_port = sentinel.master_port()
        assert new_port not in (None, old_port)
        assert {s.port for s in sentinel.servers} == {old_port, new_port}
        assert outbox.stats(NOW_MS).pending == ENTRIES

        def put_after() -> bool:
            try:
                outbox.put([entry(ENTRIES)])
            except OutboxUnavailableError:  # a connection to the old master, dropped
                return False
            return True

        wait_for("a put after the failover", put_after, PUT_DEADLINE_S)
        assert outbox.stats(NOW_MS).pending == ENTRIES + 1
    assert not any(s.running() for s in [*sentinel.servers, *sentinel.sentinels])
