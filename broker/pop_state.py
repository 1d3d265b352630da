"""What pop consumption keeps per consumer group, topic and queue (pop_message.py): the consume
progress (``ack_offset`` and the offsets done out of order), the messages in flight with their
receipt handles, and, for concurrent groups, the cursor of new messages and the heap of
invisibility expiries.

Receipt handles must differ per delivery (a superseded one is then stale) and not be guessable
from outside: ``<queue id>.<queue offset>.<salt><counter>``, a random salt per broker run plus a
counter (a urandom call per message cost more than the rest of making the handle).
"""

from __future__ import annotations

import heapq
import itertools
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

# The expiry heap keeps superseded entries until they surface; past this many per message in
# flight (plus a floor) it is rebuilt from what is in flight, so it cannot grow without bound.
EXPIRY_HEAP_SLACK = 2
EXPIRY_HEAP_FLOOR = 256


class InvalidReceiptHandleError(Exception):
    """A receipt handle that is unknown, stale (superseded or expired and redelivered) or done."""


@dataclass(slots=True)
class InFlight:
    phy_offset: int
    size: int
    attempt: int
    invisible_until_ms: int
    handle: str
    message_group: str | None


@dataclass(slots=True)
class QueueState:
    ack_offset: int
    done: set[int] = field(default_factory=set)
    inflight: dict[int, InFlight] = field(default_factory=dict)
    # Concurrent groups: every offset in [ack_offset, scan_offset) is done or in flight.
    scan_offset: int = -1
    # (invisible_until_ms, queue_offset, handle) per hand-out; an entry whose handle is no longer
    # the offset's current one (acked, or handed out again) is stale and skipped when met.
    expiries: list[tuple[int, int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scan_offset = max(self.scan_offset, self.ack_offset)

    def mark_done(self, offset: int) -> bool:
        """Returns True when the ack offset moved."""
        self.inflight.pop(offset, None)
        if offset < self.ack_offset:
            return False
        self.done.add(offset)
        moved = False
        while self.ack_offset in self.done:
            self.done.remove(self.ack_offset)
            self.ack_offset += 1
            moved = True
        self.scan_offset = max(self.scan_offset, self.ack_offset)
        return moved

    def advance_to(self, ack_offset: int, done: Iterable[int]) -> None:
        """Take a master's progress (a slave's sync): nothing it has done comes back here."""
        if ack_offset > self.ack_offset:
            for offset in [o for o in self.inflight if o < ack_offset]:
                del self.inflight[offset]
            self.done = {o for o in self.done if o >= ack_offset}
            self.ack_offset = ack_offset
        for offset in done:
            self.mark_done(offset)
        self.scan_offset = max(self.scan_offset, self.ack_offset)

    def hand_out(self, offset: int, flight: InFlight) -> None:
        self.inflight[offset] = flight
        self.push_expiry(offset, flight)

    def push_expiry(self, offset: int, flight: InFlight) -> None:
        heap = self.expiries
        if len(heap) > EXPIRY_HEAP_SLACK * len(self.inflight) + EXPIRY_HEAP_FLOOR:
            heap[:] = [(f.invisible_until_ms, o, f.handle) for o, f in self.inflight.items()]
            heapq.heapify(heap)
            if offset in self.inflight:  # already in the rebuilt heap
                return
        heapq.heappush(heap, (flight.invisible_until_ms, offset, flight.handle))

    def pop_expired(self, now_ms: int) -> tuple[int, InFlight] | None:
        """The in-flight message whose invisibility expired first (by ``now_ms``), if any."""
        heap = self.expiries
        while heap and heap[0][0] <= now_ms:
            until, offset, handle = heapq.heappop(heap)
            flight = self.inflight.get(offset)
            if flight is not None and flight.handle == handle:
                if flight.invisible_until_ms > until:  # made invisible for longer since
                    heapq.heappush(heap, (flight.invisible_until_ms, offset, handle))
                    continue
                return offset, flight
        return None

    def next_expiry_ms(self) -> int | None:
        """When an in-flight message may become visible again (early if the top is stale)."""
        return self.expiries[0][0] if self.expiries else None

    def skip_blanks(self, below: int, start: int) -> bool:
        """Offsets in [start, below) hold no message (blank consume-queue entries, the gap of a
        put beyond the queue's end): done, or the ack offset would stop at them for good.
        Returns True when anything changed."""
        if below <= start:
            return False
        for offset in range(max(start, self.ack_offset), below):
            self.mark_done(offset)
        return True

    def restart_scan(self) -> None:
        self.scan_offset = self.ack_offset
        self.expiries.clear()


# See the module's docstring.
_HANDLE_SALT = secrets.randbits(32)
_HANDLE_SEQ = itertools.count()


def make_handle(queue_id: int, queue_offset: int) -> str:
    return f"{queue_id}.{queue_offset}.{_HANDLE_SALT:08x}{next(_HANDLE_SEQ):012x}"


def parse_handle(handle: str) -> tuple[int, int]:
    parts = handle.split(".")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        raise InvalidReceiptHandleError(f"receipt handle {handle!r} is not one of ours")
    return int(parts[0]), int(parts[1])
