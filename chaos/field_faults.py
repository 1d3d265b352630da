"""Scenarios of the field: a broker outage that outlasts any count of failed resends, and the
Redis outbox's own high availability moving under the sidecar.

- ``long-outage-{rocksdb,redis,mysql}``: a time-compressed long outage. The sidecar resends
  with a back-off of 10-50 ms and probes at most every 200 ms (LONG_OUTAGE_SIDECAR_ARGS), so
  that in LONG_OUTAGE_S a resend loop that counted failures would fail each entry hundreds of
  times, as an outage of hours does at the default back-off. The broker is SIGKILLed mid-load,
  the rest of the load is answered SPOOLED while it is down, and it comes back after
  LONG_OUTAGE_S: the sidecar must give up on nothing (the delivery budget, a week by default,
  is the only limit) and deliver everything once. What the outbox held at the outage's end (its
  PENDING and DEAD entries, the most attempts an entry made) goes to ``events.jsonl``.
- ``redis-cluster-reshard``: the outbox on a private three-master Redis Cluster; while the
  sidecar spools (flow control on), the outbox's slot (every key of it: the prefix is
  hash-tagged) is moved to another master, MIGRATE by MIGRATE over a seeded 2-6 s, with flow
  control storming beside it so that puts, claims and delivered marks all meet the half-moved
  slot. Then the drain, by the same sidecar, never restarted: an entry refused mid-move must not
  be stranded, and the old master must keep none of the slot's keys.
- ``redis-sentinel-failover``: the outbox on a private master and replica under three Sentinels,
  ``wait_replicas=1``; while the sidecar spools, SENTINEL FAILOVER, with flow control storming
  beside it until the old master replicates from the new one. Then the drain.

What each may duplicate is the scenario's ``no_duplicates`` (chaos/scenarios.py, docs/chaos.md).
"""

from __future__ import annotations

import math
import random
import signal
import time

from redis.crc import key_slot

from chaos.processes import KILL_DEADLINE_S
from chaos.progress import FlowControlStorm, next_point, spooling
from chaos.redis_ha import RESHARD_KEYS_PER_MIGRATE, SETTLE_DEADLINE_S
from chaos.stage import REDIS_PREFIX, Stage
from outbox.backends.redis.urls import Topology, key_base
from outbox.entry import EntryState

# How long the broker stays down in the long outage: some 150 probes at the longest probe
# interval below, and far past what a limit of failed resends counted in dozens would take.
LONG_OUTAGE_S = 30.0
LONG_OUTAGE_SIDECAR_ARGS = (
    "--backoff-initial-ms=10", "--backoff-max-ms=50", "--probe-interval-max-ms=200",
)  # fmt: skip
# The count of failed resends after which the sidecar once buried an entry: the outage's event
# says how many entries went past it (and stayed PENDING).
FORMER_ATTEMPTS_MAX = 64
# The PENDING entries read at the outage's end for their attempts, at most.
ATTEMPTS_SCAN_MAX = 100_000
# The slot stays half moved at least this long (the MIGRATEs paced over it), and the whole move
# ends within the deadline.
RESHARD_SPAN_S_MIN = 2.0
RESHARD_SPAN_S_MAX = 6.0
RESHARD_DEADLINE_S = 300.0
# SENTINEL FAILOVER to every server replicating from the new master.
FAILOVER_DEADLINE_S = 2 * SETTLE_DEADLINE_S


class ScenarioError(RuntimeError):
    """The fault did not leave the deployment as it must (a slot not moved whole)."""


def long_outage(stage: Stage, rng: random.Random) -> None:
    broker = stage.broker
    assert broker is not None
    stage.start_load()
    next_point(stage, rng, 0.1, 0.3)
    broker.signal(signal.SIGKILL)
    stage.event("broker SIGKILL", code=broker.wait_exit(KILL_DEADLINE_S))
    stage.hold(LONG_OUTAGE_S, "broker down")
    stats = stage.outbox_stats()
    pending = stage.outbox_entries(EntryState.PENDING, ATTEMPTS_SCAN_MAX) or []
    attempts = [e.attempts for e in pending]
    stage.event(
        "the outage's end",
        pending=None if stats is None else stats.pending,
        dead=None if stats is None else stats.dead,
        attempts_max=max(attempts, default=0),
        attempts_total=sum(attempts),
        past_former_limit=sum(a >= FORMER_ATTEMPTS_MAX for a in attempts),
    )
    broker.restart()
    stage.event("broker restarted")
    stage.healed()


def outbox_slot() -> int:
    """The Cluster slot of every key of the stage's Redis outbox."""
    return key_slot(key_base(REDIS_PREFIX, Topology.CLUSTER).encode())


def cluster_reshard(stage: Stage, rng: random.Random) -> None:
    cluster = stage.redis_cluster
    assert cluster is not None
    stage.start_load()
    next_point(stage, rng, 0.1, 0.25)
    stage.flow_control(True)
    spooling(stage, rng)
    slot = outbox_slot()
    source = cluster.owner(slot)
    target = rng.choice([n for n in cluster.nodes if n is not source])
    keys = cluster.keys_in_slot(source, slot)
    span_s = rng.uniform(RESHARD_SPAN_S_MIN, RESHARD_SPAN_S_MAX)
    pause_s = span_s / max(1, math.ceil(keys / RESHARD_KEYS_PER_MIGRATE))
    stage.event("reshard begins", slot=slot, source=source.port, target=target.port, keys=keys,
                span_s=round(span_s, 1))  # fmt: skip
    storm = FlowControlStorm(stage, rng, on=True)
    started_s = time.monotonic()
    moved = 0
    for batch, moved_so_far in enumerate(cluster.move_slot(slot, target), 1):
        moved = moved_so_far
        storm.tick()
        now_s = time.monotonic()
        if now_s - started_s > RESHARD_DEADLINE_S:
            raise TimeoutError(f"the reshard of slot {slot} took over {RESHARD_DEADLINE_S} s")
        # The reshard's pace, a planned duration: the next MIGRATE not before its time.
        time.sleep(max(0.0, started_s + batch * pause_s - now_s))
    storm.end()
    left = cluster.keys_in_slot(source, slot)
    stage.event(
        "reshard done", moved=moved, left_on_source=left,
        on_target=cluster.keys_in_slot(target, slot), owner=cluster.owner(slot).port,
        elapsed_s=round(time.monotonic() - started_s, 1), flow_control_toggles=storm.toggles,
    )  # fmt: skip
    if left or cluster.owner(slot) is not target:
        raise ScenarioError(
            f"after the reshard slot {slot} is served by port {cluster.owner(slot).port} and "
            f"port {source.port} keeps {left} of its keys"
        )
    stage.healed()


def sentinel_failover(stage: Stage, rng: random.Random) -> None:
    sentinel = stage.redis_sentinel
    assert sentinel is not None
    stage.start_load()
    next_point(stage, rng, 0.1, 0.25)
    stage.flow_control(True)
    spooling(stage, rng)
    storm = FlowControlStorm(stage, rng, on=True)
    old_port = sentinel.start_failover()
    stage.event("SENTINEL FAILOVER", old_master=old_port)

    def complete() -> bool:
        storm.tick()
        return sentinel.failed_over(old_port)

    stage.wait(complete, FAILOVER_DEADLINE_S, "the failover to complete")
    storm.end()
    stage.event("failover complete", new_master=sentinel.master_port(),
                flow_control_toggles=storm.toggles)  # fmt: skip
    stage.healed()
