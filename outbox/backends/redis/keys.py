"""The Redis outbox's keys: their layout, and the names the scripts are given.

Every key of an outbox starts with its key base, so all of them are in one Cluster slot (the base
is hash-tagged there) and several outboxes can share one database. On a Cluster every script is
given every key it touches (runner.py): the fixed keys (FIXED_KEYS), those its caller can name,
and those it asks for; ``KeyHints`` remembers the keys a claim found, so that the next claim and
the claimed entries' settlements need not ask for them again.

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

import threading
from collections.abc import Iterable, Sequence

# Claimed entries whose settlement keys are remembered: an entry claimed and never settled (its
# sidecar died) is forgotten once this many newer ones are remembered.
SETTLE_HINTS_MAX = 100_000
# Keys of entries made claimable by settlements, remembered for the next claim.
CLAIM_HINTS_MAX = 20_000

# The keys any script may touch, whatever the call is about (PRELUDE names them).
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


class KeyHints:
    """What the claims of one outbox instance found (on a Cluster): the keys of the due entries
    after those the last claim took, and, per claimed FIFO entry, its group's key and the entry
    after it. Only hints: a key declared in vain costs nothing, and a script asks for any it
    still lacks. Shared by the instance's threads."""

    def __init__(self, base: str) -> None:
        self._base = base
        self._lock = threading.Lock()
        # The keys of the due entries the last claim did not take, and of those settlements
        # made claimable since (a FIFO group's next entry).
        self.claim_keys: list[bytes] = []
        self._made_due: list[bytes] = []
        self._settle: dict[str, list[str]] = {}

    def claim_keys_now(self) -> list[str]:
        """The keys the next claim declares at once."""
        with self._lock:
            keys, self._made_due = [*self.claim_keys, *self._made_due], []
        return [key.decode() for key in keys]

    def made_due(self, keys: Sequence[bytes]) -> None:
        with self._lock:
            self._made_due += keys
            del self._made_due[:-CLAIM_HINTS_MAX]

    def claimed(self, entries: Sequence[tuple[str, str | None, str | None]]) -> None:
        """(message id, group name or None, the id after it in its group or None) per entry."""
        with self._lock:
            for message_id, group, after in entries:
                if group is None:
                    continue
                keys = [group_key(self._base, group)]
                if after is not None:
                    keys.append(entry_key(self._base, after))
                self._settle[message_id] = keys
            while len(self._settle) > SETTLE_HINTS_MAX:
                del self._settle[next(iter(self._settle))]

    def settled(self, message_ids: Iterable[str]) -> list[str]:
        """The keys remembered for these entries (forgotten now: their leases end)."""
        with self._lock:
            return [key for m in message_ids for key in self._settle.pop(m, ())]
