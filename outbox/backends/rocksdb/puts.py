"""The RocksDB outbox's puts: concurrent ``put`` callers and the requests of a ``put_groups``
are staged by one committer thread (outbox/group_commit.py) in one WriteBatch, written under
the lock and fsynced after it (outbox/backends/rocksdb/outbox.py: durability)."""

from __future__ import annotations

from collections.abc import Sequence

from outbox.backends.rocksdb.indexes import RocksDBIndexes
from outbox.backends.rocksdb.layout import (
    SEQ_KEY,
    group_prefix,
    u64,
)
from outbox.backends.rocksdb.state import Txn
from outbox.backends.rocksdb.store import RetryAfterNoSpaceError, rocksdb_errors
from outbox.contract_checks import (
    check_put_entries,
    with_seq,
)
from outbox.entry import OutboxEntry
from outbox.errors import OutboxError
from outbox.group_commit import Result


class RocksDBPuts(RocksDBIndexes):
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

    def _commit(self, requests: Sequence[Sequence[OutboxEntry]]) -> list[Result]:
        refusal = self._space_refusal()
        if refusal is not None:
            return [refusal] * len(requests)
        try:
            with rocksdb_errors(self.path):
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
        except RetryAfterNoSpaceError:
            # Puts are what a full disk refuses: not tried again in the reserve's room.
            return [self._no_space_error()] * len(requests)

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
