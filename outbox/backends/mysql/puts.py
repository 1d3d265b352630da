"""The MySQL outbox's puts: concurrent ``put`` callers and the requests of a ``put_groups`` share
one transaction (outbox/group_commit.py), which locks the puts' counter row first, so the bound
is exact across sidecars."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Connection

from outbox.backends.mysql.connection import (
    IN_LIST_MAX,
    MySQLConnection,
    chunks,
)
from outbox.backends.mysql.rows import (
    as_stored,
    entry_to_row,
)
from outbox.backends.mysql.schema import (
    NAME_CHARS_MAX,
)
from outbox.contract_checks import (
    check_put_entries,
)
from outbox.entry import OutboxEntry
from outbox.errors import (
    EntryTooLargeError,
    OutboxError,
    OutboxFullError,
)
from outbox.group_commit import Result


class MySQLPuts(MySQLConnection):
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
                self._count(
                    conn, 0, entries=len(new), body_bytes=sum(e.body_bytes for e in new.values())
                )
                # Read back rather than assumed consecutive: with auto_increment_increment > 1
                # (multi-primary setups) they are not.
                for batch in chunks(list(new), IN_LIST_MAX):
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

    def _stored_ids(self, conn: Connection, message_ids: Sequence[str]) -> list[str]:
        """Which of ``message_ids`` are stored (read from the unique index alone)."""
        found: list[str] = []
        for batch in chunks(message_ids, IN_LIST_MAX):
            found.extend(conn.execute(self._sql.ids_stored, {"ids": batch}).scalars())
        return found
