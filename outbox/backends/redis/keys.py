"""The Redis outbox's keys: their layout, and the names the scripts are given.

Every key of an outbox starts with its key base, so all of them are in one Cluster slot (the base
is hash-tagged there) and several outboxes can share one database. Every script is given the
fixed keys (FIXED_KEYS, in that order: scripts.py's PRELUDE names them) and declares the others
it touches (runner.py).

Keys (``P`` is the key base: the prefix, hash-tagged on a Cluster, urls.py)::

    P:e:<message_id>        hash: id, meta, body (raw bytes), size, state, seq, attempts, err,
                            nst, owner, lease, changed, created, grp, and once delivered q_id,
                            q_off, d_ms, durable; ms = 1 once a lease of it ended with no outcome
                            recorded (maybe stored, whatever meta says). meta is the JSON list of
                            the fields that never change:
                            [topic, tag, keys, message_group, delivery_timestamp_ms, properties,
                            born_timestamp_ms, cause, maybe_stored (as put),
                            delivery_timeout_ms (absent in entries put before it)]
    P:due                   zset <seq, 16 digits><message_id> → due score: the next send time,
                            or the lease's end while leased. Only PENDING entries a claim may
                            take: those without a group and each group's head, so "what is due"
                            is ZRANGEBYSCORE -inf now; equal scores leave in seq order
    P:g:<len>:<topic>:<group>  zset message_id → seq: the group's PENDING entries, head first
    P:s:<STATE>             zset message_id → seq per state (scan, export)
    P:t:DELIVERED, P:t:DEAD zset message_id → state_changed_ms (purge)
    P:created               zset message_id → created_ms of PENDING entries (stats)
    P:leases                zset message_id → lease end of leased PENDING entries (stats)
    P:groups                set of the <len>:<topic>:<group> names of the groups with PENDING
                            entries (pending_groups); P:groups:ready once it holds every one
                            (an outbox older than it gets it built at the first
                            pending_groups). Every sidecar sharing the outbox must keep it:
                            run one version
    P:n                     hash: pending, dead, delivered, bytes (the bound's counters)
    P:seq                   the last seq assigned
    P:probe                 check_writable's write
"""

from __future__ import annotations

# KEYS[1..12] of every script, after the key base (PRELUDE names them in this order).
FIXED_KEYS = (
    "due", "leases", "n", "groups", "s:PENDING", "created", "seq",
    "s:DELIVERED", "t:DELIVERED", "s:DEAD", "t:DEAD", "groups:ready",
)  # fmt: skip


def fixed_keys(base: str) -> tuple[str, ...]:
    return tuple(f"{base}:{name}" for name in FIXED_KEYS)


def entry_key(base: str, message_id: str) -> str:
    return f"{base}:e:{message_id}"


def group_key(base: str, name: str) -> str:
    """The P:g key of a group name (fields.group_name)."""
    return f"{base}:g:{name}"
