"""The MySQL / MariaDB outbox: InnoDB rows claimed with ``SELECT … FOR UPDATE SKIP LOCKED``.

Durability: ``put`` returns once its transaction has COMMITted. A committed put survives SIGKILL
of the sidecar and the loss of its pod (the data lives on the database server). Surviving a crash
of the server needs InnoDB's ``innodb_flush_log_at_trx_commit=1`` (the default: the redo log is
flushed at every commit); surviving the loss of the server needs replication. Several sidecars
may share one database and one table: every promise of the contract holds between processes,
not only between threads.

URL: ``mysql+pymysql://user:password@host:port/db?table=NAME`` (``table`` defaults to
``rocketbox_outbox``; other query parameters go to the driver). The schema
(outbox/backends/mysql/schema.py) is created when missing by a writer's open; a reader's
(``create=False``) finds the tables or raises OutboxNotFoundError, creating nothing.

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
- ``stats`` reads the totals from ``<table>_counters`` (changed in the transaction of every change
  they count) and the oldest entry one step down an index; ``shared_stats`` (the sidecars'
  gauges) leaves what needs a scan to one sidecar at a time, under a lease (stats.py).
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

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import sqlalchemy as sa

from outbox.backends.mysql.bulk_changes import MySQLBulkChanges
from outbox.backends.mysql.connection import (
    IN_LIST_MAX,
    TABLE_DEFAULT,
    GroupLocks,
    chunks,
)
from outbox.backends.mysql.puts import MySQLPuts
from outbox.backends.mysql.rows import (
    claimed_row_to_entry,
    row_to_entry,
)
from outbox.backends.mysql.schema import (
    PENDING,
)
from outbox.backends.mysql.settlements import MySQLSettlements
from outbox.backends.mysql.stats import MySQLStats
from outbox.contract_checks import (
    check_claim_args,
    check_owner_prefix,
)
from outbox.entry import EntryState, OutboxEntry, OutboxLimits
from outbox.errors import (
    OutboxUnavailableError,
)
from outbox.outbox import OutboxFeatures


class MySQLOutbox(MySQLPuts, MySQLSettlements, MySQLBulkChanges, MySQLStats):
    name = "mysql+pymysql"
    features = OutboxFeatures(shared_by_sidecars=True, survives_process_kill=True)

    @classmethod
    def from_url(cls, url: str, limits: OutboxLimits, *, create: bool = True) -> MySQLOutbox:
        return cls(url, limits, create=create)

    @classmethod
    def label(cls, url: str) -> str:
        """``mysql+pymysql://host:port/database.table``."""
        tables = [value for key, value in parse_qsl(urlsplit(url).query) if key == "table"]
        return f"{super().label(url)}.{tables[-1] if tables else TABLE_DEFAULT}"

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
        for batch in chunks(seqs, IN_LIST_MAX):
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
        self, locks: GroupLocks, fifo: Sequence[Mapping[Any, Any]], now_ms: int
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
