"""The RocksDB outbox (rocksdict): one local database directory, one process.

URL ``rocksdb:///abs/path`` or ``rocksdb://./relative/path``; ``?statistics=true`` turns on
RocksDB's tickers (``RocksDBOutbox.ticker``); ``?read_only=true`` opens an existing outbox without
its lock, beside the process that holds it: a snapshot as of the open (WAL included) for operators'
reads, on which every write fails with OutboxUnavailableError; ``?reserve_bytes=N`` sizes the
disk reserve (below; default ``RESERVE_BYTES_DEFAULT``, 0: none; less than a reopen needs is
refused); ``?write_buffer_bytes=N`` sizes RocksDB's two write buffers (default
``WRITE_BUFFER_BYTES_DEFAULT``), which bound what a reopen writes and so the least reserve.
Keys and why they stay fast: outbox/backends/rocksdb/layout.py.

Bodies apart: a put writes each body once, under its own key; every later change of the entry
(claim, reschedule, release, bury, expire_leases, requeue, retry_now) rewrites only its state
value, a few hundred bytes whatever the body's size, and a delivery or purge deletes the body.
An outbox written by the previous layout (entry values of format 1 or 2, the body inline) is
read as it is, and each entry moves to the new layout at its first change: its body is written
to its own key then, once. Nothing is migrated at open (an open writes nothing: it must work on
a full disk too); tombstones and entries nobody changes keep the old format, still read.

Durability (the WAL is one sequence: an fsync makes every record before it durable too):
- ``put`` returns once its entries are in the write-ahead log and the log is fsynced: they survive
  SIGKILL of the sidecar, and a kernel crash or power loss as far as the disk honours fsync.
- ``claim_due`` returns once its leases are fsynced too (one fsync a claim batch, outside the
  lock, after the write), before any claimed entry can be sent. So after a power cut an entry
  that may have been sent comes back under its dead holder's lease, which the first claim ends
  with ``maybe_stored``: the resend checks the broker's index first. Without that fsync, a cut
  brought claimed entries back as plain PENDING, resent unchecked: duplicates.
- Every other change (reschedule, release, mark_delivered, bury, expire_leases, requeue,
  retry_now, purge) goes to the WAL without an fsync of its own: it survives SIGKILL of the
  sidecar (the kernel has the bytes) but not a kernel crash or power cut, unless a later put or
  claim synced it. What a cut can take is harmless: each of these changes a leased entry, whose
  lease was synced, or an operator's choice to do again. A lost tombstone (mark_delivered) brings
  its entry back under the dead lease, so ``maybe_stored``: the index check finds it stored and
  marks it delivered, no duplicate (a broker without that query, a plain RocketMQ, gets it once
  more: a duplicate the reconciliation counts, as for any entry sent just before the cut; an
  fsync per resend batch would not close that window, only narrow it). A lost reschedule or
  release likewise comes back maybe stored; a lost burial is sent once more and buried again.
  Never a loss.
- A claim whose fsync fails raises although its leases are written: its entries wait for their
  lease to end and are then claimed ``maybe_stored``, as after a crash.
- Loss of the pod: the outbox survives only on a persistent volume.
- Loss of the server or its disk: nothing survives. Use Redis or MySQL when that matters.
- One process: RocksDB locks its directory (the LOCK file), and a second opener, in this process
  or another, gets OutboxUnavailableError. The threads of the process share one instance.

Group commit: concurrent ``put`` callers, and the requests of a ``put_groups``, hand their entries
to one committer thread (outbox/group_commit.py) that stages all of them in one WriteBatch. The
batch is written, and so becomes visible, under the lock; the WAL fsync runs after the lock is
released, so claims never wait for the disk; then the callers' ``put`` calls return. Should that
fsync fail, the callers are told so although their entries are in the outbox: they may be sent
twice, never lost. ``mark_delivered_many`` is one WriteBatch, as ``mark_delivered`` is.

A requeued FIFO entry older than its group's leased head is due when that lease ends rather than
at once, so that the group never has two entries in flight.

In memory, rebuilt from the indexes at open (the database is the truth): the counters of the
bound and of stats, each FIFO group's head, the leases, the index floors.

Leases at open: one process holds the directory, so every lease found at open is a dead
process's, whatever its owner. Each ends at once, in memory (an open writes nothing: it must
work on a full disk too): a claim takes the entry at once, as over any expired lease, so with
``maybe_stored`` (outbox/outbox.py). Until then ``get`` and ``scan`` still show the dead lease;
``expire_leases`` writes every one of them down (and counts them), whatever the prefix.

A full disk (outbox/disk_reserve.py says why and what the limits are): a write that fails for
want of space releases the reserve file, reopens the database in its room (RocksDB's log stays
failed until then) and is tried once more; from then on ``put`` and ``check_writable`` raise
OutboxNoSpaceError until ``resume_free_bytes`` are free again and the reserve is made again,
while claims, reschedules, burials and tombstones go on. A put's write that fails so is not
retried: its callers are answered OutboxNoSpaceError, and none of its entries is in the outbox
(the failed log record is cut at the reopen), unless it was the WAL fsync after the write that
failed: then they may be, as above.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs, urlsplit

from outbox.backends.rocksdb.bulk_changes import RocksDBBulkChanges
from outbox.backends.rocksdb.layout import (
    CREATED,
    DUE,
    STATE,
    STATE_CODE,
    STATE_VALUE,
    TOP,
    U64,
    expect,
    group_key,
    group_of_key,
    state_key,
    state_value,
    u64,
)
from outbox.backends.rocksdb.puts import RocksDBPuts
from outbox.backends.rocksdb.state import DEAD_LEASE_UNTIL_MS
from outbox.backends.rocksdb.store import (
    URL_OPTIONS,
    retried_after_no_space,
    rocksdb_errors,
    rocksdb_path,
)
from outbox.contract_checks import (
    buried_entry,
    check_claim_args,
    check_owner_prefix,
    claimed_entry,
    lease_ended,
    released_entry,
    rescheduled_entry,
)
from outbox.disk_reserve import (
    RESERVE_BYTES_DEFAULT,
    WRITE_BUFFER_BYTES_DEFAULT,
    check_sizes,
)
from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry, OutboxLimits, OutboxStats
from outbox.errors import OutboxConfigError, OutboxNotFoundError
from outbox.factory import redact
from outbox.outbox import OutboxFeatures

CLAIM_BATCH_MAX = 10_000


class RocksDBOutbox(RocksDBPuts, RocksDBBulkChanges):
    name = "rocksdb"
    features = OutboxFeatures(shared_by_sidecars=False, survives_process_kill=True)

    @classmethod
    def from_url(cls, url: str, limits: OutboxLimits, *, create: bool = True) -> RocksDBOutbox:
        path = rocksdb_path(url)
        options = parse_qs(urlsplit(url).query, keep_blank_values=True)
        unknown = set(options) - set(URL_OPTIONS)
        if unknown:
            raise OutboxConfigError(
                f"outbox URL {redact(url)!r}: unknown options {sorted(unknown)} "
                f"(known: {', '.join(URL_OPTIONS)})"
            )
        flags = {}
        for name in ("statistics", "read_only"):
            value = options.get(name, ["false"])[-1].lower()
            if value not in ("true", "false", "1", "0"):
                raise OutboxConfigError(f"outbox URL {redact(url)!r}: {name} must be true or false")
            flags[name] = value in ("true", "1")
        sizes = {}
        for name, default in (
            ("reserve_bytes", RESERVE_BYTES_DEFAULT),
            ("write_buffer_bytes", WRITE_BUFFER_BYTES_DEFAULT),
        ):
            value = options.get(name, [str(default)])[-1]
            if not value.isdigit():
                raise OutboxConfigError(
                    f"outbox URL {redact(url)!r}: {name} must be a whole number of bytes "
                    f">= 0, got {value!r}"
                )
            sizes[name] = int(value)
        try:
            check_sizes(sizes["reserve_bytes"], sizes["write_buffer_bytes"])
        except OutboxConfigError as e:
            raise OutboxConfigError(f"outbox URL {redact(url)!r}: {e}") from None
        if not create and not (path / "CURRENT").is_file():
            raise OutboxNotFoundError(
                f"no such outbox: no RocksDB database at {path} (only the sidecar creates its "
                "outbox; is the path right?)"
            )
        return cls(
            path,
            limits,
            statistics=flags["statistics"],
            read_only=flags["read_only"],
            reserve_bytes=sizes["reserve_bytes"],
            write_buffer_bytes=sizes["write_buffer_bytes"],
        )

    def get(self, message_id: str) -> OutboxEntry | None:
        # Under the lock: a full disk may reopen the database under a reader.
        with self._lock, rocksdb_errors(self.path):
            self._check_open()
            return self._txn().get(message_id)

    def has_pending_group(self, topic: str, message_group: str) -> bool:
        prefix = group_key(topic, message_group)
        with self._lock:
            return prefix in self._state.heads

    def pending_groups(self) -> set[tuple[str, str]]:
        # Every group with PENDING entries has a head, kept in memory: no read at all.
        with self._lock:
            return {group_of_key(prefix) for prefix in self._state.heads}

    @retried_after_no_space
    def claim_due(self, now_ms: int, limit: int, lease_ms: int, owner: str) -> list[OutboxEntry]:
        check_claim_args(lease_ms, owner)
        if limit < 1:
            return []
        limit = min(limit, CLAIM_BATCH_MAX)
        with self._lock, rocksdb_errors(self.path):
            self._check_open()
            db = self._db
            txn = self._txn()
            upper = DUE + u64(now_ms + 1)
            due = self._items(DUE, DUE, upper, limit)
            expired = self._expired_leases(txn, now_ms, limit)
            # Soonest first across both: the unleased by next send time, the rest by lease end.
            from_due = [
                (U64.unpack_from(k, 1)[0], U64.unpack_from(k, 9)[0], v.decode()) for k, v in due
            ]
            picks = sorted(from_due + expired)[:limit]
            picked = set(picks)
            for item in expired:
                if item not in picked:
                    heapq.heappush(self._state.lease_heap, item)
            taken_due = [
                key for (key, _), item in zip(due, from_due, strict=True) if item in picked
            ]
            assert taken_due == [key for key, _ in due[: len(taken_due)]], "a prefix of the scan"
            claimed = []
            for _, _, message_id in picks:
                old = expect(txn.get(message_id), EntryState.PENDING, message_id)
                assert self._is_candidate(old), old
                new = claimed_entry(old, owner, now_ms + lease_ms)
                txn.put(state_key(EntryState.PENDING, new.seq), state_value(new))
                txn.put_entry(new)
                self._state.lease(new)
                claimed.append(new)
            if taken_due:
                txn.delete_stretch(taken_due[0], taken_due[-1])
            self._write(txn)
            if len(taken_due) == len(due) < limit:
                self._raise_floor(DUE, upper)  # every live due key below upper was taken
        if claimed and self.sync_claims:
            # Durable before any of them is sent (outbox.py: durability). Outside the lock, as
            # a put's fsync: other claims and deliveries go on meanwhile.
            with rocksdb_errors(self.path):
                self._flush_wal(db)
        return claimed

    @retried_after_no_space
    def expire_leases(self, owner_prefix: str, now_ms: int) -> int:
        check_owner_prefix(owner_prefix)
        u64(now_ms)
        with self._lock, rocksdb_errors(self.path):
            self._check_open()
            txn = self._txn()
            ended = 0
            # The leases are in memory: as many as resends in flight, and those found at open.
            for message_id, (lease_until_ms, _) in list(self._state.leases.items()):
                old = expect(txn.get(message_id), EntryState.PENDING, message_id)
                owner = old.lease_owner or ""
                if lease_until_ms == DEAD_LEASE_UNTIL_MS or owner.startswith(owner_prefix):
                    self._replace_pending(txn, old, lease_ended(old))
                    ended += 1
            if ended:
                self._write(txn)
            self._dead_leases.clear()
            return ended

    def mark_delivered(self, message_id: str, receipt: DeliveryReceipt) -> bool:
        (delivered,) = self.mark_delivered_many([(message_id, receipt)])
        return delivered

    @retried_after_no_space
    def mark_delivered_many(self, deliveries: Sequence[tuple[str, DeliveryReceipt]]) -> list[bool]:
        for _, receipt in deliveries:
            u64(receipt.delivered_ms)
        answers = [False] * len(deliveries)
        with self._lock, rocksdb_errors(self.path):
            self._check_open()
            txn = self._txn()
            txn.prefetch(message_id for message_id, _ in deliveries)
            seqs = [e.seq if (e := txn.get(m)) is not None else 0 for m, _ in deliveries]
            # In seq order (_leave_pending's rule for a batch of several), the first of two
            # items with one id first: it is the one that delivers.
            order = sorted(range(len(deliveries)), key=lambda i: (seqs[i], i))
            for i in order:
                message_id, receipt = deliveries[i]
                old = txn.get(message_id)
                if old is None or old.state is not EntryState.PENDING:
                    continue
                self._leave_pending(txn, old, old.delivered(receipt))
                answers[i] = True
            if any(answers):
                self._write(txn)
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
        u64(next_send_time_ms)
        return self._settle_leased(
            message_id,
            owner,
            lambda old: rescheduled_entry(old, next_send_time_ms, error, maybe_stored),
        )

    def bury(self, message_id: str, owner: str, error: str, now_ms: int) -> bool:
        u64(now_ms)
        return self._settle_leased(message_id, owner, lambda old: buried_entry(old, error, now_ms))

    def release(self, message_id: str, owner: str) -> bool:
        return self._settle_leased(message_id, owner, released_entry)

    @retried_after_no_space
    def _settle_leased(
        self, message_id: str, owner: str, settle: Callable[[OutboxEntry], OutboxEntry]
    ) -> bool:
        """Replace ``owner``'s leased entry with ``settle(entry)`` in one write; False when the
        lease is not (or no longer) ``owner``'s."""
        with self._lock, rocksdb_errors(self.path):
            self._check_open()
            txn = self._txn()
            old = self._owned(txn, message_id, owner)
            if old is None:
                return False
            new = settle(old)
            if new.state is EntryState.PENDING:
                self._replace_pending(txn, old, new)
            else:
                self._leave_pending(txn, old, new)
            self._write(txn)
            return True

    def stats(self, now_ms: int) -> OutboxStats:
        with self._lock, rocksdb_errors(self.path):
            self._check_open()
            state = self._state
            oldest = self._items(CREATED, CREATED, CREATED + TOP, 1)
            soonest = [U64.unpack_from(key, 1)[0] for key, _ in self._items(DUE, DUE, DUE + TOP, 1)]
            heap = state.lease_heap
            while heap and not state.live_lease(heap[0]):
                heapq.heappop(heap)
            if heap:
                lease_until_ms, _, message_id = heap[0]
                if lease_until_ms == DEAD_LEASE_UNTIL_MS:
                    # Claimable now, as it was when its dead holder took it.
                    dead = self._txn().get(message_id)
                    assert dead is not None, message_id
                    lease_until_ms = dead.next_send_time_ms
                soonest.append(lease_until_ms)
            return OutboxStats(
                pending=state.pending,
                in_flight=sum(1 for until, _ in state.leases.values() if until > now_ms),
                delivered=state.delivered,
                dead=state.dead,
                bytes=state.body_bytes,
                oldest_pending_created_ms=U64.unpack_from(oldest[0][0], 1)[0] if oldest else None,
                next_due_ms=min(soonest, default=None),
            )

    def scan(self, state: EntryState | None, after_seq: int, limit: int) -> list[OutboxEntry]:
        if limit < 1:
            return []
        codes = [STATE_CODE[state]] if state is not None else list(STATE_CODE.values())
        start = u64(max(after_seq + 1, 0))
        with self._lock, rocksdb_errors(self.path):
            self._check_open()
            found = []
            for code in codes:
                prefix = STATE + code
                found += self._items(prefix, prefix + start, prefix + TOP, limit)
            found.sort(key=lambda kv: kv[0][2:])  # by seq, across the states
            txn = self._txn()
            page = []
            for key, value in found[:limit]:
                entry = txn.get(value[STATE_VALUE.size :].decode())
                assert entry is not None, key
                page.append(entry)
            return page
