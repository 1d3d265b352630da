"""The MySQL outbox's stats: its totals from its counters, its oldest PENDING entry one step down
``ix_state_created``, and what no counter can hold found by a scan, which the sidecars sharing the
outbox leave to one of them at a time (tables: schema.py).

What needs a scan:
- ``in_flight``, the PENDING entries under a live lease. A lease ends by time, with no write, so
  no counter can follow it: it is a count over ``ix_fifo_lease``, the one index that holds
  ``lease_until_ms`` (a pass over every entry's index record, but not over the rows).
- ``next_due_ms``, the first claimable entry on ``ix_due``: one step, but for the FIFO entries
  waiting behind their group's head, which it steps over one by one.

``stats`` (an operator's, ``rocketbox outbox stats``) reads all of it then and there: the
counters change in the transaction of every change they count, so one read of them is as exact
as a count of the entries.

``shared_stats`` (the sidecars' gauges, every few seconds each): the counters and the oldest
entry, read at once by index lookups only; ``in_flight`` and ``next_due_ms`` as the row of
``<table>_stats`` has them. A reader that finds them older than its interval takes the row's
lease, by an UPDATE that succeeds only when the lease has ended or is its own, scans, and
publishes what it found; a reader that cannot take it uses what was published. So one reader
scans per interval, however many share the outbox; when it stops, another takes the lease once
it has run out (``STATS_LEASE_INTERVALS`` intervals). Before the first publication the figures
are 0 and None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from outbox.backends.mysql.connection import MySQLConnection
from outbox.backends.mysql.schema import (
    COUNTER_COLUMNS,
    COUNTER_SLOTS,
    DEAD,
    DELIVERED,
    NAME_CHARS_MAX,
    PENDING,
    STATS_ROW_ID,
    fifo_head,
    not_fifo,
)
from outbox.entry import OutboxStats

# The scan's lease lasts this many of its holder's intervals: it renews it at each, so a holder
# that is slow once keeps it, and a holder that stopped is followed within a few intervals.
STATS_LEASE_INTERVALS = 3


@dataclass(frozen=True, slots=True)
class Totals:
    """What the counters say (or, before they are counted, a count of the entries)."""

    pending: int
    dead: int
    delivered: int
    body_bytes: int

    def stats(self, oldest_ms: int | None, in_flight: int, next_due_ms: int | None) -> OutboxStats:
        return OutboxStats(
            pending=self.pending,
            in_flight=in_flight,
            delivered=self.delivered,
            dead=self.dead,
            bytes=self.body_bytes,
            oldest_pending_created_ms=oldest_ms,
            next_due_ms=next_due_ms,
        )


class MySQLStats(MySQLConnection):
    def stats(self, now_ms: int) -> OutboxStats:
        """Exact when read (module docstring): for operators, not a hot path."""
        with self._transaction("stats") as conn:
            totals, oldest_ms = self._read_totals(conn)
            in_flight, next_due_ms = self._scan_figures(conn, now_ms)
        return totals.stats(oldest_ms, in_flight, next_due_ms)

    def shared_stats(self, now_ms: int, reader: str, interval_ms: int) -> OutboxStats:
        if not 1 <= len(reader) <= NAME_CHARS_MAX:
            raise ValueError(f"reader must be 1 to {NAME_CHARS_MAX} characters, got {len(reader)}")
        if interval_ms < 1:
            raise ValueError(f"interval_ms must be >= 1, got {interval_ms}")
        s = self._tables.stats
        with self._transaction("stats") as conn:
            totals, oldest_ms = self._read_totals(conn)
            published = conn.execute(
                sa.select(s.c.read_ms, s.c.in_flight, s.c.next_due_ms).where(s.c.id == STATS_ROW_ID)
            ).one()
        read_ms, in_flight, next_due_ms = published
        # A reading from another's clock ahead of ours is fresh too.
        if read_ms is None or now_ms - read_ms >= interval_ms:
            lease_until_ms = now_ms + STATS_LEASE_INTERVALS * interval_ms
            if self._take_stats_lease(reader, now_ms, lease_until_ms):
                with self._transaction("stats") as conn:
                    in_flight, next_due_ms = self._scan_figures(conn, now_ms)
                    conn.execute(
                        s.update()
                        .where(s.c.id == STATS_ROW_ID, s.c.reader == reader)
                        .values(read_ms=now_ms, in_flight=in_flight, next_due_ms=next_due_ms)
                    )
        in_flight = 0 if in_flight is None else int(in_flight)
        next_due_ms = None if next_due_ms is None else int(next_due_ms)
        return totals.stats(oldest_ms, in_flight, next_due_ms)

    def _take_stats_lease(self, reader: str, now_ms: int, lease_until_ms: int) -> bool:
        """The scan's lease for ``reader``, if it has ended or is already its own; committed
        at once, so that no other reader waits on the row while this one scans."""
        s = self._tables.stats
        with self._transaction("stats") as conn:
            taken = conn.execute(
                s.update()
                .where(
                    s.c.id == STATS_ROW_ID,
                    sa.or_(s.c.lease_until_ms <= now_ms, s.c.reader == reader),
                )
                .values(reader=reader, lease_until_ms=lease_until_ms)
            )
        return taken.rowcount == 1

    def _read_totals(self, conn: Connection) -> tuple[Totals, int | None]:
        """The counters' sums and the oldest PENDING entry's created_ms, by index lookups
        only: a range of the counters' primary key, one step down ix_state_created."""
        c, t = self._counters, self._entries
        oldest = sa.select(sa.func.min(t.c.created_ms)).where(t.c.state == PENDING)
        row = conn.execute(
            sa.select(
                *(sa.func.sum(c.c[name]) for name in COUNTER_COLUMNS),
                sa.func.count(c.c.dead) + sa.func.count(c.c.delivered),
                oldest.scalar_subquery(),
            ).where(c.c.slot.between(0, COUNTER_SLOTS))
        ).one()
        held, body_bytes, dead, delivered, counted, oldest_ms = tuple(row)
        oldest_ms = None if oldest_ms is None else int(oldest_ms)
        if counted < 2 * (COUNTER_SLOTS + 1):
            return self._count_entries(conn), oldest_ms  # not counted yet (upgrade.py)
        dead = int(dead)
        return Totals(int(held) - dead, dead, int(delivered), int(body_bytes)), oldest_ms

    def _count_entries(self, conn: Connection) -> Totals:
        """The totals by a pass over every entry: for an outbox whose counters are not all
        counted yet."""
        t = self._entries
        by_state = {
            state: (int(n), int(body_bytes))
            for state, n, body_bytes in conn.execute(
                sa.select(
                    t.c.state, sa.func.count(), sa.func.coalesce(sa.func.sum(t.c.body_size), 0)
                ).group_by(t.c.state)
            )
        }
        pending, dead, delivered = (by_state.get(s, (0, 0)) for s in (PENDING, DEAD, DELIVERED))
        return Totals(pending[0], dead[0], delivered[0], pending[1] + dead[1])

    def _scan_figures(self, conn: Connection, now_ms: int) -> tuple[int, int | None]:
        """(in_flight, next_due_ms): what needs a scan (module docstring)."""
        t = self._entries
        in_flight = conn.execute(
            sa.select(sa.func.count())
            .select_from(t)
            .with_hint(t, "FORCE INDEX (ix_fifo_lease)")
            .where(t.c.lease_until_ms > now_ms)
        ).scalar_one()
        # The first claimable entry on the due index: when a claim can next find work.
        next_due_ms: Any = conn.execute(
            sa.select(t.c.due_ms)
            .with_hint(t, "FORCE INDEX (ix_due)")
            .where(t.c.due_ms.is_not(None), sa.or_(not_fifo(t), fifo_head(t)))
            .order_by(t.c.due_ms, t.c.seq)
            .limit(1)
        ).scalar()
        return int(in_flight), None if next_due_ms is None else int(next_due_ms)
