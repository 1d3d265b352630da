"""How the RocksDB outbox's indexes (layout.py) and its in-memory state (state.py) move together
when an entry enters PENDING, changes within it, or leaves it; each step stages its writes in
the caller's ``Txn``, under the store's lock."""

from __future__ import annotations

import heapq
from dataclasses import replace

from outbox.backends.rocksdb.layout import (
    CREATED,
    DUE,
    GROUP,
    PENDING_STATE,
    STATE_VALUE,
    TOP,
    U64,
    changed_key,
    created_key,
    due_key,
    expect,
    group_key,
    group_prefix,
    state_key,
    state_value,
    u64,
)
from outbox.backends.rocksdb.state import Txn
from outbox.backends.rocksdb.store import RocksDBStore
from outbox.entry import EntryState, OutboxEntry


class RocksDBIndexes(RocksDBStore):
    """The transitions every change goes through: the indexes and the in-memory state agree."""

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

    def _busy_groups(self, txn: Txn, now_ms: int) -> set[tuple[str, str] | None]:
        """The FIFO groups of the entries under a live lease (the leases are in memory; there
        are as many as resends in flight)."""
        busy: set[tuple[str, str] | None] = set()
        for message_id, (lease_until_ms, _) in self._state.leases.items():
            if lease_until_ms > now_ms:
                busy.add(expect(txn.get(message_id), EntryState.PENDING, message_id).fifo_group)
        return busy

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
