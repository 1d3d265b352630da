"""An operator's questions about an outbox, answered through the contract alone, so that every
backend answers them alike (``rocketbox outbox``, rocketbox/outbox_cli.py).

Each reads entries by paging ``scan`` in ``seq`` order, ``SCAN_PAGE_MAX`` at a time: it costs a
pass over the entries it reads (for a breakdown, all of them) and never holds more than a page
and its own tallies in memory.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from outbox.entry import EntryState, OutboxEntry, SpoolCause
from outbox.outbox import SCAN_PAGE_MAX, Outbox

# Attempts histogram buckets: (lowest, highest or None for no end, label). Powers of two: a
# back-off doubles with each attempt, so each bucket spans about as much time as the ones before.
ATTEMPTS_BUCKETS: tuple[tuple[int, int | None, str], ...] = (
    (0, 0, "0"),
    (1, 1, "1"),
    (2, 3, "2-3"),
    (4, 7, "4-7"),
    (8, 15, "8-15"),
    (16, None, "16+"),
)
# The order states are reported in: what still needs sending first.
STATE_ORDER = (EntryState.PENDING, EntryState.DEAD, EntryState.DELIVERED)


def attempts_bucket(attempts: int) -> str:
    for lowest, highest, label in ATTEMPTS_BUCKETS:
        if attempts >= lowest and (highest is None or attempts <= highest):
            return label
    raise ValueError(f"attempts must be >= 0, got {attempts}")


@dataclass(frozen=True, slots=True)
class Depth:
    entries: int
    body_bytes: int


@dataclass(frozen=True, slots=True)
class Breakdown:
    """What a pass over every entry found."""

    scanned: int
    # (state, topic, cause) → entries and their body bytes (0 for delivered tombstones).
    depth: dict[tuple[EntryState, str, SpoolCause], Depth]
    # state → attempts bucket label → entries, every bucket present.
    attempts: dict[EntryState, dict[str, int]]


def breakdown(outbox: Outbox) -> Breakdown:
    """Depth by (state, topic, cause) and the attempts histogram per state: reads every entry."""
    entries: Counter[tuple[EntryState, str, SpoolCause]] = Counter()
    body_bytes: Counter[tuple[EntryState, str, SpoolCause]] = Counter()
    attempts: dict[EntryState, Counter[str]] = {state: Counter() for state in STATE_ORDER}
    scanned = 0
    for entry in outbox.scan_all():
        cell = (entry.state, entry.message.topic, entry.cause)
        entries[cell] += 1
        body_bytes[cell] += entry.body_bytes
        attempts[entry.state][attempts_bucket(entry.attempts)] += 1
        scanned += 1
    rank = {state: i for i, state in enumerate(STATE_ORDER)}
    cells = sorted(entries, key=lambda c: (rank[c[0]], c[1], c[2].value))
    return Breakdown(
        scanned=scanned,
        depth={cell: Depth(entries[cell], body_bytes[cell]) for cell in cells},
        attempts={
            state: {label: attempts[state][label] for _, _, label in ATTEMPTS_BUCKETS}
            for state in STATE_ORDER
        },
    )


@dataclass(frozen=True, slots=True)
class EntryFilter:
    """Which entries a listing shows; every condition given must hold. Ages are by
    ``created_ms``: when the message was first spooled."""

    state: EntryState | None = None
    topics: frozenset[str] = field(default_factory=frozenset)
    cause: SpoolCause | None = None
    key: str | None = None
    # created_ms <= this: at least this old.
    created_at_or_before_ms: int | None = None
    # created_ms > this: younger than that.
    created_after_ms: int | None = None

    def matches(self, entry: OutboxEntry) -> bool:
        m = entry.message
        return (
            (self.state is None or entry.state is self.state)
            and (not self.topics or m.topic in self.topics)
            and (self.cause is None or entry.cause is self.cause)
            and (self.key is None or self.key in m.keys)
            and (
                self.created_at_or_before_ms is None
                or entry.created_ms <= self.created_at_or_before_ms
            )
            and (self.created_after_ms is None or entry.created_ms > self.created_after_ms)
        )


@dataclass(frozen=True, slots=True)
class EntryPage:
    entries: list[OutboxEntry]
    # Pass as ``after_seq`` for the next page; None once the listing has reached the end.
    next_after_seq: int | None


def list_entries(outbox: Outbox, which: EntryFilter, after_seq: int, limit: int) -> EntryPage:
    """Up to ``limit`` entries with ``seq > after_seq`` that ``which`` matches, in seq order.

    A page that fills up gives its last seq as the cursor, even if nothing matches beyond it
    (finding out would mean reading on, possibly to the end).
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    found: list[OutboxEntry] = []
    cursor = after_seq
    while True:
        page = outbox.scan(which.state, cursor, SCAN_PAGE_MAX)
        for entry in page:
            if which.matches(entry):
                found.append(entry)
                if len(found) == limit:
                    return EntryPage(found, entry.seq)
        if len(page) < SCAN_PAGE_MAX:
            return EntryPage(found, None)
        cursor = page[-1].seq


def count_purgeable(outbox: Outbox, state: EntryState, before_ms: int) -> int:
    """How many entries ``purge(state, before_ms)`` would delete now."""
    return sum(1 for e in outbox.scan_all(state) if e.state_changed_ms < before_ms)


class DrainMeter:
    """The drain rate of ``watch``: tombstones added per second between two samples."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None  # (monotonic s, delivered) of a sample

    def sample(self, taken_s: float, delivered: int) -> tuple[float | None, float | None]:
        """(delivered per second, seconds) since the previous sample; both None on the first,
        the rate None when the count fell (tombstones were purged meanwhile: unknown)."""
        last, self._last = self._last, (taken_s, delivered)
        if last is None:
            return None, None
        elapsed_s = taken_s - last[0]
        if delivered < last[1] or elapsed_s <= 0:
            return None, elapsed_s
        return (delivered - last[1]) / elapsed_s, elapsed_s
