"""The MySQL outbox's changes of many entries at once, for operators and the pull-in:
``requeue``, ``retry_now`` and ``purge``, each in bounded transactions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sqlalchemy as sa

from outbox.backends.mysql.connection import (
    GROUP_LOCK_WAIT_S,
    IN_LIST_MAX,
    MySQLConnection,
    chunks,
)
from outbox.backends.mysql.deadlocks import retried_on_deadlock
from outbox.backends.mysql.schema import (
    COUNTER_SLOTS,
    DEAD,
    PENDING,
)
from outbox.contract_checks import (
    check_purge_state,
)
from outbox.entry import EntryState
from outbox.errors import (
    OutboxUnavailableError,
)

# Rows per transaction in ``requeue``, ``retry_now`` and ``purge``; message ids per ``IN (...)``
# list.
REQUEUE_BATCH_MAX = 500
RETRY_NOW_BATCH_MAX = 500
PURGE_BATCH_MAX = 1_000


class MySQLBulkChanges(MySQLConnection):
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
            for batch in chunks(list(dict.fromkeys(message_ids)), batch_max):
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

    @retried_on_deadlock
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
                self._count(locks.conn, 1 + rows[0].seq % COUNTER_SLOTS, dead=-len(rows))
        return len(rows)

    def retry_now(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        return self._in_batches(
            "retry_now", PENDING, message_ids, RETRY_NOW_BATCH_MAX,
            lambda which, index: self._retry_now_batch(which, index, now_ms),
        )  # fmt: skip

    @retried_on_deadlock
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
            for batch in chunks(sorted(groups), IN_LIST_MAX):
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
                    n, slot = len(rows), 1 + rows[0].seq % COUNTER_SLOTS
                    if state is EntryState.DEAD:
                        body_bytes = sum(int(r.body_size) for r in rows)
                        self._count(conn, slot, entries=-n, body_bytes=-body_bytes, dead=-n)
                    else:
                        self._count(conn, slot, delivered=-n)
            purged += len(rows)
            if len(rows) < PURGE_BATCH_MAX:
                return purged
