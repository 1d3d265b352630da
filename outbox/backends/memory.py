"""The reference outbox: a dict under a lock. URL ``memory://``.

Durability: none. Everything is lost with the process; it exists so that the other backends have
something obviously correct to be compared with (tests/outbox/conformance/), and for tests
and demos. Each ``from_url`` opens a new, empty outbox: nothing is shared between instances.

Every method is a direct reading of the contract (outbox/outbox.py): claims look at every entry,
FIFO heads are computed on the spot. That is O(entries) per call, which is the price of being
obviously right. Only the bound's two counters are kept as they go, so that a put costs
O(its entries); every write goes through ``_store``/``_delete``, which keep them, and ``stats``
checks them against a recount.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from urllib.parse import urlsplit

from outbox.contract_checks import (
    buried_entry,
    check_claim_args,
    check_owner_prefix,
    check_purge_state,
    check_put_entries,
    claimed_entry,
    due_score,
    lease_ended,
    may_retry_now,
    released_entry,
    requeued_entry,
    rescheduled_entry,
)
from outbox.entry import (
    DeliveryReceipt,
    EntryState,
    OutboxEntry,
    OutboxLimits,
    OutboxStats,
)
from outbox.errors import OutboxConfigError, OutboxUnavailableError
from outbox.factory import redact
from outbox.outbox import Outbox, OutboxFeatures


class MemoryOutbox(Outbox):
    name = "memory"
    features = OutboxFeatures(shared_by_sidecars=False, survives_process_kill=False)

    def __init__(self, limits: OutboxLimits) -> None:
        super().__init__(limits)
        self._lock = threading.Lock()
        # Insertion order is seq order (seq only grows), which scan relies on.
        self._entries: dict[str, OutboxEntry] = {}
        self._last_seq = 0
        self._closed = False
        # What the bound counts: PENDING and DEAD entries, and their body bytes.
        self._held_entries = 0
        self._held_bytes = 0

    @classmethod
    def from_url(cls, url: str, limits: OutboxLimits, *, create: bool = True) -> MemoryOutbox:
        # Nothing outlives the process: there is never an existing one to find, so never NotFound.
        del create
        parts = urlsplit(url)
        if parts.scheme != "memory" or parts.netloc or parts.path not in ("", "/") or parts.query:
            raise OutboxConfigError(
                f"outbox URL {redact(url)!r}: the memory outbox takes no options"
            )
        return cls(limits)

    def put(self, entries: Sequence[OutboxEntry]) -> list[OutboxEntry]:
        check_put_entries(entries)
        with self._lock:
            self._check_open()
            new: dict[str, OutboxEntry] = {}
            for entry in entries:
                if entry.message_id not in self._entries:
                    new.setdefault(entry.message_id, entry)
            entries_after = self._held_entries + len(new)
            bytes_after = self._held_bytes + sum(e.body_bytes for e in new.values())
            full = self.limits.refusal(entries_after, bytes_after)
            if full is not None:
                raise full
            for entry in new.values():
                self._last_seq += 1
                self._store(replace(entry, seq=self._last_seq))
            return [self._entries[e.message_id] for e in entries]

    def get(self, message_id: str) -> OutboxEntry | None:
        with self._lock:
            return self._entries.get(message_id)

    def has_pending_group(self, topic: str, message_group: str) -> bool:
        with self._lock:
            return any(
                e.state is EntryState.PENDING and e.fifo_group == (topic, message_group)
                for e in self._entries.values()
            )

    def pending_groups(self) -> set[tuple[str, str]]:
        with self._lock:
            return {
                group
                for e in self._entries.values()
                if e.state is EntryState.PENDING and (group := e.fifo_group) is not None
            }

    def claim_due(self, now_ms: int, limit: int, lease_ms: int, owner: str) -> list[OutboxEntry]:
        check_claim_args(lease_ms, owner)
        with self._lock:
            self._check_open()
            heads = self._fifo_heads()
            # A group with an entry in flight sends nothing else until it comes back.
            busy = {e.fifo_group for e in self._entries.values() if e.leased(now_ms)}
            due = [
                e
                for e in self._entries.values()
                if e.state is EntryState.PENDING
                and e.next_send_time_ms <= now_ms
                and not e.leased(now_ms)
                and (
                    e.fifo_group is None
                    or (heads[e.fifo_group] == e.seq and e.fifo_group not in busy)
                )
            ]
            # Soonest first by when each became claimable: an entry whose lease ran out became
            # claimable again at the lease's end, not at its next send time.
            due.sort(key=lambda e: (due_score(e), e.seq))
            claimed = []
            for entry in due[: max(limit, 0)]:
                leased = claimed_entry(entry, owner, now_ms + lease_ms)
                self._store(leased)
                claimed.append(leased)
            return claimed

    def expire_leases(self, owner_prefix: str, now_ms: int) -> int:
        check_owner_prefix(owner_prefix)
        with self._lock:
            self._check_open()
            dead = [
                e
                for e in self._entries.values()
                if e.state is EntryState.PENDING
                and e.lease_owner is not None
                and e.lease_owner.startswith(owner_prefix)
            ]
            for entry in dead:
                self._store(lease_ended(entry))
            return len(dead)

    def mark_delivered(self, message_id: str, receipt: DeliveryReceipt) -> bool:
        with self._lock:
            entry = self._entries.get(message_id)
            if entry is None or entry.state is not EntryState.PENDING:
                return False
            self._store(entry.delivered(receipt))
            return True

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
        return self._settle_leased(
            message_id,
            owner,
            lambda entry: rescheduled_entry(entry, next_send_time_ms, error, maybe_stored),
        )

    def bury(self, message_id: str, owner: str, error: str, now_ms: int) -> bool:
        return self._settle_leased(message_id, owner, lambda e: buried_entry(e, error, now_ms))

    def release(self, message_id: str, owner: str) -> bool:
        return self._settle_leased(message_id, owner, released_entry)

    def _settle_leased(
        self, message_id: str, owner: str, settle: Callable[[OutboxEntry], OutboxEntry]
    ) -> bool:
        """Replace ``owner``'s leased entry with ``settle(entry)``; False when the lease is not
        (or no longer) ``owner``'s."""
        with self._lock:
            entry = self._owned(message_id, owner)
            if entry is None:
                return False
            self._store(settle(entry))
            return True

    def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        with self._lock:
            ids = list(self._entries) if message_ids is None else list(dict.fromkeys(message_ids))
            requeued = 0
            for message_id in ids:
                entry = self._entries.get(message_id)
                if entry is None or entry.state is not EntryState.DEAD:
                    continue
                self._store(requeued_entry(entry, now_ms))
                requeued += 1
            return requeued

    def retry_now(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        with self._lock:
            ids = list(self._entries) if message_ids is None else list(dict.fromkeys(message_ids))
            busy = {e.fifo_group for e in self._entries.values() if e.leased(now_ms)}
            changed = 0
            for message_id in ids:
                entry = self._entries.get(message_id)
                if entry is None or not may_retry_now(entry, now_ms, busy):
                    continue
                self._store(replace(entry, next_send_time_ms=now_ms))
                changed += 1
            return changed

    def purge(self, state: EntryState, before_ms: int) -> int:
        check_purge_state(state)
        with self._lock:
            doomed = [
                e.message_id
                for e in self._entries.values()
                if e.state is state and e.state_changed_ms < before_ms
            ]
            for message_id in doomed:
                self._delete(message_id)
            return len(doomed)

    def stats(self, now_ms: int) -> OutboxStats:
        with self._lock:
            pending = [e for e in self._entries.values() if e.state is EntryState.PENDING]
            dead = [e for e in self._entries.values() if e.state is EntryState.DEAD]
            heads = self._fifo_heads()
            claimable = [e for e in pending if e.fifo_group is None or heads[e.fifo_group] == e.seq]
            held_bytes = sum(e.body_bytes for e in pending) + sum(e.body_bytes for e in dead)
            assert (self._held_entries, self._held_bytes) == (len(pending) + len(dead), held_bytes)
            return OutboxStats(
                pending=len(pending),
                in_flight=sum(1 for e in pending if e.leased(now_ms)),
                delivered=len(self._entries) - len(pending) - len(dead),
                dead=len(dead),
                bytes=held_bytes,
                oldest_pending_created_ms=min((e.created_ms for e in pending), default=None),
                next_due_ms=min((due_score(e) for e in claimable), default=None),
            )

    def scan(self, state: EntryState | None, after_seq: int, limit: int) -> list[OutboxEntry]:
        with self._lock:
            page: list[OutboxEntry] = []
            for entry in self._entries.values():
                if len(page) >= limit:
                    break
                if entry.seq > after_seq and (state is None or entry.state is state):
                    page.append(entry)
            return page

    def check_writable(self) -> None:
        with self._lock:
            self._check_open()

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _store(self, entry: OutboxEntry) -> None:
        """Every write of an entry: the bound's counters follow it."""
        old = self._entries.get(entry.message_id)
        if old is not None:
            self._count(old, -1)
        self._entries[entry.message_id] = entry  # an update keeps its place: seq order stays
        self._count(entry, 1)

    def _delete(self, message_id: str) -> None:
        self._count(self._entries.pop(message_id), -1)

    def _count(self, entry: OutboxEntry, sign: int) -> None:
        if entry.state is not EntryState.DELIVERED:
            self._held_entries += sign
            self._held_bytes += sign * entry.body_bytes

    def _check_open(self) -> None:
        if self._closed:
            raise OutboxUnavailableError("memory outbox is closed")

    def _owned(self, message_id: str, owner: str) -> OutboxEntry | None:
        entry = self._entries.get(message_id)
        if entry is None or entry.state is not EntryState.PENDING or entry.lease_owner != owner:
            return None
        return entry

    def _fifo_heads(self) -> dict[tuple[str, str], int]:
        """(topic, message group) → the lowest seq among its PENDING entries."""
        heads: dict[tuple[str, str], int] = {}
        for entry in self._entries.values():
            group = entry.fifo_group
            if group is not None and entry.state is EntryState.PENDING:
                heads[group] = min(heads.get(group, entry.seq), entry.seq)
        return heads
