"""The contract's rules that every backend applies the same way (outbox/outbox.py states them):
what each operation takes (the ``check_*`` functions raise ValueError for a caller's bug), and
the changes an entry goes through (claimed, lease ended, rescheduled, requeued), written once so
that the four backends cannot read the contract four ways. Backends that change entries inside
the store (Lua scripts, SQL) follow these same rules there; the conformance suite holds them to
it.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import replace

from outbox.entry import EntryState, OutboxEntry, evolve


def check_owner_prefix(owner_prefix: str) -> None:
    """What ``expire_leases`` takes, on every backend: a prefix naming some owners, not all."""
    if not owner_prefix:
        raise ValueError("expire_leases needs a non-empty owner prefix (it would end every lease)")


def check_put_entries(entries: Sequence[OutboxEntry]) -> None:
    """What ``put`` takes, on every backend: new entries (ValueError otherwise)."""
    for entry in entries:
        if entry.state is not EntryState.PENDING:
            raise ValueError(f"put takes PENDING entries; {entry.message_id} is {entry.state}")
        if entry.lease_owner is not None:
            raise ValueError(f"put takes unleased entries; {entry.message_id} is leased")
        if min(entry.created_ms, entry.next_send_time_ms, entry.state_changed_ms) < 0:
            raise ValueError(f"put takes times in ms since the epoch; {entry.message_id} has < 0")


def check_claim_args(lease_ms: int, owner: str) -> None:
    # A lease of 0 ms would leave a claimed entry due at once: two workers could hold it.
    if lease_ms < 1:
        raise ValueError(f"lease_ms must be >= 1, got {lease_ms}")
    if not owner:
        raise ValueError("a claim needs a non-empty owner")


def check_purge_state(state: EntryState) -> None:
    if state is EntryState.PENDING:
        raise ValueError("PENDING entries are never purged: that would lose messages")


def may_retry_now(
    entry: OutboxEntry, now_ms: int, busy_groups: Container[tuple[str, str] | None]
) -> bool:
    """Whether ``retry_now`` makes this entry due now (outbox/outbox.py says why each is not):
    PENDING, due later, not under a live lease, and not of a FIFO group in ``busy_groups``
    (those with an entry under a live lease)."""
    return (
        entry.state is EntryState.PENDING
        and entry.next_send_time_ms > now_ms
        and not entry.leased(now_ms)
        and (entry.fifo_group is None or entry.fifo_group not in busy_groups)
    )


def due_score(entry: OutboxEntry) -> int:
    """When a claimable entry can next be claimed: its next send time, or the end of its lease.

    The indexed backends key their due index by this, so that one range scan up to ``now_ms``
    finds entries both due and not under a live lease.
    """
    if entry.lease_owner is None:
        return entry.next_send_time_ms
    return max(entry.next_send_time_ms, entry.lease_until_ms)


def claimed_entry(entry: OutboxEntry, owner: str, lease_until_ms: int) -> OutboxEntry:
    """``entry`` leased to ``owner``. Over an expired lease (its owner is still set: no outcome
    was recorded) it is ``maybe_stored``: the holder may have sent it before it died."""
    return evolve(
        entry,
        lease_owner=owner,
        lease_until_ms=lease_until_ms,
        maybe_stored=entry.maybe_stored or entry.lease_owner is not None,
    )


def lease_ended(entry: OutboxEntry) -> OutboxEntry:
    """``expire_leases``' change: unleased, due at its next send time, and ``maybe_stored``."""
    return evolve(entry, lease_owner=None, lease_until_ms=0, maybe_stored=True)


def with_seq(entry: OutboxEntry, seq: int) -> OutboxEntry:
    """``replace(entry, seq=seq)``, cheaply: a put does this once per entry, on the committer
    thread every concurrent put waits for."""
    return evolve(entry, seq=seq)


def requeued_entry(entry: OutboxEntry, now_ms: int) -> OutboxEntry:
    """DEAD → PENDING: due now, attempts reset; the last error stays for the record."""
    return replace(
        entry,
        state=EntryState.PENDING,
        attempts=0,
        next_send_time_ms=now_ms,
        lease_owner=None,
        lease_until_ms=0,
        state_changed_ms=now_ms,
    )


def rescheduled_entry(
    entry: OutboxEntry, next_send_time_ms: int, error: str, maybe_stored: bool
) -> OutboxEntry:
    """A failed resend: attempts + 1, the error kept, unleased, due at ``next_send_time_ms``.

    ``maybe_stored`` only ever sets the flag: an entry an earlier attempt may have stored stays
    so whatever a later attempt's failure says, or its resend would skip the duplicate check.
    """
    return replace(
        entry,
        attempts=entry.attempts + 1,
        last_error=error,
        next_send_time_ms=next_send_time_ms,
        lease_owner=None,
        lease_until_ms=0,
        maybe_stored=entry.maybe_stored or maybe_stored,
    )


def buried_entry(entry: OutboxEntry, error: str, now_ms: int) -> OutboxEntry:
    """PENDING → DEAD: attempts + 1 as for a reschedule, the error kept for operators."""
    return replace(
        entry,
        state=EntryState.DEAD,
        attempts=entry.attempts + 1,
        last_error=error,
        lease_owner=None,
        lease_until_ms=0,
        state_changed_ms=now_ms,
    )


def released_entry(entry: OutboxEntry) -> OutboxEntry:
    """A lease given back unused: claimable at once, nothing else changed."""
    return replace(entry, lease_owner=None, lease_until_ms=0)
