"""The MySQL outbox's tables and the statements of its hot paths (rows.py: the row codec).

``<table>``, one row per entry:

- ``seq`` AUTO_INCREMENT primary key (a FIFO group's order, ``scan``'s cursor); ``message_id``
  unique. Ids, topics and groups use a binary collation: "A" and "a" are two messages.
- ``due_ms``: when a claim may take the row: ``next_send_time_ms`` for an unleased PENDING
  entry, ``lease_until_ms`` for a leased one, so that an expired lease makes the entry due again
  by itself, with no sweeper; NULL for DELIVERED and DEAD. The claim is a range scan of
  ``ix_due (due_ms, seq)`` up to now and nothing else: non-pending rows are not in the range, so
  millions of tombstones cost it nothing (a query that also filters a state the index does not
  lead with is many times slower). Its locking read starts
  where a consistent read found the first claimable row, past the index records that earlier
  claims left delete-marked (``Statements.claim_start``). ``next_send_time_ms``
  itself stays the entry's own next send time: what readers are shown and what ``release``
  returns the entry to.
- ``ix_fifo_head (topic, message_group, state, seq)``: a group's lowest-seq PENDING entry, one
  step down the index. ``ix_fifo_lease (topic, message_group, lease_until_ms)``: the group's
  latest lease end, one step too (``lease_until_ms`` is 0 on every entry not leased, and on
  every entry that is not PENDING).
- ``ix_state_seq`` pages ``scan(state)`` in seq order; ``ix_state_changed`` finds what ``purge``
  deletes; ``ix_state_created`` the oldest PENDING entry (``stats``), one step down the index.
- the body as LONGBLOB and ``body_size``, what the entry counts against the bound (0 once
  delivered: the tombstone drops its body); keys and properties as JSON text.

``<table>_counters``: ``COUNTER_SLOTS + 1`` rows whose sums are the outbox's totals, changed in
the transaction of every change they count: ``entries`` and ``body_bytes``, the PENDING and DEAD
entries and their body bytes (the bound's); ``dead`` and ``delivered``, the DEAD and DELIVERED
entries (so PENDING is ``entries - dead``). Slot 0 is only ever changed by ``put``, which locks
it first; the other changes (``mark_delivered``, ``bury``, ``requeue``, ``purge``) are spread over
the other slots, so that concurrent resend workers and sidecars do not queue on one row.
``dead`` and ``delivered`` came later: NULL in an outbox from before them until a writer's open
counts them (outbox/backends/mysql/upgrade.py), and ``stats`` counts the entries themselves
meanwhile.

``<table>_stats``: one row, the lease of the one reader at a time that scans for what no counter
holds (``in_flight``, the FIFO-aware ``next_due_ms``), and the figures it last published for
the other sidecars' gauges (outbox/backends/mysql/stats.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from outbox.entry import EntryState

# topic, message_id, message_group and lease_owner columns (characters); the sidecar's own
# limits are far below (topic 127, message group 64 bytes).
NAME_CHARS_MAX = 255
# A TEXT column holds 65,535 bytes, 4 per utf8mb4 character at worst.
LAST_ERROR_CHARS_MAX = 16_000
# Decrement rows of ``<table>_counters`` (slot 0 is the puts' own).
COUNTER_SLOTS = 16
# The counters' columns (module docstring).
COUNTER_COLUMNS = ("entries", "body_bytes", "dead", "delivered")
# ``_counters`` is the longest suffix (``_stats`` the other): MySQL identifiers have 64
# characters at most.
TABLE_NAME_CHARS_MAX = 64 - len("_counters")
# The one row of ``<table>_stats``.
STATS_ROW_ID = 1

PENDING = EntryState.PENDING.value
DELIVERED = EntryState.DELIVERED.value
DEAD = EntryState.DEAD.value

_CHARSET = "utf8mb4"
_COLLATION = "utf8mb4_bin"


def _name(name: str, *, nullable: bool = False) -> sa.Column[str]:
    varchar = mysql.VARCHAR(NAME_CHARS_MAX, charset=_CHARSET, collation=_COLLATION)
    return sa.Column(name, varchar, nullable=nullable)


class Tables(NamedTuple):
    entries: sa.Table
    counters: sa.Table
    stats: sa.Table


def tables(name: str) -> Tables:
    """The entries table ``name``, its counters and its stats row, in a metadata of their own."""
    metadata = sa.MetaData()
    entries = sa.Table(
        name,
        metadata,
        sa.Column("seq", mysql.BIGINT, primary_key=True, autoincrement=True),
        _name("message_id"),
        _name("topic"),
        _name("message_group", nullable=True),
        sa.Column("tag", mysql.TEXT(charset=_CHARSET, collation=_COLLATION)),
        sa.Column(
            "keys_json", mysql.MEDIUMTEXT(charset=_CHARSET, collation=_COLLATION), nullable=False
        ),
        sa.Column(
            "properties_json",
            mysql.MEDIUMTEXT(charset=_CHARSET, collation=_COLLATION),
            nullable=False,
        ),
        sa.Column("delivery_timestamp_ms", mysql.BIGINT),
        sa.Column("born_timestamp_ms", mysql.BIGINT, nullable=False),
        sa.Column("delivery_timeout_ms", mysql.BIGINT),
        sa.Column("body", mysql.LONGBLOB, nullable=False),
        sa.Column("body_size", mysql.BIGINT, nullable=False),
        sa.Column("state", mysql.VARCHAR(9, charset="ascii"), nullable=False),
        sa.Column("cause", mysql.VARCHAR(16, charset="ascii"), nullable=False),
        sa.Column("maybe_stored", sa.Boolean, nullable=False),
        sa.Column("attempts", mysql.INTEGER, nullable=False),
        sa.Column("last_error", mysql.TEXT(charset=_CHARSET, collation=_COLLATION), nullable=False),
        sa.Column("created_ms", mysql.BIGINT, nullable=False),
        sa.Column("next_send_time_ms", mysql.BIGINT, nullable=False),
        sa.Column("due_ms", mysql.BIGINT),
        _name("lease_owner", nullable=True),
        sa.Column("lease_until_ms", mysql.BIGINT, nullable=False),
        sa.Column("state_changed_ms", mysql.BIGINT, nullable=False),
        sa.Column("queue_id", mysql.INTEGER),
        sa.Column("queue_offset", mysql.BIGINT),
        sa.Column("delivered_ms", mysql.BIGINT),
        sa.Column("receipt_durable", sa.Boolean),
        sa.UniqueConstraint("message_id", name="uq_message_id"),
        sa.Index("ix_due", "due_ms", "seq"),
        sa.Index("ix_fifo_head", "topic", "message_group", "state", "seq"),
        sa.Index("ix_fifo_lease", "topic", "message_group", "lease_until_ms"),
        sa.Index("ix_state_seq", "state", "seq"),
        sa.Index("ix_state_changed", "state", "state_changed_ms"),
        sa.Index("ix_state_created", "state", "created_ms"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    return Tables(entries, _counters(name, metadata), _stats(name, metadata))


def _counters(name: str, metadata: sa.MetaData) -> sa.Table:
    return sa.Table(
        f"{name}_counters",
        metadata,
        sa.Column("slot", mysql.SMALLINT, primary_key=True, autoincrement=False),
        sa.Column("entries", mysql.BIGINT, nullable=False),
        sa.Column("body_bytes", mysql.BIGINT, nullable=False),
        # NULL: not counted yet (module docstring).
        sa.Column("dead", mysql.BIGINT),
        sa.Column("delivered", mysql.BIGINT),
        mysql_engine="InnoDB",
    )


def _stats(name: str, metadata: sa.MetaData) -> sa.Table:
    return sa.Table(
        f"{name}_stats",
        metadata,
        sa.Column("id", mysql.SMALLINT, primary_key=True, autoincrement=False),
        # The scan's lease: its holder (a reader's name) and until when.
        _name("reader", nullable=True),
        sa.Column("lease_until_ms", mysql.BIGINT, nullable=False),
        # What the holder last published, and when (NULL: never).
        sa.Column("read_ms", mysql.BIGINT),
        sa.Column("in_flight", mysql.BIGINT),
        sa.Column("next_due_ms", mysql.BIGINT),
        mysql_engine="InnoDB",
    )


# -- FIFO conditions, correlated to the outer entries table ----------------------------------------


def not_fifo(t: sa.Table) -> sa.ColumnElement[bool]:
    # An empty group is no group (OutboxEntry.fifo_group).
    return sa.or_(t.c.message_group.is_(None), t.c.message_group == "")


def fifo_head(t: sa.Table) -> sa.ColumnElement[bool]:
    """The outer entry, PENDING, is its group's lowest-seq PENDING entry."""
    lowest = t.alias("lowest_pending")
    # ORDER BY ... LIMIT 1 is one step down ix_fifo_head, however long the group.
    lowest_pending_seq = (
        sa.select(lowest.c.seq)
        .where(
            lowest.c.topic == t.c.topic,
            lowest.c.message_group == t.c.message_group,
            lowest.c.state == PENDING,
        )
        .order_by(lowest.c.seq)
        .limit(1)
        .scalar_subquery()
    )
    return lowest_pending_seq == t.c.seq


def fifo_claimable(t: sa.Table, now_ms: sa.BindParameter[int]) -> sa.ColumnElement[bool]:
    """Not FIFO, or its group's head while no entry of the group holds a live lease (so a
    requeued older entry waits for the one in flight). The outer entry must be due: its own
    lease, if any, has ended, so a live lease in the group is another entry's."""
    leased = t.alias("latest_lease")
    latest_lease_until_ms = (
        sa.select(leased.c.lease_until_ms)
        .where(leased.c.topic == t.c.topic, leased.c.message_group == t.c.message_group)
        .order_by(leased.c.lease_until_ms.desc())
        .limit(1)
        .scalar_subquery()
    )
    return sa.or_(not_fifo(t), sa.and_(fifo_head(t), latest_lease_until_ms <= now_ms))


# What a claim reads of a row: all a PENDING entry can differ in. Its state, lease and (absent)
# receipt are known: 9 columns fewer for the driver to parse, which pymysql does in Python, a
# third of a claim's CPU.
CLAIM_COLUMNS = (
    "seq", "message_id", "topic", "message_group", "tag", "keys_json", "properties_json",
    "delivery_timestamp_ms", "born_timestamp_ms", "delivery_timeout_ms", "body", "cause",
    "maybe_stored", "attempts", "last_error", "created_ms", "next_send_time_ms", "state_changed_ms",
    "lease_owner",
)  # fmt: skip


# -- statements ------------------------------------------------------------------------------------


class Statements:
    """The hot paths' statements, built once with bound parameters only: building them anew
    on every call (correlated subqueries, aliases, a CASE per receipt) cost more CPU than the
    database took to run them."""

    def __init__(self, entries: sa.Table, counters: sa.Table) -> None:
        self._entries = entries
        self._tombstones: dict[int, sa.Update] = {}
        self._build_lookups(entries)
        self._build_counts(counters)
        self._build_claims(entries)

    def _build_lookups(self, t: sa.Table) -> None:
        """By message id: which are stored, the entries, their seqs; and the FIFO groups."""
        ids: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)
        self.ids_stored = sa.select(t.c.message_id).where(t.c.message_id.in_(ids))
        self.entries_by_ids = sa.select(t).where(t.c.message_id.in_(ids))
        self.seqs_by_ids = sa.select(t.c.seq, t.c.message_id).where(t.c.message_id.in_(ids))
        # Locking reads name their index: on a table whose statistics are stale (a young one),
        # the optimizer may find the few PENDING rows by ix_state_seq instead, locking rows it
        # was not asked for, and deadlock with another sidecar's delivery of them.
        self.pending_by_ids = (
            sa.select(t.c.seq, t.c.message_id, t.c.body_size)
            .with_hint(t, "FORCE INDEX (uq_message_id)")
            .where(t.c.message_id.in_(ids), t.c.state == PENDING)
            .with_for_update()
        )

        # Every FIFO group with a PENDING entry: a loose scan of ix_fifo_head (one seek per
        # distinct (topic, group) of the table, whatever the number of entries).
        self.pending_groups = (
            sa.select(t.c.topic, t.c.message_group)
            .with_hint(t, "FORCE INDEX (ix_fifo_head)")
            .distinct()
            .where(t.c.state == PENDING, t.c.message_group != "")
        )

    def _build_counts(self, counters: sa.Table) -> None:
        """The counters: a change of one slot, and the puts' locking read of them."""
        # Params to_slot, and add_<column> for each counter (negative to count out).
        self.count_change = (
            counters.update()
            .where(counters.c.slot == sa.bindparam("to_slot", type_=sa.Integer))
            .values(
                {
                    column: counters.c[column] + sa.bindparam(f"add_{column}", type_=sa.BigInteger)
                    for column in COUNTER_COLUMNS
                }
            )
        )
        others = counters.alias("decrements")

        def others_sum(column: str) -> sa.ScalarSelect[Any]:
            return (
                sa.select(sa.func.coalesce(sa.func.sum(others.c[column]), 0))
                .where(others.c.slot > 0)
                .scalar_subquery()
            )

        # Slot 0 by a locking read (its latest version), the others from the statement's
        # snapshot: see MySQLPuts._lock_put_counts (puts.py).
        self.put_counts = (
            sa.select(
                counters.c.entries,
                counters.c.body_bytes,
                others_sum("entries"),
                others_sum("body_bytes"),
            )
            .where(counters.c.slot == 0)
            .with_for_update()
        )

    def _build_claims(self, t: sa.Table) -> None:
        """A claim's statements: where it starts, its locking read, the FIFO confirmation and
        the lease it writes."""
        seqs: sa.BindParameter[list[int]] = sa.bindparam("seqs", expanding=True)
        # Claims: params now_ms; then from_due_ms, from_seq, limit; then seqs, owner,
        # lease_until_ms.
        now_ms = sa.bindparam("now_ms", type_=sa.BigInteger)
        # Where the claimable entries start on ix_due, by a consistent read. Every claim moves
        # its rows' ix_due records (due_ms becomes the lease's end), and InnoDB keeps the old
        # ones, delete-marked, until its purge gets to them: thousands in a busy drain, in
        # front of the live records. A consistent read steps over them at almost no cost; a
        # locking read pays for each, so a claim loop got slower with every claim until purge
        # caught up.
        self.claim_start = (
            sa.select(t.c.due_ms, t.c.seq)
            .with_hint(t, "FORCE INDEX (ix_due)")
            .where(t.c.due_ms <= now_ms, fifo_claimable(t, now_ms))
            .order_by(t.c.due_ms, t.c.seq)
            .limit(1)
        )
        from_due_ms = sa.bindparam("from_due_ms", type_=sa.BigInteger)
        # The locking read, from there: it sees each row's latest version and skips rows
        # another claim holds; the head test in it reads a consistent snapshot, in which a head
        # that another claim holds locked is still there (not skipped), so the entry behind it
        # is no head. An entry made claimable below the start since (a release) waits for the
        # next claim, as if it had come just after this one.
        self.claim_candidates = (
            sa.select(*(t.c[name] for name in CLAIM_COLUMNS))
            .with_hint(t, "FORCE INDEX (ix_due)")
            .where(
                t.c.due_ms <= now_ms,
                sa.or_(
                    t.c.due_ms > from_due_ms,
                    sa.and_(
                        t.c.due_ms == from_due_ms,
                        t.c.seq >= sa.bindparam("from_seq", type_=sa.BigInteger),
                    ),
                ),
                fifo_claimable(t, now_ms),
            )
            .order_by(t.c.due_ms, t.c.seq)
            .limit(sa.bindparam("limit", type_=sa.Integer))
            .with_for_update(skip_locked=True)
        )
        self.claim_confirm = sa.select(t.c.seq).where(t.c.seq.in_(seqs), fifo_claimable(t, now_ms))
        lease_until_ms = sa.bindparam("lease_until_ms", type_=sa.BigInteger)
        # An entry taken over an expired lease (its owner still set: no outcome recorded) may
        # have been sent: maybe_stored. Set first: MySQL assigns left to right, so a later
        # assignment would see the new owner (MariaDB's SIMULTANEOUS_ASSIGNMENT the old: both
        # read the old owner this way).
        self.claim_lease = (
            t.update()
            .where(t.c.seq.in_(seqs))
            .ordered_values(
                (t.c.maybe_stored, sa.or_(t.c.maybe_stored, t.c.lease_owner.is_not(None))),
                (t.c.lease_owner, sa.bindparam("owner", type_=sa.String)),
                (t.c.lease_until_ms, lease_until_ms),
                (t.c.due_ms, lease_until_ms),
            )
        )

    def tombstones(self, rows_n: int) -> tuple[sa.Update, int]:
        """PENDING → DELIVERED for up to ``rows_max`` entries, each with its own receipt.

        Params ``seqs``, and for i < rows_max: ``seq_i`` (increasing), ``queue_id_i``,
        ``queue_offset_i``, ``delivered_ms_i``, ``durable_i``; unused slots get seqs above every
        real one, so that the seqs stay increasing. One statement per power-of-two size.

        A row finds its receipt by ``ELT(INTERVAL(seq, seq_0, …), value_0, …)``: INTERVAL
        binary-searches the increasing constants for the row's place, ELT picks the value
        there. A ``CASE seq WHEN …`` per field (what this was) tests the arms one by one, which
        cost the server more a row at a batch's full size.
        """
        rows_max = 1 << (rows_n - 1).bit_length()
        statement = self._tombstones.get(rows_max)
        if statement is None:
            t = self._entries
            place = sa.func.interval(
                t.c.seq, *(sa.bindparam(f"seq_{i}", type_=sa.BigInteger) for i in range(rows_max))
            )

            def by_seq(field: str) -> sa.Function[Any]:
                return sa.func.elt(place, *(sa.bindparam(f"{field}_{i}") for i in range(rows_max)))

            statement = (
                t.update()
                .where(t.c.seq.in_(sa.bindparam("seqs", expanding=True)))
                .values(
                    state=DELIVERED,
                    body=b"",
                    body_size=0,
                    due_ms=None,
                    lease_owner=None,
                    lease_until_ms=0,
                    state_changed_ms=by_seq("delivered_ms"),
                    queue_id=by_seq("queue_id"),
                    queue_offset=by_seq("queue_offset"),
                    delivered_ms=by_seq("delivered_ms"),
                    receipt_durable=by_seq("durable"),
                )
            )
            self._tombstones[rows_max] = statement
        return statement, rows_max
