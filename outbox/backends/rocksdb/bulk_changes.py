"""The RocksDB outbox's changes of many entries at once, for operators and the pull-in:
``requeue``, ``retry_now`` and ``purge``, each in bounded batches (one write each) so that no
call holds the lock for long."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from outbox.backends.rocksdb.indexes import RocksDBIndexes
from outbox.backends.rocksdb.layout import (
    CHANGED,
    PENDING_STATE,
    STATE,
    STATE_CODE,
    STATE_VALUE,
    TOP,
    U64,
    expect,
    state_key,
    u64,
)
from outbox.backends.rocksdb.store import retried_after_no_space, rocksdb_errors
from outbox.contract_checks import (
    check_purge_state,
    may_retry_now,
    requeued_entry,
)
from outbox.entry import EntryState

PURGE_BATCH_MAX = 10_000


REQUEUE_BATCH_MAX = 1_000


RETRY_NOW_BATCH_MAX = 1_000


class RocksDBBulkChanges(RocksDBIndexes):
    def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        u64(now_ms)
        if message_ids is not None:
            return _listed_in_batches(
                message_ids, REQUEUE_BATCH_MAX, lambda ids: self._requeue_batch(ids, now_ms)
            )
        requeued = 0
        dead = STATE + STATE_CODE[EntryState.DEAD]
        while True:
            with self._lock, rocksdb_errors(self.path):
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
            with self._lock, rocksdb_errors(self.path):
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

    @retried_after_no_space
    def purge(self, state: EntryState, before_ms: int) -> int:
        check_purge_state(state)
        if before_ms <= 0:
            return 0
        by_change = CHANGED + STATE_CODE[state]
        purged = 0
        while True:
            with self._lock, rocksdb_errors(self.path):
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

    @retried_after_no_space
    def _requeue_batch(self, message_ids: Sequence[str], now_ms: int) -> int:
        with self._lock, rocksdb_errors(self.path):
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

    @retried_after_no_space
    def _retry_now_batch(self, message_ids: Sequence[str], now_ms: int) -> int:
        with self._lock, rocksdb_errors(self.path):
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


def _listed_in_batches(
    message_ids: Sequence[str], batch_max: int, apply: Callable[[Sequence[str]], int]
) -> int:
    """``apply`` to the distinct ``message_ids``, at most ``batch_max`` at a time (one write
    each); the sum of what the batches changed."""
    ids = list(dict.fromkeys(message_ids))
    return sum(apply(ids[i : i + batch_max]) for i in range(0, len(ids), batch_max))
