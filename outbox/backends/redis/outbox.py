"""The Redis outbox (redis-py, sync client): entries in one Redis (one server, the master
Sentinel names, or a Redis Cluster), shared by any number of sidecars.

URLs (urls.py): ``redis://[:password@]host:port/db?prefix=NAME`` (``rediss://`` for TLS),
``redis+sentinel://[:password@]host:port[,host:port…]/SERVICE[/db]?prefix=NAME`` and
``redis+cluster://[:password@]host:port[,host:port…]/?prefix=NAME``. ``prefix`` (default
``rocketbox:outbox``) starts every key; on a Cluster it is hash-tagged (``{rocketbox:outbox}``)
so that all of the outbox's keys are in one slot (keys.py has the layout). Every operation is one
atomic Lua script (scripts.py) given every key it touches (runner.py), so claims lease entries
exclusively across sidecars and the bound holds for all writers together.

What ``put`` returning (the sidecar's SPOOLED) means:
- One server: Redis executed the write; what survives is its persistence policy's:
  ``appendfsync always`` a crash of the server, ``everysec`` (AOF's default) all but about the
  last second, no AOF (this machine's default, ``--appendonly no --save ""``) a SIGKILL of the
  sidecar or the loss of its pod, not a restart of Redis.
- Sentinel or Cluster, without ``wait_replicas``: the master executed it. Replication is
  asynchronous, so a failover loses what the promoted replica had not received, and what the old
  master still takes until it is demoted (a client keeps its connections to it meanwhile: up to
  a readiness check, below, or seconds). Every kind of write: a spooled entry is lost; a claim or
  a delivered mark lost makes the entry PENDING again, so it is sent twice (an entry claimed
  over an expired lease is checked in the broker's index first; one whose claim was lost is not).
- With ``wait_replicas=N`` (``&wait_timeout_ms=T``): the master executed it and N replicas
  acknowledged receiving it (WAIT; in their memory, kept as their own persistence keeps it). A
  failover that promotes one of them keeps it; Sentinel and Cluster promote the most up to date
  replica they reach, so N = the number of replicas covers any promotion (Redis does not make
  WAIT strongly consistent: a promoted replica that had not acknowledged loses it). Fewer
  acknowledgements within T: OutboxUnavailableError (not SPOOLED; the master may keep the entry,
  and a put again with the same message id is idempotent). Claims and settlements wait too: no
  failover hands a claimed entry out again or makes a delivered one PENDING; an entry whose
  delivered mark failed comes back after its lease, maybe stored, checked in the index first.
- Cluster: one master (and its replicas) holds the outbox's slot. A reshard that moves the slot
  loses nothing (MIGRATE is synchronous) and the client follows it, but the outbox's scripts are
  refused (TRYAGAIN) while its keys move: tried again for runner.CLUSTER_RETRY_S, then
  OutboxUnavailableError.
On Sentinel, ``check_writable`` (the sidecar's readiness, every second) asks the Sentinels for the
master first: connections to a master they no longer name are dropped then.

Group commit: concurrent ``put`` callers, and the requests of a ``put_groups``, share one script
call (outbox/group_commit.py, puts.py), which checks and writes every request of the batch, each
all-or-nothing on its own. ``mark_delivered_many`` is one script call (per
``DELIVER_BATCH_MAX`` items).

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
from collections.abc import Iterator, Sequence
from typing import Any, cast

import redis.exceptions as rex

from outbox.backends.redis import bulk_and_read_scripts as bulk_scripts
from outbox.backends.redis import scripts as redis_scripts
from outbox.backends.redis import settle_scripts
from outbox.backends.redis.connection import open_client, translated_error
from outbox.backends.redis.fields import entry_from_hash, group_name, group_of_name, pairs
from outbox.backends.redis.keys import KeyHints, entry_key, group_key
from outbox.backends.redis.puts import put_call, put_results
from outbox.backends.redis.runner import Lua, ScriptRunner
from outbox.backends.redis.urls import RedisUrl, parse_url
from outbox.contract_checks import (
    check_claim_args,
    check_owner_prefix,
    check_purge_state,
    check_put_entries,
)
from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry, OutboxLimits, OutboxStats
from outbox.errors import OutboxError, OutboxUnavailableError
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
# Script calls of one claim_due (its rounds: outbox.claim_due), and the P:due members one call
# looks at, at most.
CLAIM_ROUNDS_MAX = 8
CLAIM_CANDIDATES_MAX = CLAIM_BATCH_MAX


class RedisOutbox(Outbox):
    name = "redis"
    features = OutboxFeatures(shared_by_sidecars=True, survives_process_kill=True)

    def __init__(self, url: RedisUrl, limits: OutboxLimits) -> None:
        super().__init__(limits)
        self.url = url
        self.prefix = url.prefix
        self._base = url.key_base
        self._where = url.where
        self._client, self._close_client = open_client(url)
        self._runner = ScriptRunner(self._client, url)
        self._hints = KeyHints(url.key_base)
        self._closed = False
        script = ScriptRunner.script
        self._put_script = script(redis_scripts.PUT)
        self._claim_script = script(redis_scripts.CLAIM, allow_oom=True)
        self._delivered_script = script(settle_scripts.DELIVERED, allow_oom=True)
        self._bury_script = script(settle_scripts.BURY, allow_oom=True)
        self._unlease_script = script(settle_scripts.UNLEASE, allow_oom=True)
        self._expire_script = script(settle_scripts.EXPIRE_LEASES, allow_oom=True)
        self._requeue_script = script(bulk_scripts.REQUEUE)
        self._retry_now_script = script(bulk_scripts.RETRY_NOW, allow_oom=True)
        self._purge_script = script(bulk_scripts.PURGE, allow_oom=True)
        self._scan_script = script(bulk_scripts.SCAN, writes=False)
        # It writes only to build P:groups once: nothing a failover could make unsafe.
        self._pending_groups_script = script(bulk_scripts.PENDING_GROUPS, writes=False)
        self._stats_script = script(bulk_scripts.STATS, writes=False)
        self._committer = GroupCommitter(self._commit, name=f"redis-outbox-put:{url.prefix}")

    @classmethod
    def from_url(cls, url: str, limits: OutboxLimits, *, create: bool = True) -> RedisOutbox:
        # A Redis outbox has no schema: its keys appear with its first entry and go with its last,
        # so a prefix with no keys is an empty outbox, never "not found" (``create`` changes
        # nothing; opening writes nothing either way).
        del create
        return cls(parse_url(url), limits)

    @classmethod
    def label(cls, url: str) -> str:
        """The hosts and database, and the key prefix: two prefixes on one Redis are two
        outboxes."""
        return f"{super().label(url)}?prefix={parse_url(url).prefix}"

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
            return bool(self._client.exists(self._group_key(group_name(topic, message_group))))

    def pending_groups(self) -> set[tuple[str, str]]:
        names = self._run(self._pending_groups_script, "pending_groups", [])
        return {group_of_name(name.decode()) for name in names}

    def claim_due(self, now_ms: int, limit: int, lease_ms: int, owner: str) -> list[OutboxEntry]:
        check_claim_args(lease_ms, owner)
        if limit < 1:
            return []
        limit = min(limit, CLAIM_BATCH_MAX)
        claimed: list[OutboxEntry] = []
        declared = self._runner.declared
        # On a Cluster, rounds (the CLAIM script): one finds the due entries' keys (those the
        # last claim found after what it took are declared at once), the next claims them (a
        # third for FIFO entries, whose groups' keys it finds). Other claimers take entries
        # meanwhile: a round that claimed nothing looks further down P:due next time.
        wanted = dict.fromkeys(self._hints.claim_keys_now()) if declared else {}
        candidates = min(2 * limit, CLAIM_CANDIDATES_MAX) if declared else limit
        after: list[bytes] = []
        for round_ in range(CLAIM_ROUNDS_MAX):
            args = [now_ms, limit - len(claimed), candidates, now_ms + lease_ms, owner]
            batch, dropped, keys, nexts, after = self._run(
                self._claim_script, "claim_due", args, list(wanted)
            )
            entries = [entry_from_hash(pairs(flat)) for flat in batch]
            claimed += entries
            if declared:
                self._hints.claimed(
                    [(e.message_id, _group(e), nxt and nxt.decode())
                     for e, nxt in zip(entries, nexts, strict=True)]
                )  # fmt: skip
            if len(claimed) >= limit or not (dropped or keys):
                break
            wanted.update(dict.fromkeys(key.decode() for key in keys))
            if not batch and round_ > 0:
                candidates = min(candidates * 2, CLAIM_CANDIDATES_MAX)
        if declared:
            self._hints.claim_keys = after
        return claimed

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
            batch = deliveries[start : start + DELIVER_BATCH_MAX]
            args: list[Any] = []
            for message_id, r in batch:
                args += [message_id, r.queue_id, r.queue_offset, r.delivered_ms, int(r.durable)]
            keys = self._settle_keys([message_id for message_id, _ in batch])
            reply, made_due = self._run(self._delivered_script, "mark_delivered", args, keys)
            self._hints.made_due(made_due)
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
        keys = self._settle_keys([message_id])
        return bool(self._run(self._unlease_script, "reschedule", args, keys))

    def bury(self, message_id: str, owner: str, error: str, now_ms: int) -> bool:
        args = [message_id, owner, error, now_ms]
        keys = self._settle_keys([message_id])
        buried, made_due = self._run(self._bury_script, "bury", args, keys)
        self._hints.made_due(made_due)
        return bool(buried)

    def release(self, message_id: str, owner: str) -> bool:
        args = [message_id, owner, ""]
        keys = self._settle_keys([message_id])
        return bool(self._run(self._unlease_script, "release", args, keys))

    def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        if message_ids is not None:
            return self._run_by_ids(
                self._requeue_script, "requeue", now_ms, message_ids, REQUEUE_BATCH_MAX
            )
        requeued = 0
        while True:
            with self._errors("requeue"):
                dead = self._client.zrange(f"{self._base}:s:DEAD", 0, REQUEUE_BATCH_MAX - 1)
            if not dead:
                return requeued
            ids = [m.decode() for m in cast(list[bytes], dead)]
            requeued += self._run_by_ids(
                self._requeue_script, "requeue", now_ms, ids, REQUEUE_BATCH_MAX
            )

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
                    f"{self._base}:s:PENDING",
                    f"({after_seq}",
                    "+inf",
                    start=0,
                    num=RETRY_NOW_BATCH_MAX,
                    withscores=True,
                )
            pairs = cast(list[tuple[bytes, float]], page)
            if pairs:
                ids = [member.decode() for member, _ in pairs]
                changed += self._run_by_ids(
                    self._retry_now_script, "retry_now", now_ms, ids, RETRY_NOW_BATCH_MAX
                )
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
        """A real write: a replica (READONLY), a full server (OOM), a dead link, or replicas
        that do not acknowledge it (wait_replicas) all fail it. On Sentinel it asks for the
        master first (module docstring)."""
        self._check_open()
        with self._errors("check_writable"):
            self._runner.refresh_master()
            self._runner.write("SET", f"{self._base}:probe", b"1")

    def close(self) -> None:
        if self._closed:
            return
        self._committer.close()
        self._closed = True
        self._close_client()

    # -- internals ----------------------------------------------------------------------------

    def _commit(self, requests: Sequence[Sequence[OutboxEntry]]) -> list[Result]:
        base = self._base if self._runner.declared else None
        keys, args = put_call(base, self.limits, requests)
        return put_results(self.limits, requests, self._run(self._put_script, "put", args, keys))

    def _run_by_ids(
        self, script: Lua, what: str, now_ms: int, message_ids: Sequence[str], batch_max: int
    ) -> int:
        """A script taking (now_ms, ids...), run on ``batch_max`` ids at a time: each batch is
        atomic, and no call holds the server for long. Returns the sum of the answers."""
        ids = list(dict.fromkeys(message_ids))
        total = 0
        for i in range(0, len(ids), batch_max):
            batch = ids[i : i + batch_max]
            keys = [self._entry_key(message_id) for message_id in batch]
            total += int(self._run(script, what, [now_ms, *batch], keys))
        return total

    def _run(self, script: Lua, what: str, args: Sequence[Any], keys: Sequence[str] = ()) -> Any:
        """The script's result (runner.py: the keys it finds on the way are declared as it asks,
        and with wait_replicas its writes are waited for)."""
        self._check_open()
        with self._errors(what):
            return self._runner.run(script, keys, args)

    def _check_open(self) -> None:
        if self._closed:
            raise OutboxUnavailableError(f"redis outbox {self._where} is closed")

    def _settle_keys(self, message_ids: Sequence[str]) -> list[str]:
        """The keys a settlement of these claimed entries declares (a Cluster): theirs, and
        those their claim found (their groups', the entries after them)."""
        if not self._runner.declared:
            return []
        return [*(self._entry_key(m) for m in message_ids), *self._hints.settled(message_ids)]

    def _entry_key(self, message_id: str) -> str:
        return entry_key(self._base, message_id)

    def _group_key(self, name: str) -> str:
        return group_key(self._base, name)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """The one place redis-py's errors become the outbox's."""
        try:
            yield
        except (rex.RedisError, rex.RedisClusterException) as e:
            raise translated_error(e, f"{self._where} {what}", self.url.topology) from e


def _group(entry: OutboxEntry) -> str | None:
    """The group name of a FIFO entry's P:g key (fields.group_name), or None."""
    return group_name(*entry.fifo_group) if entry.fifo_group is not None else None
