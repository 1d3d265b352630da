"""A Redis Cluster outbox (``redis+cluster://``) while a reshard moves its slot to another master,
under load (tests/outbox/backends/redis/load.py: a putter, a claimer/deliverer, readiness checks;
three masters of the test's own, tests/redis_servers.py), and the same with a replica each and
``wait_replicas=1`` (whose WAIT follows the slot's redirects itself):

- every key of the outbox is in the one slot of its hash-tagged prefix, and the reshard moves
  them all: none is left on the old master;
- while the slot is half moved, the outbox's scripts are refused (TRYAGAIN, tried again, then
  OutboxUnavailableError): a refused put wrote nothing, and nothing else is refused for good;
- after the move the same outbox instances go on, never reopened: nothing acknowledged is lost,
  nothing is stranded (every entry put is delivered and nothing is left pending), and each FIFO
  group's entries are first sent in the order they were put;
- what is duplicated: nothing is sent twice. An entry whose delivered mark was refused during the
  move is claimed again once its lease ends, maybe stored, and found in the broker (the resend
  pool's index check) rather than sent again.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from redis.crc import key_slot

from outbox.backends.redis.urls import Topology, key_base
from tests.outbox.backends.redis.load import OutboxLoad, summary
from tests.redis_servers import RedisClusterServers

pytestmark = pytest.mark.slow
LOG = logging.getLogger(__name__)
PREFIX = "reshard"
LOAD_DEADLINE_S = 60.0


@pytest.mark.parametrize(
    ("replicas", "options"),
    [(0, ""), (1, "&wait_replicas=1&wait_timeout_ms=1000")],
    ids=["no-wait", "wait-replicas"],
)
def test_a_reshard_that_moves_the_outbox_slot_loses_and_strands_nothing(
    tmp_path: Path, replicas: int, options: str
) -> None:
    with RedisClusterServers(tmp_path / "cluster", replicas=replicas) as cluster:
        slot = key_slot(key_base(PREFIX, Topology.CLUSTER).encode())
        source = cluster.owner(slot)
        target = next(m for m in cluster.masters() if m is not source)
        with OutboxLoad(cluster.url(f"prefix={PREFIX}{options}")) as load:
            load.wait_for(
                "300 puts acknowledged and 100 entries delivered",
                lambda r: len(r.acked_puts) >= 300 and len(r.acked_marks) >= 100,
                LOAD_DEADLINE_S,
            )
            stray = [k for k in source.client.scan_iter(count=1000) if key_slot(k) != slot]
            assert not stray, "keys of the outbox outside its slot"
            keys_before = int(source.command("CLUSTER", "COUNTKEYSINSLOT", slot))
            start = time.monotonic()
            moving = cluster.move_slot(slot, target)
            next(moving)  # the first keys moved: the slot is half moved
            refused = len(load.record.refused_puts)
            load.wait_for(
                "a put refused while the slot is half moved",
                lambda r: len(r.refused_puts) > refused,
                LOAD_DEADLINE_S,
            )
            for _ in moving:
                pass
            end = time.monotonic()
            acked = len(load.record.acked_puts)
            load.wait_for(
                "300 more puts acknowledged after the move",
                lambda r: len(r.acked_puts) >= acked + 300,
                LOAD_DEADLINE_S,
            )
            load.drain(LOAD_DEADLINE_S)
            for message_id in load.record.refused_puts:
                assert load.deliverer.get(message_id) is None, "a refused put wrote"
        record = load.record
        LOG.info("reshard%s: %s", options, summary(record, (start, end)))
        assert cluster.owner(slot) is target
        assert int(source.command("CLUSTER", "COUNTKEYSINSLOT", slot)) == 0
        assert int(target.command("CLUSTER", "COUNTKEYSINSLOT", slot)) >= keys_before
        assert set(record.acked_puts) <= set(record.sends), "acknowledged puts never sent"
        assert not record.duplicated()
        assert record.refused_marks <= record.found_in_index | set(record.acked_marks)
        for group, order in record.group_order.items():
            put = [m for m in record.put_order[group] if m in record.first_sent]
            assert order == put, f"group {group} first sent out of order"
