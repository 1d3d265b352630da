"""The Redis outbox (redis-py, sync client): entries in one Redis, shared by any number of sidecars.

URL ``redis://[:password@]host:port/db?prefix=NAME`` (``rediss://`` for TLS); ``prefix`` (default
``rocketbox:outbox``) starts every key, so several outboxes can share one database. Other query
options are redis-py's own (``socket_timeout`` …).

Durability is the server's, not ours: ``put`` returns once Redis has executed the write, and what
that survives is its persistence policy.
- ``appendonly yes`` with ``appendfsync always``: survives a crash of the Redis server.
- ``appendfsync everysec`` (Redis's default when AOF is on): up to about 1 s of acknowledged puts
  can be lost in a server crash.
- No AOF (this machine's default: ``--appendonly no --save ""``): survives SIGKILL of the sidecar
  and loss of its pod, but not a restart of Redis.
Replication is asynchronous; a failover can lose the last writes unless ``WAIT``-style policies
are used by the operator's Redis.

Several sidecars may share one outbox: every operation is one atomic Lua script, so claims lease
entries exclusively across processes and the bound holds for all writers together. The scripts
name the keys they touch from the prefix (standalone or replicated Redis; on Redis Cluster, put a
hash tag in the prefix, ``{outbox}``, so that all keys live in one slot).

Keys (``P`` is the prefix)::

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

Group commit: concurrent ``put`` callers, and the requests of a ``put_groups``, share one script
call (outbox/group_commit.py), which checks and writes every request of the batch, each
all-or-nothing on its own. ``mark_delivered_many`` is one script call (per
``DELIVER_BATCH_MAX`` items). The scripts are in outbox/backends/redis/scripts.py.

A requeued FIFO entry older than its group's leased head is due when that lease ends rather than
at once, so that the group never has two entries in flight.

``expire_leases`` pages through ``P:leases`` (the entries under a lease: as many as resends in
flight over every sidecar sharing the outbox), ``EXPIRE_BATCH_MAX`` an atomic script call. A
lease that another sidecar moves meanwhile may be passed over: it then ends at its lease's end,
and its entry is claimed maybe stored all the same.

A full Redis (``maxmemory`` with the ``noeviction`` policy, the only one that keeps an outbox
whole): ``put`` is refused with OutboxNoSpaceError, while claims, their settlements, tombstones
and purges go on (Redis 7: their scripts are flagged ``allow-oom``,
outbox/backends/redis/scripts.py) and free the bodies they deliver. On Redis 6 the flag does
not exist: claims are refused at ``maxmemory`` too, and the drain waits for room. A Redis that
refuses writes for a failed snapshot (``MISCONF``, a full disk under its RDB) refuses every
script: the outbox is unavailable until it can write again.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any, cast

import redis
import redis.exceptions as rex

from outbox.backends.redis import bulk_and_read_scripts as bulk_scripts
from outbox.backends.redis import scripts as redis_scripts
from outbox.backends.redis.connection import Lua, load_script, redis_client, translated_error
from outbox.backends.redis.fields import (
    entry_from_hash,
    group_name,
    group_of_name,
    pairs,
    put_fields,
)
from outbox.contract_checks import (
    check_claim_args,
    check_owner_prefix,
    check_purge_state,
    check_put_entries,
    with_seq,
)
from outbox.entry import (
    DeliveryReceipt,
    EntryState,
    OutboxEntry,
    OutboxLimits,
    OutboxStats,
)
from outbox.errors import (
    OutboxError,
    OutboxUnavailableError,
)
from outbox.group_commit import GroupCommitter, Result
from outbox.outbox import Outbox, OutboxFeatures

CLAIM_BATCH_MAX = 10_000
# Deliveries per script call of mark_delivered_many: no call holds the server for long.
DELIVER_BATCH_MAX = 1_000
PURGE_BATCH_MAX = 10_000
REQUEUE_BATCH_MAX = 1_000
RETRY_NOW_BATCH_MAX = 1_000
# P:leases members one expire_leases script call looks at.
EXPIRE_BATCH_MAX = 1_000


class RedisOutbox(Outbox):
    name = "redis"
    features = OutboxFeatures(shared_by_sidecars=True, survives_process_kill=True)

    def __init__(self, client: redis.Redis, prefix: str, limits: OutboxLimits, where: str) -> None:
        super().__init__(limits)
        self.prefix = prefix
        self._where = where
        self._client = client
        self._closed = False
        # Until a server says it cannot compile ALLOW_OOM (Redis 6).
        self._allow_oom = True
        self._put_script = load_script(client, redis_scripts.PUT)
        self._claim_script = load_script(client, redis_scripts.CLAIM, allow_oom=True)
        self._delivered_script = load_script(client, redis_scripts.DELIVERED, allow_oom=True)
        self._bury_script = load_script(client, redis_scripts.BURY, allow_oom=True)
        self._unlease_script = load_script(client, redis_scripts.UNLEASE, allow_oom=True)
        self._expire_script = load_script(client, redis_scripts.EXPIRE_LEASES, allow_oom=True)
        self._requeue_script = load_script(client, bulk_scripts.REQUEUE)
        self._retry_now_script = load_script(client, bulk_scripts.RETRY_NOW, allow_oom=True)
        self._purge_script = load_script(client, bulk_scripts.PURGE, allow_oom=True)
        self._scan_script = load_script(client, bulk_scripts.SCAN)
        self._pending_groups_script = load_script(client, bulk_scripts.PENDING_GROUPS)
        self._stats_script = load_script(client, bulk_scripts.STATS)
        self._committer = GroupCommitter(self._commit, name=f"redis-outbox-put:{prefix}")

    @classmethod
    def from_url(cls, url: str, limits: OutboxLimits, *, create: bool = True) -> RedisOutbox:
        # A Redis outbox has no schema: its keys appear with its first entry and go with its last,
        # so a prefix with no keys is an empty outbox, never "not found" (``create`` changes
        # nothing; opening writes nothing either way).
        del create
        client, prefix, where = redis_client(url)
        return cls(client, prefix, limits, where)

    # -- the contract -------------------------------------------------------------------------

    def put(self, entries: Sequence[OutboxEntry]) -> list[OutboxEntry]:
        return self._committer.put(entries, check_put_entries)

    def put_groups(
        self, requests: Sequence[Sequence[OutboxEntry]]
    ) -> list[list[OutboxEntry] | OutboxError]:
        # Submitted together: up to GROUP_COMMIT_BATCH_MAX requests share one script call.
        return self._committer.put_groups(requests, check_put_entries)

    def get(self, message_id: str) -> OutboxEntry | None:
        with self._errors("get"):
            fields = cast(dict[bytes, bytes], self._client.hgetall(self._entry_key(message_id)))
        return entry_from_hash(fields) if fields else None

    def has_pending_group(self, topic: str, message_group: str) -> bool:
        if not message_group:
            return False  # an empty group is no group (OutboxEntry.fifo_group)
        with self._errors("has_pending_group"):
            key = f"{self.prefix}:g:{group_name(topic, message_group)}"
            return bool(self._client.exists(key))

    def pending_groups(self) -> set[tuple[str, str]]:
        names = self._run(self._pending_groups_script, "pending_groups", [])
        return {group_of_name(name.decode()) for name in names}

    def claim_due(self, now_ms: int, limit: int, lease_ms: int, owner: str) -> list[OutboxEntry]:
        check_claim_args(lease_ms, owner)
        if limit < 1:
            return []
        args = [now_ms, min(limit, CLAIM_BATCH_MAX), now_ms + lease_ms, owner]
        claimed = self._run(self._claim_script, "claim_due", args)
        return [entry_from_hash(pairs(flat)) for flat in claimed]

    def expire_leases(self, owner_prefix: str, now_ms: int) -> int:
        check_owner_prefix(owner_prefix)
        ended_total, start = 0, 0
        while True:
            args = [owner_prefix, start, EXPIRE_BATCH_MAX]
            ended, kept = (int(n) for n in self._run(self._expire_script, "expire_leases", args))
            ended_total += ended
            if ended + kept < EXPIRE_BATCH_MAX:
                return ended_total
            start += kept

    def mark_delivered(self, message_id: str, receipt: DeliveryReceipt) -> bool:
        (delivered,) = self.mark_delivered_many([(message_id, receipt)])
        return delivered

    def mark_delivered_many(self, deliveries: Sequence[tuple[str, DeliveryReceipt]]) -> list[bool]:
        answers: list[bool] = []
        for start in range(0, len(deliveries), DELIVER_BATCH_MAX):
            args: list[Any] = []
            for message_id, r in deliveries[start : start + DELIVER_BATCH_MAX]:
                args += [message_id, r.queue_id, r.queue_offset, r.delivered_ms, int(r.durable)]
            reply = self._run(self._delivered_script, "mark_delivered", args)
            answers += [flag == ord("1") for flag in reply]
        return answers

    def reschedule(
        self,
        message_id: str,
        owner: str,
        next_send_time_ms: int,
        error: str,
        now_ms: int,
        *,
        maybe_stored: bool,
    ) -> bool:
        args = [message_id, owner, next_send_time_ms, error, int(maybe_stored)]
        return bool(self._run(self._unlease_script, "reschedule", args))

    def bury(self, message_id: str, owner: str, error: str, now_ms: int) -> bool:
        args = [message_id, owner, error, now_ms]
        return bool(self._run(self._bury_script, "bury", args))

    def release(self, message_id: str, owner: str) -> bool:
        return bool(self._run(self._unlease_script, "release", [message_id, owner, ""]))

    def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        if message_ids is not None:
            return self._run_by_ids(
                self._requeue_script, "requeue", now_ms, message_ids, REQUEUE_BATCH_MAX
            )
        requeued = 0
        while True:
            with self._errors("requeue"):
                dead = self._client.zrange(f"{self.prefix}:s:DEAD", 0, REQUEUE_BATCH_MAX - 1)
            if not dead:
                return requeued
            ids = [m.decode() for m in cast(list[bytes], dead)]
            requeued += int(self._run(self._requeue_script, "requeue", [now_ms, *ids]))

    def retry_now(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        if message_ids is not None:
            return self._run_by_ids(
                self._retry_now_script, "retry_now", now_ms, message_ids, RETRY_NOW_BATCH_MAX
            )
        # Every PENDING entry, page by page in seq order: retry_now leaves the set as it is.
        changed = 0
        after_seq = 0
        while True:
            with self._errors("retry_now"):
                page = self._client.zrangebyscore(
                    f"{self.prefix}:s:PENDING",
                    f"({after_seq}",
                    "+inf",
                    start=0,
                    num=RETRY_NOW_BATCH_MAX,
                    withscores=True,
                )
            pairs = cast(list[tuple[bytes, float]], page)
            if pairs:
                ids = [member.decode() for member, _ in pairs]
                changed += int(self._run(self._retry_now_script, "retry_now", [now_ms, *ids]))
                after_seq = int(pairs[-1][1])
            if len(pairs) < RETRY_NOW_BATCH_MAX:
                return changed

    def purge(self, state: EntryState, before_ms: int) -> int:
        check_purge_state(state)
        purged = 0
        while True:
            args = [state.value, before_ms, PURGE_BATCH_MAX]
            batch = int(self._run(self._purge_script, "purge", args))
            purged += batch
            if batch < PURGE_BATCH_MAX:
                return purged

    def stats(self, now_ms: int) -> OutboxStats:
        reply = self._run(self._stats_script, "stats", [now_ms])
        pending, dead, delivered, body_bytes, in_flight = (int(n) for n in reply[:5])
        oldest, soonest = reply[5:7]
        return OutboxStats(
            pending=pending,
            in_flight=in_flight,
            delivered=delivered,
            dead=dead,
            bytes=body_bytes,
            oldest_pending_created_ms=int(oldest) if oldest is not None else None,
            next_due_ms=int(soonest) if soonest is not None else None,
        )

    def scan(self, state: EntryState | None, after_seq: int, limit: int) -> list[OutboxEntry]:
        if limit < 1:
            return []
        args = [state.value if state is not None else "", after_seq, limit]
        page = self._run(self._scan_script, "scan", args)
        return [entry_from_hash(pairs(flat)) for flat in page]

    def check_writable(self) -> None:
        """A real write: a replica (READONLY), a full server (OOM) or a dead link all fail it."""
        self._check_open()
        with self._errors("check_writable"):
            self._client.set(f"{self.prefix}:probe", b"1")

    def close(self) -> None:
        if self._closed:
            return
        self._committer.close()
        self._closed = True
        self._client.close()
        self._client.connection_pool.disconnect()

    # -- internals ----------------------------------------------------------------------------

    def _commit(self, requests: Sequence[Sequence[OutboxEntry]]) -> list[Result]:
        # One JSON argument for every request's fields, and one per body: redis-py's cost is
        # per argument, and this runs on the thread every concurrent put waits for.
        fields = [[put_fields(e) for e in entries] for entries in requests]
        args: list[Any] = [
            self.limits.outbox_entries_max,
            self.limits.outbox_bytes_max,
            json.dumps(fields, separators=(",", ":")),
            *(e.message.body for entries in requests for e in entries),
        ]
        summary, *stored = self._run(self._put_script, "put", args)
        results: list[Result] = []
        for entries, answer in zip(requests, summary.split(b";"), strict=True):
            if answer[:1] == b"F":
                held, held_bytes = answer[1:].decode().split(",")
                results.append(self.limits.full_error(int(held), int(held_bytes)))
                continue
            assert answer[:1] == b"S", answer
            results.append(
                [
                    entry_from_hash(pairs(stored[int(item[1:]) - 1]))
                    if item[:1] == b"="
                    else with_seq(entry, int(item))
                    for entry, item in zip(entries, answer.split(b",")[1:], strict=True)
                ]
            )
        return results

    def _run_by_ids(
        self, script: Lua, what: str, now_ms: int, message_ids: Sequence[str], batch_max: int
    ) -> int:
        """A script taking (now_ms, ids...), run on ``batch_max`` ids at a time: each batch is
        atomic, and no call holds the server for long. Returns the sum of the answers."""
        ids = list(dict.fromkeys(message_ids))
        return sum(
            int(self._run(script, what, [now_ms, *ids[i : i + batch_max]]))
            for i in range(0, len(ids), batch_max)
        )

    def _run(self, script: Lua, what: str, args: Sequence[Any]) -> Any:
        self._check_open()
        with self._errors(what):
            if script.allow_oom is not None and self._allow_oom:
                try:
                    return script.allow_oom(keys=[], args=[self.prefix, *args])
                except rex.ResponseError as e:
                    if "Error compiling script" not in str(e):
                        raise
                    self._allow_oom = False  # Redis 6: no script flags
            return script.plain(keys=[], args=[self.prefix, *args])

    def _check_open(self) -> None:
        if self._closed:
            raise OutboxUnavailableError(f"redis outbox {self._where} is closed")

    def _entry_key(self, message_id: str) -> str:
        return f"{self.prefix}:e:{message_id}"

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """The one place redis-py's errors become the outbox's."""
        try:
            yield
        except rex.RedisError as e:
            raise translated_error(e, f"{self._where} {what}") from e
