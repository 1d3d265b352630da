"""The RocksDB outbox (rocksdict): one local database directory, one process.

URL ``rocksdb:///abs/path`` or ``rocksdb://./relative/path``; ``?statistics=true`` turns on
RocksDB's tickers (``RocksDBOutbox.ticker``); ``?read_only=true`` opens an existing outbox without
its lock, beside the process that holds it: a snapshot as of the open (WAL included) for operators'
reads, on which every write fails with OutboxUnavailableError; ``?reserve_bytes=N`` sizes the
disk reserve (below; default ``RESERVE_BYTES_DEFAULT``, 0: none). Keys and why they stay fast:
outbox/backends/rocksdb/layout.py.

Durability:
- ``put`` returns once its entries are in the write-ahead log and the log is fsynced: they survive
  SIGKILL of the sidecar, and a kernel crash or power loss as far as the disk honours fsync.
- Every other change (claim, reschedule, release, mark_delivered, bury, requeue, purge) goes to the
  WAL without an fsync of its own: it survives SIGKILL of the sidecar (the kernel has the bytes)
  but not a kernel crash. Losing one is harmless: a lost lease or reschedule makes the entry due
  again; a lost tombstone makes the entry be sent once more, a duplicate the reconciliation
  counts, never a loss. The next put's fsync makes them durable too.
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

import contextlib
import functools
import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar
from urllib.parse import parse_qs, urlsplit

import rocksdict

from outbox.backends.rocksdb.layout import (
    CHANGED,
    CREATED,
    DEAD_LEASE_UNTIL_MS,
    DUE,
    ENTRY,
    GROUP,
    PENDING_STATE,
    PROBE_KEY,
    SEQ_KEY,
    STATE,
    STATE_CODE,
    STATE_VALUE,
    TOP,
    U64,
    State,
    Txn,
    changed_key,
    created_key,
    decode_entry,
    due_key,
    expect,
    group_key,
    group_of_key,
    group_prefix,
    index_items,
    load_state,
    state_key,
    state_value,
    u64,
)
from outbox.contract_checks import (
    buried_entry,
    check_claim_args,
    check_owner_prefix,
    check_purge_state,
    check_put_entries,
    claimed_entry,
    lease_ended,
    may_retry_now,
    released_entry,
    requeued_entry,
    rescheduled_entry,
    with_seq,
)
from outbox.disk_reserve import (
    RESERVE_BYTES_DEFAULT,
    SPACE_CHECK_INTERVAL_S,
    DiskReserve,
    is_no_space,
)
from outbox.entry import (
    DeliveryReceipt,
    EntryState,
    OutboxEntry,
    OutboxLimits,
    OutboxStats,
)
from outbox.errors import (
    OutboxConfigError,
    OutboxError,
    OutboxNoSpaceError,
    OutboxUnavailableError,
)
from outbox.factory import redact
from outbox.group_commit import GroupCommitter, Result
from outbox.outbox import Outbox

log = logging.getLogger(__name__)

CLAIM_BATCH_MAX = 10_000
PURGE_BATCH_MAX = 10_000
REQUEUE_BATCH_MAX = 1_000
RETRY_NOW_BATCH_MAX = 1_000
URL_OPTIONS = ("statistics", "read_only", "reserve_bytes")

P = ParamSpec("P")
T = TypeVar("T")


class _RetryAfterNoSpaceError(Exception):
    """A write failed for want of space and the reserve was released for it: try once more."""


def _retried_after_no_space(
    method: Callable[Concatenate[RocksDBOutbox, P], T],
) -> Callable[Concatenate[RocksDBOutbox, P], T]:
    """A method that writes, run once more when its write failed for want of space and the
    reserve was released for it (the second failure raises OutboxNoSpaceError). Each run
    starts from what the database holds: the failed one changed nothing."""

    @functools.wraps(method)
    def run(self: RocksDBOutbox, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except _RetryAfterNoSpaceError:
            return method(self, *args, **kwargs)

    return run


@contextlib.contextmanager
def _rocksdb_errors(path: Path) -> Iterator[None]:
    """The one place rocksdict's errors become OutboxUnavailableError."""
    try:
        yield
    except rocksdict.DbClosedError as e:
        raise OutboxUnavailableError(f"rocksdb outbox {path} is closed") from e
    except OSError as e:
        raise OutboxUnavailableError(f"rocksdb outbox {path}: {e}") from e
    except Exception as e:
        # rocksdict raises RocksDB's own errors (IO error, Corruption, lock held) as a bare
        # Exception; anything more specific is a bug of ours and must not pass as unavailability.
        if type(e) is not Exception:
            raise
        hint = " (RocksDB allows one process, one instance)" if "lock" in str(e).lower() else ""
        raise OutboxUnavailableError(f"rocksdb outbox {path}: {e}{hint}") from e


def rocksdb_path(url: str) -> Path:
    """The database directory a ``rocksdb://`` URL names."""
    parts = urlsplit(url)
    if parts.netloc == "" and parts.path.startswith("/") and parts.path != "/":
        return Path(parts.path)
    if parts.netloc == "." and parts.path not in ("", "/"):
        return Path("." + parts.path)
    raise OutboxConfigError(
        f"outbox URL {redact(url)!r}: want rocksdb:///absolute/path or rocksdb://./relative/path"
    )


class RocksDBOutbox(Outbox):
    name = "rocksdb"

    def __init__(
        self,
        path: Path,
        limits: OutboxLimits,
        *,
        statistics: bool = False,
        read_only: bool = False,
        reserve_bytes: int = RESERVE_BYTES_DEFAULT,
    ) -> None:
        super().__init__(limits)
        self.path = path
        self.read_only = read_only
        self._reserve = DiskReserve(path, reserve_bytes)
        # Why puts are refused for want of space (None: they are not), and when the free space
        # is next looked at; both under _space_lock, which is taken after _lock, never before.
        self._no_space: str | None = None
        self._next_space_check_s = 0.0
        self._space_lock = threading.Lock()
        # The leases found at the first open: (lease_until_ms, seq) by message id. Their holder
        # is gone; they stay ended should the database be reopened (a full disk).
        self._dead_leases: dict[str, tuple[int, int]] = {}
        self._options = rocksdict.Options(raw_mode=True)
        self._options.create_if_missing(not read_only)
        if statistics:
            self._options.enable_statistics()
        self._unsynced = rocksdict.WriteOptions()
        self._synced = rocksdict.WriteOptions()
        self._synced.sync = True
        self._lock = threading.Lock()
        self._closed = False
        # Set when a failed write left the database or its in-memory state unusable: it is
        # reopened (_check_open), no sooner than _next_reopen_s.
        self._broken = False
        self._next_reopen_s = 0.0
        with _rocksdb_errors(path):
            if not read_only:
                path.mkdir(parents=True, exist_ok=True)
            self._db = rocksdict.Rdict(str(path), self._options, access_type=self._access())
            try:
                self._state = self._load_state()
                if not read_only:
                    self._dead_leases = dict(self._state.leases)
                    for message_id in self._dead_leases:
                        self._state.end_lease(message_id)
                    self._make_reserve()
            except BaseException:
                self._db.close()  # give the directory's lock back
                raise
        self._committer = GroupCommitter(self._commit, name=f"rocksdb-outbox-put:{path.name}")
        log.info(
            "rocksdb outbox %s open: %d pending (%d under a lease its dead holder left), "
            "%d dead, %d delivered",
            path,
            self._state.pending,
            len(self._dead_leases),
            self._state.dead,
            self._state.delivered,
        )

    @classmethod
    def from_url(cls, url: str, limits: OutboxLimits) -> RocksDBOutbox:
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
        reserve = options.get("reserve_bytes", [str(RESERVE_BYTES_DEFAULT)])[-1]
        if not reserve.isdigit():
            raise OutboxConfigError(
                f"outbox URL {redact(url)!r}: reserve_bytes must be a whole number of bytes "
                f">= 0, got {reserve!r}"
            )
        return cls(
            path,
            limits,
            statistics=flags["statistics"],
            read_only=flags["read_only"],
            reserve_bytes=int(reserve),
        )

    # -- the contract -------------------------------------------------------------------------

    def put(self, entries: Sequence[OutboxEntry]) -> list[OutboxEntry]:
        return self._committer.put(entries, self._check_put)

    def put_groups(
        self, requests: Sequence[Sequence[OutboxEntry]]
    ) -> list[list[OutboxEntry] | OutboxError]:
        # Submitted together: up to GROUP_COMMIT_BATCH_MAX requests share one synced WriteBatch.
        return self._committer.put_groups(requests, self._check_put)

    def _check_put(self, entries: Sequence[OutboxEntry]) -> None:
        check_put_entries(entries)
        for entry in entries:
            group_prefix(entry)  # refuse over-long names here rather than fail the whole batch

    def get(self, message_id: str) -> OutboxEntry | None:
        # Under the lock: a full disk may reopen the database under a reader.
        with self._lock, _rocksdb_errors(self.path):
            self._check_open()
            raw = self._db.get(ENTRY + message_id.encode())
        return None if raw is None else decode_entry(raw)

    def has_pending_group(self, topic: str, message_group: str) -> bool:
        prefix = group_key(topic, message_group)
        with self._lock:
            return prefix in self._state.heads

    def pending_groups(self) -> set[tuple[str, str]]:
        # Every group with PENDING entries has a head, kept in memory: no read at all.
        with self._lock:
            return {group_of_key(prefix) for prefix in self._state.heads}

    @_retried_after_no_space
    def claim_due(self, now_ms: int, limit: int, lease_ms: int, owner: str) -> list[OutboxEntry]:
        check_claim_args(lease_ms, owner)
        if limit < 1:
            return []
        limit = min(limit, CLAIM_BATCH_MAX)
        with self._lock, _rocksdb_errors(self.path):
            self._check_open()
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
            return claimed

    @_retried_after_no_space
    def expire_leases(self, owner_prefix: str, now_ms: int) -> int:
        check_owner_prefix(owner_prefix)
        u64(now_ms)
        with self._lock, _rocksdb_errors(self.path):
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

    @_retried_after_no_space
    def mark_delivered_many(self, deliveries: Sequence[tuple[str, DeliveryReceipt]]) -> list[bool]:
        for _, receipt in deliveries:
            u64(receipt.delivered_ms)
        answers = [False] * len(deliveries)
        with self._lock, _rocksdb_errors(self.path):
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

    @_retried_after_no_space
    def _settle_leased(
        self, message_id: str, owner: str, settle: Callable[[OutboxEntry], OutboxEntry]
    ) -> bool:
        """Replace ``owner``'s leased entry with ``settle(entry)`` in one write; False when the
        lease is not (or no longer) ``owner``'s."""
        with self._lock, _rocksdb_errors(self.path):
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

    def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        u64(now_ms)
        if message_ids is not None:
            return _listed_in_batches(
                message_ids, REQUEUE_BATCH_MAX, lambda ids: self._requeue_batch(ids, now_ms)
            )
        requeued = 0
        dead = STATE + STATE_CODE[EntryState.DEAD]
        while True:
            with self._lock, _rocksdb_errors(self.path):
                self._check_open()
                found = self._items(dead, dead, dead + TOP, REQUEUE_BATCH_MAX)
            ids = [value[STATE_VALUE.size :].decode() for _, value in found]
            requeued += self._requeue_batch(ids, now_ms)
            if len(found) < REQUEUE_BATCH_MAX:
                return requeued

    def retry_now(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        u64(now_ms)
        if message_ids is not None:
            return _listed_in_batches(
                message_ids, RETRY_NOW_BATCH_MAX, lambda ids: self._retry_now_batch(ids, now_ms)
            )
        # Every PENDING entry, page by page in seq order: retry_now leaves the index as it is.
        changed = 0
        after_seq = 0
        while True:
            with self._lock, _rocksdb_errors(self.path):
                self._check_open()
                found = self._items(
                    PENDING_STATE,
                    PENDING_STATE + u64(after_seq + 1),
                    PENDING_STATE + TOP,
                    RETRY_NOW_BATCH_MAX,
                )
            if found:
                ids = [value[STATE_VALUE.size :].decode() for _, value in found]
                changed += self._retry_now_batch(ids, now_ms)
                after_seq = U64.unpack_from(found[-1][0], len(PENDING_STATE))[0]
            if len(found) < RETRY_NOW_BATCH_MAX:
                return changed

    @_retried_after_no_space
    def purge(self, state: EntryState, before_ms: int) -> int:
        check_purge_state(state)
        if before_ms <= 0:
            return 0
        by_change = CHANGED + STATE_CODE[state]
        purged = 0
        while True:
            with self._lock, _rocksdb_errors(self.path):
                self._check_open()
                found = self._items(
                    by_change, by_change, by_change + u64(before_ms), PURGE_BATCH_MAX
                )
                if not found:
                    return purged
                txn = self._txn()
                for _, message_id in found:
                    entry = expect(txn.get(message_id.decode()), state, message_id)
                    txn.delete_entry(entry.message_id)
                    txn.delete(state_key(state, entry.seq))
                    if state is EntryState.DEAD:
                        self._state.dead -= 1
                        self._state.body_bytes -= entry.body_bytes
                    else:
                        self._state.delivered -= 1
                txn.delete_stretch(found[0][0], found[-1][0])
                self._write(txn)
                purged += len(found)
            if len(found) < PURGE_BATCH_MAX:
                return purged

    def stats(self, now_ms: int) -> OutboxStats:
        with self._lock, _rocksdb_errors(self.path):
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
        with self._lock, _rocksdb_errors(self.path):
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

    def check_writable(self) -> None:
        refusal = self._space_refusal()
        if refusal is not None:
            raise refusal
        with self._lock, _rocksdb_errors(self.path):
            self._check_open()
            db = self._db
        try:
            # Outside the lock: claims do not wait for this fsync.
            with _rocksdb_errors(self.path):
                db.put(PROBE_KEY, b"", self._synced)
        except OutboxUnavailableError as e:
            failure = e.__cause__
            if failure is None or not is_no_space(failure):
                raise
            with self._lock:
                self._recover_from_no_space(db, failure)
            raise self._no_space_error() from failure

    def close(self) -> None:
        self._committer.close()
        with self._lock, _rocksdb_errors(self.path):
            if self._closed:
                return
            self._closed = True
            self._db.close()

    def ticker(self, name: str) -> int:
        """A RocksDB statistics ticker (``rocksdb.number.iter.skip`` …); needs statistics."""
        text = self._options.get_statistics()
        if text is None:
            raise OutboxConfigError("open the outbox with ?statistics=true to read tickers")
        for line in text.splitlines():
            words = line.split()
            if words[:2] == [name, "COUNT"]:
                return int(words[-1])
        raise KeyError(name)

    # -- puts (on the committer thread) -------------------------------------------------------

    def _commit(self, requests: Sequence[Sequence[OutboxEntry]]) -> list[Result]:
        refusal = self._space_refusal()
        if refusal is not None:
            return [refusal] * len(requests)
        try:
            with _rocksdb_errors(self.path):
                with self._lock:
                    self._check_open()
                    db = self._db
                    txn = self._txn()
                    txn.prefetch(e.message_id for entries in requests for e in entries)
                    results = [self._stage_put(txn, entries) for entries in requests]
                    wrote = not txn.batch.is_empty()
                    if wrote:
                        txn.put(SEQ_KEY, u64(self._state.last_seq))
                        self._write(txn)
                if wrote:
                    # Outside the lock: claims go on while the disk syncs this batch.
                    self._flush_wal(db)
                return results
        except _RetryAfterNoSpaceError:
            # Puts are what a full disk refuses: not tried again in the reserve's room.
            return [self._no_space_error()] * len(requests)

    def _flush_wal(self, db: rocksdict.Rdict) -> None:
        try:
            db.flush_wal(True)
        except Exception as e:
            if not is_no_space(e):
                raise
            with self._lock:
                self._recover_from_no_space(db, e)
            raise self._no_space_error() from e

    def _stage_put(self, txn: Txn, entries: Sequence[OutboxEntry]) -> Result:
        stored: dict[str, OutboxEntry] = {}
        new: dict[str, OutboxEntry] = {}
        for entry in entries:
            message_id = entry.message_id
            if message_id in stored or message_id in new:
                continue
            existing = txn.get(message_id)
            if existing is not None:
                stored[message_id] = existing
            else:
                new[message_id] = entry
        state = self._state
        entries_after = state.pending + state.dead + len(new)
        bytes_after = state.body_bytes + sum(len(e.message.body) for e in new.values())
        full = self.limits.refusal(entries_after, bytes_after)
        if full is not None:
            return full
        for message_id, entry in new.items():
            state.last_seq += 1
            stored[message_id] = self._stage_new(txn, with_seq(entry, state.last_seq))
        state.pending += len(new)
        state.body_bytes = bytes_after
        return [stored[e.message_id] for e in entries]

    def _stage_new(self, txn: Txn, entry: OutboxEntry) -> OutboxEntry:
        """``_enter_pending`` for a new entry, written out: this runs once per put entry, on the
        thread every concurrent put waits for. A new entry never heads a group that has one."""
        message_id = entry.message_id.encode()
        seq = U64.pack(entry.seq)
        txn.put_entry(entry)
        state_value = STATE_VALUE.pack(len(entry.message.body), 0) + message_id
        txn.put_indexed(PENDING_STATE, PENDING_STATE + seq, state_value)
        txn.put_indexed(CREATED, CREATED + U64.pack(entry.created_ms) + seq, message_id)
        due = DUE + U64.pack(entry.next_send_time_ms) + seq
        group = entry.message.message_group
        if not group:  # an empty group is no group (OutboxEntry.fifo_group)
            txn.put_indexed(DUE, due, message_id)
            return entry
        prefix = group_key(entry.message.topic, group)
        txn.put(prefix + seq, message_id)
        if prefix not in self._state.heads:
            self._state.heads[prefix] = (entry.seq, entry.message_id)
            txn.put_indexed(DUE, due, message_id)
        return entry

    # -- transitions: the indexes and the in-memory state move together -----------------------

    def _enter_pending(self, txn: Txn, entry: OutboxEntry, dead: OutboxEntry | None) -> None:
        """A new entry, or a DEAD one requeued (``dead``), becomes PENDING."""
        state = self._state
        message_id = entry.message_id.encode()
        group = group_prefix(entry)
        head = state.heads.get(group) if group is not None else None
        demoted = None
        if head is not None and entry.seq < head[0]:
            # A requeued entry older than its group's head goes first; the old head stops being
            # claimable. Should the old head be leased, the requeued one waits for that lease to
            # end rather than be sent beside it: a group never has two entries in flight.
            demoted = expect(txn.get(head[1]), EntryState.PENDING, head)
            if demoted.lease_owner is not None:
                later_ms = max(entry.next_send_time_ms, demoted.lease_until_ms)
                entry = replace(entry, next_send_time_ms=later_ms)
        if dead is not None:
            txn.delete(state_key(EntryState.DEAD, dead.seq))
            txn.delete(changed_key(dead))
            state.dead -= 1
        else:
            state.body_bytes += entry.body_bytes
        state.pending += 1
        txn.put_entry(entry)
        txn.put(state_key(EntryState.PENDING, entry.seq), state_value(entry))
        txn.put(created_key(entry), message_id)
        if group is None:
            txn.put(due_key(entry), message_id)
            return
        txn.put(group + u64(entry.seq), message_id)
        if head is not None and demoted is None:
            return  # it waits behind its group's head
        if demoted is not None and demoted.lease_owner is None:
            txn.delete(due_key(demoted))
        state.heads[group] = (entry.seq, entry.message_id)
        txn.put(due_key(entry), message_id)

    def _replace_pending(self, txn: Txn, old: OutboxEntry, new: OutboxEntry) -> None:
        """A PENDING entry's lease or next send time changes."""
        if self._in_due(old):
            txn.delete(due_key(old))
        if self._in_due(new):
            txn.put(due_key(new), new.message_id.encode())
        txn.put(state_key(EntryState.PENDING, new.seq), state_value(new))
        txn.put_entry(new)
        self._state.lease(new)

    def _leave_pending(self, txn: Txn, old: OutboxEntry, new: OutboxEntry) -> None:
        """PENDING → DELIVERED or DEAD; the group's next entry, if any, becomes its head.

        The next head is read from the database, which does not see the batch yet: a batch of
        several calls it in seq order, so that an entry the batch took out before is never
        the one found (it is behind, not after).
        """
        state = self._state
        if self._in_due(old):
            txn.delete(due_key(old))
        txn.delete(state_key(EntryState.PENDING, old.seq))
        txn.delete(created_key(old))
        txn.put(state_key(new.state, new.seq), state_value(new))
        txn.put(changed_key(new), new.message_id.encode())
        txn.put_entry(new)
        state.pending -= 1
        state.body_bytes += new.body_bytes - old.body_bytes
        if new.state is EntryState.DEAD:
            state.dead += 1
        else:
            state.delivered += 1
        state.leases.pop(old.message_id, None)
        group = group_prefix(old)
        if group is None:
            return
        txn.delete(group + u64(old.seq))
        if state.heads[group][1] != old.message_id:
            return  # it left from the middle of its group (delivered out of turn)
        # Seek past the old head: whatever the group had before it is gone.
        following = self._items(GROUP, group + u64(old.seq + 1), group + TOP, 1)
        if not following:
            del state.heads[group]
            return
        key, next_id = following[0]
        next_head = expect(txn.get(next_id.decode()), EntryState.PENDING, key)
        state.heads[group] = (next_head.seq, next_head.message_id)
        if next_head.lease_owner is None:
            txn.put(due_key(next_head), next_id)
        else:
            state.arm(next_head.message_id)  # leased while demoted: due when its lease ends

    @_retried_after_no_space
    def _requeue_batch(self, message_ids: Sequence[str], now_ms: int) -> int:
        with self._lock, _rocksdb_errors(self.path):
            self._check_open()
            txn = self._txn()
            requeued = 0
            for message_id in message_ids:
                dead = txn.get(message_id)
                if dead is None or dead.state is not EntryState.DEAD:
                    continue
                self._enter_pending(txn, requeued_entry(dead, now_ms), dead)
                requeued += 1
            if requeued:
                self._write(txn)
            return requeued

    @_retried_after_no_space
    def _retry_now_batch(self, message_ids: Sequence[str], now_ms: int) -> int:
        with self._lock, _rocksdb_errors(self.path):
            self._check_open()
            txn = self._txn()
            busy: set[tuple[str, str] | None] | None = None  # found on the first FIFO entry
            changed = 0
            for message_id in message_ids:
                old = txn.get(message_id)
                if old is None:
                    continue
                if old.fifo_group is not None and busy is None:
                    busy = self._busy_groups(txn, now_ms)
                if not may_retry_now(old, now_ms, busy or ()):
                    continue
                self._replace_pending(txn, old, replace(old, next_send_time_ms=now_ms))
                changed += 1
            if changed:
                self._write(txn)
            return changed

    def _busy_groups(self, txn: Txn, now_ms: int) -> set[tuple[str, str] | None]:
        """The FIFO groups of the entries under a live lease (the leases are in memory; there
        are as many as resends in flight)."""
        busy: set[tuple[str, str] | None] = set()
        for message_id, (lease_until_ms, _) in self._state.leases.items():
            if lease_until_ms > now_ms:
                busy.add(expect(txn.get(message_id), EntryState.PENDING, message_id).fifo_group)
        return busy

    # -- helpers --------------------------------------------------------------------------------

    def _expired_leases(self, txn: Txn, now_ms: int, limit: int) -> list[tuple[int, int, str]]:
        """Up to ``limit`` leases ended by ``now_ms`` whose entries a claim may take, taken off
        the heap (the caller puts back those it does not claim)."""
        state = self._state
        heap = state.lease_heap
        found: dict[tuple[int, int, str], None] = {}
        while heap and heap[0][0] <= now_ms and len(found) < limit:
            item = heapq.heappop(heap)
            if not state.live_lease(item) or item in found:
                continue
            entry = expect(txn.get(item[2]), EntryState.PENDING, item)
            if self._is_candidate(entry):
                found[item] = None
            # else: demoted behind a requeued entry; armed again once it heads its group
        return list(found)

    def _txn(self) -> Txn:
        return Txn(self._db, self._state.floors)

    def _write(self, txn: Txn) -> None:
        """Write the batch (the caller holds the lock). Should the disk be full: the reserve is
        released and the database reopened, and _RetryAfterNoSpaceError asks the caller to try once
        more in the room it left, or OutboxNoSpaceError says there is none left to give."""
        db = self._db
        try:
            db.write(txn.batch, self._unsynced)
        except BaseException as e:
            if is_no_space(e):
                if self._recover_from_no_space(db, e):
                    raise _RetryAfterNoSpaceError from e
                raise self._no_space_error() from e
            # The in-memory state already counts this batch: rebuild it from what the DB holds.
            try:
                self._state = self._load_state()
            except BaseException:
                self._broken = True
                log.exception("rocksdb outbox %s: no state rebuilt after a failed write", self.path)
            raise

    # -- a full disk (outbox/disk_reserve.py) ---------------------------------------------------

    def _make_reserve(self) -> None:
        """At open: the reserve in place, or spools refused from the start (saying why)."""
        if self._reserve.held() or self._reserve.restore():
            return
        self._no_space = "no room for the disk reserve"
        self._next_space_check_s = time.monotonic() + SPACE_CHECK_INTERVAL_S
        log.error(
            "rocksdb outbox %s refuses spools: %s (%s); make room or lower ?reserve_bytes=",
            self.path, self._no_space, self._reserve.describe(),
        )  # fmt: skip

    def _recover_from_no_space(self, failed_db: rocksdict.Rdict, error: BaseException) -> bool:
        """A write to ``failed_db`` failed for want of space (the caller holds the lock): refuse
        puts from now on, release the reserve, and reopen the database (its log stays failed
        otherwise) unless another thread did already. Whether a reserve was released."""
        with self._space_lock:
            released = self._reserve.release()
            if self._no_space is None:
                self._no_space = "the disk filled"
                log.error(
                    "rocksdb outbox %s: the disk is full (%s): spools refused, claims and "
                    "deliveries go on%s",
                    self.path, error,
                    " in the room of its released reserve" if released else " (no reserve left)",
                )  # fmt: skip
            self._next_space_check_s = time.monotonic() + SPACE_CHECK_INTERVAL_S
        if self._db is failed_db:
            self._reopen()
        return released

    def _reopen(self) -> None:
        """Close the database and open it again (the caller holds the lock); its in-memory
        state is rebuilt from what it holds."""
        # Its background work stopped first: after a failed log write, close would wait a second
        # for it. A failed log makes close report it; the handle is dropped all the same.
        with contextlib.suppress(Exception):
            self._db.cancel_all_background(False)
        with contextlib.suppress(Exception):
            self._db.close()
        try:
            self._db = rocksdict.Rdict(str(self.path), self._options, access_type=self._access())
            self._state = self._load_state()
        except BaseException:
            self._broken = True
            log.exception("rocksdb outbox %s: reopening it failed", self.path)
            raise
        self._broken = False
        log.warning("rocksdb outbox %s reopened", self.path)

    def _access(self) -> rocksdict.AccessType:
        if self.read_only:
            return rocksdict.AccessType.read_only()
        return rocksdict.AccessType.read_write()

    def _space_refusal(self) -> OutboxNoSpaceError | None:
        """None while puts may be tried; else why not. Looks at the free space again (at most
        every SPACE_CHECK_INTERVAL_S) and, with enough of it, makes the reserve again."""
        with self._space_lock:
            if self._no_space is None:
                return None
            now_s = time.monotonic()
            if now_s >= self._next_space_check_s:
                self._next_space_check_s = now_s + SPACE_CHECK_INTERVAL_S
                if self._reserve.restore():
                    log.warning(
                        "rocksdb outbox %s has room again (%s): spools are taken again",
                        self.path, self._reserve.describe(),
                    )  # fmt: skip
                    self._no_space = None
                    return None
            return self._no_space_error_locked()

    def _no_space_error(self) -> OutboxNoSpaceError:
        with self._space_lock:
            return self._no_space_error_locked()

    def _no_space_error_locked(self) -> OutboxNoSpaceError:
        return OutboxNoSpaceError(
            f"rocksdb outbox {self.path} has no room for new entries: "
            f"{self._no_space or 'the disk filled'}; {self._reserve.describe()}"
        )

    def _check_open(self) -> None:
        """Raise unless the database can be used now (the caller holds the lock); one that
        failed a write and was left unusable is reopened, at most every
        SPACE_CHECK_INTERVAL_S."""
        if self._closed:
            raise OutboxUnavailableError(f"rocksdb outbox {self.path} is closed")
        if self._broken and time.monotonic() >= self._next_reopen_s:
            self._next_reopen_s = time.monotonic() + SPACE_CHECK_INTERVAL_S
            with contextlib.suppress(Exception):  # logged by _reopen
                self._reopen()
        if self._broken:
            raise OutboxUnavailableError(
                f"rocksdb outbox {self.path} failed a write and could not be reopened yet"
            )

    def _owned(self, txn: Txn, message_id: str, owner: str) -> OutboxEntry | None:
        entry = txn.get(message_id)
        if entry is None or entry.state is not EntryState.PENDING or entry.lease_owner != owner:
            return None
        return entry

    def _is_candidate(self, entry: OutboxEntry) -> bool:
        """In no FIFO group, or its group's head."""
        group = group_prefix(entry)
        return group is None or self._state.heads[group][1] == entry.message_id

    def _in_due(self, entry: OutboxEntry) -> bool:
        return entry.lease_owner is None and self._is_candidate(entry)

    def _items(
        self, prefix: bytes, lower: bytes, upper: bytes, limit: int
    ) -> list[tuple[bytes, bytes]]:
        return index_items(self._db, self._state.floors, prefix, lower, upper, limit)

    def _raise_floor(self, prefix: bytes, key: bytes) -> None:
        floors = self._state.floors
        floors[prefix] = max(floors[prefix], key)

    def _load_state(self) -> State:
        state = load_state(self._db)
        # A reopen finds the leases of the dead process again: they stay ended.
        for message_id, lease in self._dead_leases.items():
            if state.leases.get(message_id) == lease:
                state.end_lease(message_id)
        return state


def _listed_in_batches(
    message_ids: Sequence[str], batch_max: int, apply: Callable[[Sequence[str]], int]
) -> int:
    """``apply`` to the distinct ``message_ids``, at most ``batch_max`` at a time (one write
    each); the sum of what the batches changed."""
    ids = list(dict.fromkeys(message_ids))
    return sum(apply(ids[i : i + batch_max]) for i in range(0, len(ids), batch_max))
