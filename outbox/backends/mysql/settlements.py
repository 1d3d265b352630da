"""The MySQL outbox's settlements of resends: tombstones (``mark_delivered``, batched by a
committer into one UPDATE), and ``reschedule``, ``bury`` and ``release``, each one UPDATE of a
row whose lease is the caller's."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from outbox.backends.mysql.connection import (
    MySQLConnection,
)
from outbox.backends.mysql.deadlocks import retried_on_deadlock
from outbox.backends.mysql.schema import (
    COUNTER_SLOTS,
    DEAD,
    LAST_ERROR_CHARS_MAX,
    PENDING,
)
from outbox.entry import DeliveryReceipt

_NO_RECEIPT = DeliveryReceipt(queue_id=0, queue_offset=0, delivered_ms=0)


def counter_slot(message_id: str) -> int:
    """The counter row a change of this entry (or of a batch it leads) counts in: spread over
    the slots other than the puts' own."""
    return 1 + zlib.crc32(message_id.encode()) % COUNTER_SLOTS


class MySQLSettlements(MySQLConnection):
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

    @retried_on_deadlock
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
                slot = counter_slot(requests[0][0])
                n = len(receipts)
                self._count(conn, slot, entries=-n, body_bytes=-body_bytes, delivered=n)
        return answers

    def _update_leased(
        self,
        operation: str,
        message_id: str,
        owner: str,
        values: Mapping[str, Any],
        **counted: int,
    ) -> bool:
        """Change a PENDING entry that ``owner`` holds the lease of; and if it did, add
        ``counted`` to the counters (connection.py ``_count``)."""
        t = self._entries
        with self._transaction(operation) as conn:
            result = conn.execute(
                t.update()
                .where(t.c.message_id == message_id, t.c.state == PENDING, t.c.lease_owner == owner)
                .values(**values)
            )
            changed = result.rowcount == 1
            if changed and counted:
                self._count(conn, counter_slot(message_id), **counted)
        return changed

    @retried_on_deadlock
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

    @retried_on_deadlock
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
            dead=1,
        )

    def release(self, message_id: str, owner: str) -> bool:
        t = self._entries
        return self._update_leased(
            "release",
            message_id,
            owner,
            {"due_ms": t.c.next_send_time_ms, "lease_owner": None, "lease_until_ms": 0},
        )
