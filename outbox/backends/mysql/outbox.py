"""The MySQL / MariaDB outbox: InnoDB rows claimed with ``SELECT … FOR UPDATE SKIP LOCKED``.

Durability: ``put`` returns once its transaction has COMMITted. A committed put survives SIGKILL
of the sidecar and the loss of its pod (the data lives on the database server). Surviving a crash
of the server needs InnoDB's ``innodb_flush_log_at_trx_commit=1`` (the default: the redo log is
flushed at every commit); surviving the loss of the server needs replication. Several sidecars
may share one database and one table: every promise of the contract holds between processes,
not only between threads.

URL: ``mysql+pymysql://user:password@host:port/db?table=NAME`` (``table`` defaults to
``rocketbox_outbox``; other query parameters go to the driver). The schema
(outbox/backends/mysql/schema.py) is created when missing.

Concurrency, in READ COMMITTED (each statement sees what was committed before it; no gap locks):
- ``put``: concurrent callers, and the requests of a ``put_groups``, share one transaction
  (outbox/group_commit.py) that first locks the puts' counter row. Puts of every sidecar queue on
  it, so the bound is exact across processes and seqs are allocated in commit order.
- ``mark_delivered``: concurrent callers, and the items of a ``mark_delivered_many``, share one
  transaction too: one UPDATE gives every row its own receipt.
- ``pending_groups``: one loose scan of ``ix_fifo_head`` (a seek per distinct group of the table).
- ``claim_due``: a consistent read finds the first claimable row on the due index, then the due
  rows from there are locked with SKIP LOCKED, so claims never wait for each other and never
  take the same row (outbox/backends/mysql/schema.py says why it starts there). For FIFO entries the
  query also tests, in its snapshot, that the entry is its group's head with no live lease in
  the group. Then, per FIFO group among the candidates, the claim takes a MariaDB user lock
  (``GET_LOCK(name, 0)``, never waiting; a group whose lock is held elsewhere is left for a later
  claim) and tests again in a fresh view: claims and requeues of a group commit before they give
  its lock up, so this view holds whatever they did. Without it, a claim whose snapshot predates
  a requeue could send the requeued entry's successor beside it.
- ``expire_leases``: a consistent read finds the PENDING rows leased to the prefix (by
  ``ix_state_seq``: every PENDING row, once, at a sidecar's start), then an UPDATE by primary
  key, ``IN_LIST_MAX`` at a time, ends those whose owner still matches, so that no other
  sidecar's claims wait for a lock on a row that is not the prefix's.

A full disk: InnoDB refuses what needs new pages (``put``'s INSERTs: "The table is full", or
the server's disk-full error), answered OutboxNoSpaceError, while updates in place (claims,
reschedules, tombstones, which shrink a row) mostly still fit in the pages the table has. A
server that must write anything else first (binary log, undo, temporary tables on that disk)
refuses those too: the drain then waits for room, as it does for a server that is down.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine, make_url

from outbox.backends.mysql.schema import (
    COUNTER_SLOTS,
    DEAD,
    DELIVERED,
    LAST_ERROR_CHARS_MAX,
    NAME_CHARS_MAX,
    PENDING,
    TABLE_NAME_CHARS_MAX,
    Statements,
    as_stored,
    claimed_row_to_entry,
    entry_to_row,
    fifo_head,
    not_fifo,
    row_to_entry,
    tables,
)
from outbox.contract_checks import (
    check_claim_args,
    check_owner_prefix,
    check_purge_state,
    check_put_entries,
)
from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry, OutboxLimits, OutboxStats
from outbox.errors import (
    EntryTooLargeError,
    OutboxConfigError,
    OutboxError,
    OutboxFullError,
    OutboxNoSpaceError,
    OutboxUnavailableError,
)
from outbox.factory import redact
from outbox.group_commit import BatchCommitter, GroupCommitter, Result
from outbox.outbox import Outbox

_T = TypeVar("_T")

TABLE_DEFAULT = "rocketbox_outbox"
_TABLE_NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{TABLE_NAME_CHARS_MAX - 1}}}")
# Rows per transaction in ``requeue``, ``retry_now`` and ``purge``; message ids per ``IN (...)``
# list.
REQUEUE_BATCH_MAX = 500
RETRY_NOW_BATCH_MAX = 500
PURGE_BATCH_MAX = 1_000
IN_LIST_MAX = 1_000
# How long ``requeue`` waits for a FIFO group's lock (a claim holds one for milliseconds).
GROUP_LOCK_WAIT_S = 10
# What a row needs in a statement beyond its escaped fields (escaping doubles bytes at worst).
ROW_OVERHEAD_BYTES = 64 * 1024

# Connections: the resend pool's workers, the two committers and an admin call at once.
POOL_SIZE = 8
POOL_OVERFLOW_MAX = 8
POOL_TIMEOUT_S = 10
# Below the server's wait_timeout (8 h by default): never hand out a connection it has closed.
POOL_RECYCLE_S = 3_600
# Every network wait has a deadline; a lock wait gives up before the read does.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
WRITE_TIMEOUT_S = 30
LOCK_WAIT_TIMEOUT_S = 10

_NO_RECEIPT = DeliveryReceipt(queue_id=0, queue_offset=0, delivered_ms=0)
# Server errors of a full disk: ER_DISK_FULL, ER_RECORD_FILE_FULL ("The table is full"), and
# ER_ERROR_ON_WRITE when it quotes ENOSPC (errno 28).
_NO_SPACE_ERRORS = frozenset({1021, 1114})
_ER_ERROR_ON_WRITE = 1026


class MySQLOutbox(Outbox):
    name = "mysql+pymysql"

    def __init__(self, url: str, limits: OutboxLimits) -> None:
        super().__init__(limits)
        try:
            parsed = make_url(url)
        except (sa_exc.ArgumentError, ValueError) as e:  # a port that is no number …
            raise OutboxConfigError(f"outbox URL {redact(url)!r}: {e}") from e
        table = parsed.query.get("table", TABLE_DEFAULT)
        if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
            raise OutboxConfigError(
                f"outbox URL {redact(url)!r}: table {table!r} must be one identifier of letters, "
                f"digits and underscores, at most {TABLE_NAME_CHARS_MAX} characters"
            )
        if not parsed.database:
            raise OutboxConfigError(f"outbox URL {redact(url)!r} names no database")
        self.table_name = table
        self._database = parsed.database
        # Named in every error: the URL (without its password) and the table.
        self._where = redact(url) if "table" in parsed.query else f"{redact(url)} (table {table})"
        self._closed = False
        self._entries, self._counters = tables(table)
        self._sql = Statements(self._entries, self._counters)
        self._engine = _engine(parsed.difference_update_query(["table"]))
        try:
            self._entry_bytes_max = self._create_schema() - ROW_OVERHEAD_BYTES
        except BaseException:
            self._engine.dispose()
            raise
        self._puts = GroupCommitter(self._commit_puts, name=f"outbox-mysql-put-{table}")
        self._deliveries: BatchCommitter[tuple[str, DeliveryReceipt], bool] = BatchCommitter(
            self._commit_deliveries, name=f"outbox-mysql-delivered-{table}"
        )

    @classmethod
    def from_url(cls, url: str, limits: OutboxLimits) -> MySQLOutbox:
        return cls(url, limits)

    # -- errors, transactions, schema ---------------------------------------------------------

    @contextlib.contextmanager
    def _translated(self, operation: str) -> Iterator[None]:
        """The one place where driver errors become outbox errors."""
        if self._closed:
            raise OutboxUnavailableError(f"MySQL outbox {self._where} is closed")
        try:
            yield
        except sa_exc.DBAPIError as e:
            reason = "connection lost" if e.connection_invalidated else type(e.orig).__name__
            if _no_space(e.orig):
                raise OutboxNoSpaceError(
                    f"MySQL outbox {self._where}: {operation} failed: the server's disk is "
                    f"full: {e.orig}"
                ) from e
            raise OutboxUnavailableError(
                f"MySQL outbox {self._where}: {operation} failed ({reason}): {e.orig}"
            ) from e
        except sa_exc.TimeoutError as e:  # no pooled connection came free in time
            raise OutboxUnavailableError(
                f"MySQL outbox {self._where}: {operation} failed: {e}"
            ) from e

    @contextlib.contextmanager
    def _transaction(self, operation: str) -> Iterator[Connection]:
        with self._translated(operation), self._engine.begin() as conn:
            yield conn

    def _create_schema(self) -> int:
        """Create what is missing; returns the server's max_allowed_packet."""
        entries, counters = self._entries, self._counters
        with self._translated("opening the outbox"):
            try:
                entries.metadata.create_all(self._engine)
            except sa_exc.DBAPIError:
                # Another sidecar created a table between our check and our CREATE.
                entries.metadata.create_all(self._engine)
            with self._engine.begin() as conn:
                # Counted from the entries, should the table predate its counters.
                counted = sa.select(
                    sa.literal(0),
                    sa.func.count(),
                    sa.func.coalesce(sa.func.sum(entries.c.body_size), 0),
                ).where(entries.c.state.in_((PENDING, DEAD)))
                conn.execute(
                    counters.insert()
                    .prefix_with("IGNORE")
                    .from_select(["slot", "entries", "body_bytes"], counted)
                )
                conn.execute(
                    counters.insert().prefix_with("IGNORE"),
                    [
                        {"slot": slot, "entries": 0, "body_bytes": 0}
                        for slot in range(1, COUNTER_SLOTS + 1)
                    ],
                )
                return int(conn.exec_driver_sql("SELECT @@max_allowed_packet").scalar_one())

    # -- put -----------------------------------------------------------------------------------

    def put(self, entries: Sequence[OutboxEntry]) -> list[OutboxEntry]:
        return self._puts.put(entries, self._check_put)

    def put_groups(
        self, requests: Sequence[Sequence[OutboxEntry]]
    ) -> list[list[OutboxEntry] | OutboxError]:
        # Submitted together: up to GROUP_COMMIT_BATCH_MAX requests share one transaction.
        return self._puts.put_groups(requests, self._check_put)

    def _check_put(self, entries: Sequence[OutboxEntry]) -> None:
        check_put_entries(entries)
        for entry in entries:
            self._check_storable(entry)

    def _check_storable(self, entry: OutboxEntry) -> None:
        m = entry.message
        for field, value in (
            ("message_id", m.message_id),
            ("topic", m.topic),
            ("message_group", m.message_group or ""),
        ):
            if len(value) > NAME_CHARS_MAX:
                raise EntryTooLargeError(
                    f"{field} of message {m.message_id[:64]!r} is {len(value)} characters; "
                    f"the MySQL outbox holds at most {NAME_CHARS_MAX}"
                )
        text_chars = len(m.tag or "") + sum(map(len, m.keys))
        text_chars += sum(len(k) + len(v) for k, v in m.properties.items())
        row_bytes = 2 * len(m.body) + 4 * 2 * text_chars  # utf8mb4, then escaped
        if row_bytes > self._entry_bytes_max:
            raise EntryTooLargeError(
                f"message {m.message_id!r} needs up to {row_bytes} bytes in a statement; the "
                f"server's max_allowed_packet leaves {self._entry_bytes_max} for one entry"
            )

    def _commit_puts(self, requests: Sequence[Sequence[OutboxEntry]]) -> list[Result]:
        """One transaction for a group commit batch, each request all or nothing."""
        with self._transaction("put") as conn:
            entries_total, bytes_total = self._lock_put_counts(conn)
            ids = list({e.message_id for request in requests for e in request})
            stored = {e.message_id: e for e in self._get_many(conn, self._stored_ids(conn, ids))}
            new: dict[str, OutboxEntry] = {}
            verdicts: list[OutboxFullError | None] = []  # None: accepted
            for request in requests:
                adding: dict[str, OutboxEntry] = {}
                for entry in request:
                    if entry.message_id not in stored and entry.message_id not in new:
                        adding.setdefault(entry.message_id, entry)
                adding_bytes = sum(e.body_bytes for e in adding.values())
                full = self.limits.refusal(entries_total + len(adding), bytes_total + adding_bytes)
                verdicts.append(full)
                if full is not None:
                    continue
                entries_total += len(adding)
                bytes_total += adding_bytes
                new.update(adding)
            if new:
                conn.execute(self._entries.insert(), [entry_to_row(e) for e in new.values()])
                self._count(conn, 0, len(new), sum(e.body_bytes for e in new.values()))
                # Read back rather than assumed consecutive: with auto_increment_increment > 1
                # (multi-primary setups) they are not.
                for batch in _chunks(list(new), IN_LIST_MAX):
                    for seq, message_id in conn.execute(self._sql.seqs_by_ids, {"ids": batch}):
                        stored[message_id] = as_stored(new[message_id], seq)
        return [
            verdict if verdict is not None else [stored[e.message_id] for e in request]
            for request, verdict in zip(requests, verdicts, strict=True)
        ]

    def _lock_put_counts(self, conn: Connection) -> tuple[int, int]:
        """Lock the puts' counter row; the bound's entry and byte counts.

        Slot 0 comes from the locking read, hence its latest version: every earlier put. The
        other slots come from the statement's snapshot, which may miss a decrement committed
        meanwhile: the counts can only be too high, never too low, so the bound holds.
        """
        entries_put, bytes_put, entries_out, bytes_out = conn.execute(self._sql.put_counts).one()
        return int(entries_put) + int(entries_out), int(bytes_put) + int(bytes_out)

    def _count(self, conn: Connection, slot: int, entries: int, body_bytes: int) -> None:
        conn.execute(
            self._sql.count_change,
            {"to_slot": slot, "add_entries": entries, "add_body_bytes": body_bytes},
        )

    def _stored_ids(self, conn: Connection, message_ids: Sequence[str]) -> list[str]:
        """Which of ``message_ids`` are stored (read from the unique index alone)."""
        found: list[str] = []
        for batch in _chunks(message_ids, IN_LIST_MAX):
            found.extend(conn.execute(self._sql.ids_stored, {"ids": batch}).scalars())
        return found

    def _get_many(self, conn: Connection, message_ids: Sequence[str]) -> list[OutboxEntry]:
        found: list[OutboxEntry] = []
        for batch in _chunks(message_ids, IN_LIST_MAX):
            rows = conn.execute(self._sql.entries_by_ids, {"ids": batch}).mappings()
            found.extend(row_to_entry(row) for row in rows)
        return found

    # -- reads -----------------------------------------------------------------------------------

    def get(self, message_id: str) -> OutboxEntry | None:
        with self._transaction("get") as conn:
            found = self._get_many(conn, [message_id])
        return found[0] if found else None

    def has_pending_group(self, topic: str, message_group: str) -> bool:
        if not message_group:
            return False  # an empty group is no group (OutboxEntry.fifo_group)
        t = self._entries
        with self._transaction("has_pending_group") as conn:
            row = conn.execute(
                sa.select(t.c.seq)
                .where(t.c.topic == topic, t.c.message_group == message_group, t.c.state == PENDING)
                .limit(1)
            ).first()
        return row is not None

    def pending_groups(self) -> set[tuple[str, str]]:
        with self._transaction("pending_groups") as conn:
            return {(topic, group) for topic, group in conn.execute(self._sql.pending_groups)}

    def stats(self, now_ms: int) -> OutboxStats:
        """An aggregate pass over the table: for metrics and admin, not a hot path."""
        t = self._entries
        leased = t.c.lease_until_ms > now_ms
        with self._transaction("stats") as conn:
            rows = conn.execute(
                sa.select(
                    t.c.state,
                    sa.func.count(),
                    sa.func.coalesce(sa.func.sum(t.c.body_size), 0),
                    sa.func.coalesce(sa.func.sum(sa.case((leased, 1), else_=0)), 0),
                    sa.func.min(t.c.created_ms),
                ).group_by(t.c.state)
            ).all()
            # The first claimable entry on the due index: when a claim can next find work.
            next_due_ms = conn.execute(
                sa.select(t.c.due_ms)
                .with_hint(t, "FORCE INDEX (ix_due)")
                .where(t.c.due_ms.is_not(None), sa.or_(not_fifo(t), fifo_head(t)))
                .order_by(t.c.due_ms, t.c.seq)
                .limit(1)
            ).scalar()
        by_state = {row[0]: row for row in rows}
        pending, dead, delivered = (by_state.get(s) for s in (PENDING, DEAD, DELIVERED))
        return OutboxStats(
            pending=int(pending[1]) if pending else 0,
            in_flight=int(pending[3]) if pending else 0,
            delivered=int(delivered[1]) if delivered else 0,
            dead=int(dead[1]) if dead else 0,
            bytes=sum(int(row[2]) for row in (pending, dead) if row),
            oldest_pending_created_ms=int(pending[4]) if pending else None,
            next_due_ms=None if next_due_ms is None else int(next_due_ms),
        )

    def scan(self, state: EntryState | None, after_seq: int, limit: int) -> list[OutboxEntry]:
        t = self._entries
        query = sa.select(t).where(t.c.seq > after_seq).order_by(t.c.seq).limit(max(limit, 0))
        if state is not None:
            query = query.where(t.c.state == state.value)
        with self._transaction("scan") as conn:
            return [row_to_entry(row) for row in conn.execute(query).mappings()]

    def check_writable(self) -> None:
        """The server answers, is not a read-only replica, and both tables are there."""
        with self._transaction("check_writable") as conn:
            read_only = conn.exec_driver_sql("SELECT @@global.read_only").scalar_one()
            conn.execute(sa.select(self._entries.c.seq).limit(1)).all()
            conn.execute(sa.select(self._counters.c.slot).limit(1)).all()
        if int(read_only):
            raise OutboxUnavailableError(
                f"MySQL outbox {self._where}: the server is read-only (a replica?)"
            )

    # -- claims ----------------------------------------------------------------------------------

    def claim_due(self, now_ms: int, limit: int, lease_ms: int, owner: str) -> list[OutboxEntry]:
        check_claim_args(lease_ms, owner)
        if limit <= 0:
            return []
        lease_until_ms = now_ms + lease_ms
        with self._translated("claim_due"), self._group_locks() as locks:
            conn = locks.conn
            with conn.begin():
                start = conn.execute(self._sql.claim_start, {"now_ms": now_ms}).first()
                if start is None:
                    return []  # nothing claimable: no locking read at all
                params = {
                    "now_ms": now_ms,
                    "from_due_ms": start.due_ms,
                    "from_seq": start.seq,
                    "limit": limit,
                }
                candidates = conn.execute(self._sql.claim_candidates, params).mappings().all()
                fifo = [row for row in candidates if row["message_group"]]
                if fifo:
                    confirmed = self._confirm_fifo_heads(locks, fifo, now_ms)
                    candidates = [
                        row
                        for row in candidates
                        if not row["message_group"] or row["seq"] in confirmed
                    ]
                if candidates:
                    conn.execute(
                        self._sql.claim_lease,
                        {
                            "seqs": [row["seq"] for row in candidates],
                            "owner": owner,
                            "lease_until_ms": lease_until_ms,
                        },
                    )
        # Soonest due first: by due_ms, when each became claimable (for an entry whose lease
        # ran out, the lease's end).
        return [claimed_row_to_entry(row, owner, lease_until_ms) for row in candidates]

    def expire_leases(self, owner_prefix: str, now_ms: int) -> int:
        check_owner_prefix(owner_prefix)
        t = self._entries
        owned = t.c.lease_owner.startswith(owner_prefix, autoescape=True)
        with self._transaction("expire_leases") as conn:
            seqs = conn.execute(
                sa.select(t.c.seq)
                .with_hint(t, "FORCE INDEX (ix_state_seq)")
                .where(t.c.state == PENDING, owned)
            ).scalars().all()  # fmt: skip
        ended = 0
        for batch in _chunks(seqs, IN_LIST_MAX):
            with self._transaction("expire_leases") as conn:
                ended += conn.execute(
                    t.update()
                    .where(t.c.seq.in_(batch), t.c.state == PENDING, owned)
                    .values(
                        maybe_stored=True,
                        due_ms=t.c.next_send_time_ms,
                        lease_owner=None,
                        lease_until_ms=0,
                    )
                ).rowcount
        return ended

    def _confirm_fifo_heads(
        self, locks: _GroupLocks, fifo: Sequence[Mapping[Any, Any]], now_ms: int
    ) -> set[int]:
        """The seqs among ``fifo`` (locked candidates) still claimable once their groups' locks
        are held. A group whose lock is held elsewhere now is left for a later claim."""
        by_lock: dict[str, list[int]] = {}
        for row in fifo:
            name = self._group_lock(row["topic"], row["message_group"])
            by_lock.setdefault(name, []).append(row["seq"])
        held = [seq for name in locks.take(by_lock, wait_s=0) for seq in by_lock[name]]
        if not held:
            return set()
        # A new statement, hence (READ COMMITTED) a fresh view: it holds everything that the
        # previous holders of these locks committed.
        return set(
            locks.conn.execute(self._sql.claim_confirm, {"seqs": held, "now_ms": now_ms}).scalars()
        )

    def _group_lock(self, topic: str, message_group: str) -> str:
        return group_lock_name(self._database, self.table_name, topic, message_group)

    @contextlib.contextmanager
    def _group_locks(self) -> Iterator[_GroupLocks]:
        """A connection whose FIFO group locks, if it takes any, are given back at the end
        (after its transaction: whoever takes them next must see what it committed)."""
        with self._engine.connect() as conn:
            locks = _GroupLocks(conn)
            try:
                yield locks
            finally:
                locks.release_all()

    # -- state changes -------------------------------------------------------------------------

    def mark_delivered(self, message_id: str, receipt: DeliveryReceipt) -> bool:
        # Concurrent calls (resend workers, sidecars' threads) share one transaction, as puts do.
        return self._deliveries.submit((message_id, receipt))

    def mark_delivered_many(self, deliveries: Sequence[tuple[str, DeliveryReceipt]]) -> list[bool]:
        # Submitted together: up to GROUP_COMMIT_BATCH_MAX of them share one transaction.
        answers = self._deliveries.submit_many(deliveries)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer  # the transaction failed: every item's answer
        return [answer is True for answer in answers]

    def _commit_deliveries(
        self, requests: Sequence[tuple[str, DeliveryReceipt]]
    ) -> list[bool | BaseException]:
        """PENDING → DELIVERED tombstones for a batch of ``mark_delivered`` calls."""
        with self._transaction("mark_delivered") as conn:
            # Locked in message_id order (the unique index), so two sidecars' batches cannot
            # deadlock; claims never wait for them (SKIP LOCKED).
            ids = list({message_id for message_id, _ in requests})
            pending = {
                row.message_id: row for row in conn.execute(self._sql.pending_by_ids, {"ids": ids})
            }
            # The first request for an entry delivers it; a repeat finds it delivered.
            receipts: dict[int, DeliveryReceipt] = {}
            body_bytes = 0
            answers: list[bool | BaseException] = []
            for message_id, receipt in requests:
                row = pending.pop(message_id, None)
                answers.append(row is not None)
                if row is not None:
                    receipts[row.seq] = receipt
                    body_bytes += row.body_size
            if receipts:
                statement, rows_max = self._sql.tombstones(len(receipts))
                seqs = sorted(receipts)
                params: dict[str, object] = {"seqs": seqs}
                # Unused slots: seqs above every real one (they must keep increasing).
                padding = range(seqs[-1] + 1, seqs[-1] + 1 + rows_max - len(seqs))
                slots = [(seq, receipts[seq]) for seq in seqs]
                slots += [(seq, _NO_RECEIPT) for seq in padding]
                for i, (seq, receipt) in enumerate(slots):
                    params[f"seq_{i}"] = seq
                    params[f"queue_id_{i}"] = receipt.queue_id
                    params[f"queue_offset_{i}"] = receipt.queue_offset
                    params[f"delivered_ms_{i}"] = receipt.delivered_ms
                    params[f"durable_{i}"] = receipt.durable
                conn.execute(statement, params)
                slot = 1 + zlib.crc32(requests[0][0].encode()) % COUNTER_SLOTS
                self._count(conn, slot, -len(receipts), -body_bytes)
        return answers

    def _update_leased(
        self, operation: str, message_id: str, owner: str, values: Mapping[str, Any]
    ) -> bool:
        """Change a PENDING entry that ``owner`` holds the lease of."""
        t = self._entries
        with self._transaction(operation) as conn:
            result = conn.execute(
                t.update()
                .where(t.c.message_id == message_id, t.c.state == PENDING, t.c.lease_owner == owner)
                .values(**values)
            )
        return result.rowcount == 1

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
        t = self._entries
        return self._update_leased(
            "reschedule",
            message_id,
            owner,
            {
                # Only ever set: an earlier attempt may have stored it (outbox/contract_checks.py).
                "maybe_stored": sa.or_(t.c.maybe_stored, sa.literal(maybe_stored)),
                "attempts": t.c.attempts + 1,
                "last_error": error[:LAST_ERROR_CHARS_MAX],
                "next_send_time_ms": next_send_time_ms,
                "due_ms": next_send_time_ms,
                "lease_owner": None,
                "lease_until_ms": 0,
            },
        )

    def bury(self, message_id: str, owner: str, error: str, now_ms: int) -> bool:
        return self._update_leased(
            "bury",
            message_id,
            owner,
            {
                "state": DEAD,
                "attempts": self._entries.c.attempts + 1,
                "last_error": error[:LAST_ERROR_CHARS_MAX],
                "due_ms": None,
                "lease_owner": None,
                "lease_until_ms": 0,
                "state_changed_ms": now_ms,
            },
        )

    def release(self, message_id: str, owner: str) -> bool:
        t = self._entries
        return self._update_leased(
            "release",
            message_id,
            owner,
            {"due_ms": t.c.next_send_time_ms, "lease_owner": None, "lease_until_ms": 0},
        )

    def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        return self._in_batches(
            "requeue", DEAD, message_ids, REQUEUE_BATCH_MAX,
            lambda which, index: self._requeue_batch(which, index, now_ms),
        )  # fmt: skip

    def _in_batches(
        self,
        what: str,
        state: str,
        message_ids: Sequence[str] | None,
        batch_max: int,
        apply: Callable[[sa.ColumnElement[bool], str], int],
    ) -> int:
        """``apply(which, index)`` to the listed entries, or to every entry in ``state``, a batch
        of at most ``batch_max`` at a time (each its own transaction, so no lock is held over the
        whole table); returns the sum of what each batch changed."""
        t = self._entries
        changed = 0
        if message_ids is not None:
            for batch in _chunks(list(dict.fromkeys(message_ids)), batch_max):
                changed += apply(t.c.message_id.in_(batch), "uq_message_id")
            return changed
        after_seq = 0
        while True:
            with self._transaction(what) as conn:
                seqs = conn.execute(
                    sa.select(t.c.seq)
                    .where(t.c.state == state, t.c.seq > after_seq)
                    .order_by(t.c.seq)
                    .limit(batch_max)
                ).scalars().all()  # fmt: skip
            if seqs:
                changed += apply(t.c.seq.between(seqs[0], seqs[-1]), "PRIMARY")
                after_seq = seqs[-1]
            if len(seqs) < batch_max:
                return changed

    def _requeue_batch(self, which: sa.ColumnElement[bool], index: str, now_ms: int) -> int:
        """Requeue the DEAD entries ``which`` selects by ``index`` (named, as every locking read
        is: see Statements.pending_by_ids)."""
        t = self._entries
        with self._translated("requeue"), self._group_locks() as locks, locks.conn.begin():
            rows = locks.conn.execute(
                sa.select(t.c.seq, t.c.topic, t.c.message_group)
                .with_hint(t, f"FORCE INDEX ({index})")
                .where(which, t.c.state == DEAD)
                .with_for_update()
            ).all()
            # A requeued FIFO entry may become its group's head again: wait for the group's
            # claims in progress to commit, and make the next ones see this requeue.
            names = {self._group_lock(r.topic, r.message_group) for r in rows if r.message_group}
            if len(locks.take(names, wait_s=GROUP_LOCK_WAIT_S)) < len(names):
                raise OutboxUnavailableError(
                    f"MySQL outbox {self._where}: requeue waited more than {GROUP_LOCK_WAIT_S} s "
                    "for the claims of a FIFO group to finish"
                )
            if rows:
                locks.conn.execute(
                    t.update()
                    .where(t.c.seq.in_([r.seq for r in rows]))
                    .values(
                        state=PENDING,
                        attempts=0,
                        next_send_time_ms=now_ms,
                        due_ms=now_ms,
                        state_changed_ms=now_ms,
                    )
                )
        return len(rows)

    def retry_now(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        return self._in_batches(
            "retry_now", PENDING, message_ids, RETRY_NOW_BATCH_MAX,
            lambda which, index: self._retry_now_batch(which, index, now_ms),
        )  # fmt: skip

    def _retry_now_batch(self, which: sa.ColumnElement[bool], index: str, now_ms: int) -> int:
        """Make the PENDING entries ``which`` selects by ``index`` due now, in one transaction.

        No FIFO group lock, unlike requeue: a claim never takes a group's head while another
        entry of the group is leased, whatever the head's due time (``fifo_claimable``), so an
        earlier due time cannot put two of a group in flight. The busy-group test below is the
        contract's answer, the same on every backend.
        """
        t = self._entries
        live_lease = sa.and_(t.c.lease_owner.is_not(None), t.c.lease_until_ms > now_ms)
        with self._transaction("retry_now") as conn:
            rows = conn.execute(
                sa.select(t.c.seq, t.c.topic, t.c.message_group)
                .with_hint(t, f"FORCE INDEX ({index})")
                .where(
                    which,
                    t.c.state == PENDING,
                    t.c.next_send_time_ms > now_ms,
                    sa.not_(live_lease),
                )
                .with_for_update()
            ).all()
            groups = {(r.topic, r.message_group) for r in rows if r.message_group}
            busy: set[tuple[str, str]] = set()
            for batch in _chunks(sorted(groups), IN_LIST_MAX):
                busy.update(
                    (topic, group)
                    for topic, group in conn.execute(
                        sa.select(t.c.topic, t.c.message_group)
                        .distinct()
                        .where(
                            sa.tuple_(t.c.topic, t.c.message_group).in_(batch),
                            t.c.state == PENDING,
                            live_lease,
                        )
                    )
                )
            seqs = [
                r.seq for r in rows if not r.message_group or (r.topic, r.message_group) not in busy
            ]
            if seqs:
                conn.execute(
                    t.update()
                    .where(t.c.seq.in_(seqs))
                    .values(next_send_time_ms=now_ms, due_ms=now_ms)
                )
        return len(seqs)

    def purge(self, state: EntryState, before_ms: int) -> int:
        check_purge_state(state)
        t = self._entries
        purged = 0
        while True:
            with self._transaction("purge") as conn:
                # SKIP LOCKED: a row that a requeue holds now is left for the next purge.
                rows = conn.execute(
                    sa.select(t.c.seq, t.c.body_size)
                    .where(t.c.state == state.value, t.c.state_changed_ms < before_ms)
                    .limit(PURGE_BATCH_MAX)
                    .with_for_update(skip_locked=True)
                ).all()
                if rows:
                    conn.execute(t.delete().where(t.c.seq.in_([r.seq for r in rows])))
                    if state is EntryState.DEAD:
                        body_bytes = sum(int(r.body_size) for r in rows)
                        slot = 1 + rows[0].seq % COUNTER_SLOTS
                        self._count(conn, slot, -len(rows), -body_bytes)
            purged += len(rows)
            if len(rows) < PURGE_BATCH_MAX:
                return purged

    def close(self) -> None:
        if self._closed:
            return
        self._puts.close()
        self._deliveries.close()
        self._closed = True
        self._engine.dispose()


class _GroupLocks:
    """The FIFO group locks (MariaDB user locks) one connection holds."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._held = False

    def take(self, names: Iterable[str], wait_s: int) -> list[str]:
        """The names whose lock was taken. In sorted order, so that two takers that wait
        cannot deadlock."""
        ordered = sorted(names)
        if not ordered:
            return []
        self._held = True
        if wait_s == 0:  # one round trip for them all
            got = self.conn.execute(sa.select(*(sa.func.get_lock(n, 0) for n in ordered))).one()
            return [name for name, ok in zip(ordered, got, strict=True) if ok == 1]
        taken = []
        for name in ordered:
            if self.conn.execute(sa.select(sa.func.get_lock(name, wait_s))).scalar_one() != 1:
                break
            taken.append(name)
        return taken

    def release_all(self) -> None:
        if not self._held:
            return
        try:
            self.conn.exec_driver_sql("DO RELEASE_ALL_LOCKS()")
        except sa_exc.DBAPIError:
            # The server drops a session's user locks with the session: make sure it goes.
            self.conn.invalidate()
            raise


def group_lock_name(database: str, table: str, topic: str, message_group: str) -> str:
    """The MariaDB user lock (GET_LOCK) that claims and requeues of one FIFO group hold while
    they change it. User lock names are server-wide and at most 64 characters."""
    key = f"{database}\0{table}\0{topic}\0{message_group}".encode()
    return f"rocketbox:{hashlib.sha1(key, usedforsecurity=False).hexdigest()}"


def _engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {
        key: value
        for key, value in {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": READ_TIMEOUT_S,
            "write_timeout": WRITE_TIMEOUT_S,
        }.items()
        if key not in url.query  # the URL's own deadlines win
    }
    connect_args["init_command"] = f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}"
    if "charset" not in url.query:
        url = url.update_query_dict({"charset": "utf8mb4"})
    return sa.create_engine(
        url,
        pool_pre_ping=True,
        pool_size=POOL_SIZE,
        max_overflow=POOL_OVERFLOW_MAX,
        pool_timeout=POOL_TIMEOUT_S,
        pool_recycle=POOL_RECYCLE_S,
        # No ROLLBACK round trip as a connection goes back to the pool: every use ends its own
        # transaction (``engine.begin()``, or ``Connection.close()`` rolling back).
        pool_reset_on_return=None,
        # Each statement sees what was committed before it (the FIFO confirmation relies on
        # it), and InnoDB takes no gap locks that would make claims and puts wait on each other.
        isolation_level="READ COMMITTED",
        connect_args=connect_args,
    )


def _no_space(error: BaseException | None) -> bool:
    """A driver error saying the server's disk (or the table's tablespace) is full."""
    args = getattr(error, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    if code in _NO_SPACE_ERRORS:
        return True
    return code == _ER_ERROR_ON_WRITE and "errno: 28" in str(error)


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
