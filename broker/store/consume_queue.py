"""ConsumeQueue: per (topic, queue_id), where each message of the queue sits in the commitlog.

A consume queue is derived data: the dispatcher (ReputMessageService) writes it from the commitlog,
and the store rebuilds it from there when it is missing or behind. It lives in
``<consumequeue root>/<topic>/<queue_id>/`` as MappedFileQueue segments of
``mapped_file_size_entries * 20`` bytes, each named by the 20-digit byte offset of its first entry.
Entry ``queue_offset`` n sits at logical byte ``n * 20``; each entry is big-endian:

    +-------+------------+-------+---------------------------------------------------------+
    | bytes | field      | type  | meaning                                                 |
    +=======+============+=======+=========================================================+
    | 0-7   | phy_offset | int64 | commitlog byte offset of the record                     |
    | 8-11  | size       | int32 | record size in bytes; BLANK_SIZE marks a blank entry    |
    | 12-19 | tag_code   | int64 | tags_string_to_tags_code(tags), filters without the log |
    +-------+------------+-------+---------------------------------------------------------+

An all-zero entry is unwritten space: the first one ends the data. A *blank* entry
``(phy_offset=0, size=BLANK_SIZE, tag_code=0)`` (RocketMQ's fillPreBlank marker) fills a queue
offset that holds no message: the slots before the first entry of a queue that starts inside a
segment, and the gap left by a put beyond ``max_offset_in_queue`` (logged as a warning). Blanks pass
the recovery rule (phy_offset >= 0 and size > 0), so they never end the data, queue offsets stay
positional, and readers skip them.

Invariants:
- The dispatcher is the only writer; readers on other threads read below max_offset_in_queue.
- Real entries' phy_offset increase with queue_offset (the commitlog is written in order).
- min_offset_in_queue <= max_offset_in_queue, and min is a real entry unless the queue is empty.
- After load() + recover(), min_offset_in_queue is the first real entry on disk, which may have
  expired: the store then calls correct_min_offset(commitlog min offset).
"""

from __future__ import annotations

import logging
import re
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from broker.store.errors import MessageIllegalError
from broker.store.mapped_file import MappedFile, MappedFileQueue
from rocketbox_api.names import STORED_TOPIC_PATTERN, TOPIC_LENGTH_MAX

__all__ = ["BLANK_SIZE", "CQ_STORE_UNIT_SIZE_BYTES", "ConsumeQueue", "CqEntry"]

LOG = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE_BYTES = 20
# Entries read at a time by scan().
SCAN_BATCH_MAX = 1_024
_ENTRY = struct.Struct(">qiq")
BLANK_SIZE = 0x7FFF_FFFF  # no record is this big: message_size_bytes_max is far below
_BLANK_ENTRY = _ENTRY.pack(0, BLANK_SIZE, 0)
_ZERO_ENTRY = bytes(CQ_STORE_UNIT_SIZE_BYTES)
_UNIT = CQ_STORE_UNIT_SIZE_BYTES
QUEUE_ID_MAX = 2**31 - 1
_TOPIC_RE = STORED_TOPIC_PATTERN  # one rule, rocketbox_api/names.py
_QUEUE_ID_RE = re.compile(r"0|[1-9][0-9]{0,9}")  # canonical: "07" would alias queue 7


class CqEntry(NamedTuple):
    queue_offset: int
    phy_offset: int
    size: int
    tag_code: int


class ConsumeQueue:
    """One queue's entries over a MappedFileQueue. Call load() then recover() before use."""

    def __init__(
        self, topic: str, queue_id: int, store_path_root: Path, mapped_file_size_entries: int
    ) -> None:
        check_topic(topic)
        if not 0 <= queue_id <= QUEUE_ID_MAX:
            raise MessageIllegalError("queue_id", f"0..{QUEUE_ID_MAX}", f"got {queue_id}")
        assert mapped_file_size_entries > 0
        self.topic = topic
        self.queue_id = queue_id
        self._name = f"{topic}-{queue_id}"  # for log lines
        self.store_dir = store_path_root / topic / str(queue_id)
        self._mfq = MappedFileQueue(self.store_dir, mapped_file_size_entries * _UNIT)
        self._entries_per_file = mapped_file_size_entries
        self._min_offset = 0
        self._max_physic_offset = -1

    # -- state -------------------------------------------------------------------------------
    @property
    def min_offset_in_queue(self) -> int:
        return self._min_offset

    @property
    def max_offset_in_queue(self) -> int:
        """One past the last entry: the queue_offset the next message of the queue gets."""
        return self._mfq.max_offset // _UNIT

    @property
    def max_physic_offset(self) -> int:
        """phy_offset + size of the last real entry on disk (expired or not); -1 if none."""
        return self._max_physic_offset

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> None:
        self._mfq.load()

    def recover(self) -> None:
        """Find the end of the data in the last segments and drop what lies after it."""
        files = self._mfq.files
        if not files:
            self._min_offset, self._max_physic_offset = 0, -1
            return
        holder, end_pos = files[0], 0
        for mf in reversed(files):
            count = _valid_entry_count(mf)
            if count:
                holder, end_pos = mf, count * _UNIT
                break
            # An empty trailing segment is removed below; zeroing it first would dirty every page.
            mf.wrote_position = 0
        holder.wrote_position = end_pos
        self._truncate_to((holder.file_from_offset + end_pos) // _UNIT)
        max_offset = self.max_offset_in_queue
        first = self._first_real(range(files[0].file_from_offset // _UNIT, max_offset))
        self._min_offset = first.queue_offset if first else max_offset
        self._max_physic_offset = self._last_physic_end()

    # -- writing (the dispatcher only) -------------------------------------------------------
    def put_message_position_info(
        self, phy_offset: int, size: int, tag_code: int, queue_offset: int
    ) -> None:
        """Write the entry at queue_offset * 20. Positional, so a re-dispatch is idempotent."""
        assert phy_offset >= 0, phy_offset
        assert 0 < size < BLANK_SIZE, size
        assert queue_offset >= 0, queue_offset
        max_offset = self.max_offset_in_queue
        if queue_offset > max_offset:
            if self._min_offset == max_offset:
                self._restart_at(queue_offset)
            else:
                LOG.warning(
                    "consume queue %s: gap %s..%s filled with blank entries",
                    self._name,
                    max_offset,
                    queue_offset,
                )
                self._fill_blanks(max_offset, queue_offset)
            max_offset = queue_offset
        byte = queue_offset * _UNIT
        if queue_offset == max_offset:
            mf = self._mfq.last_or_create(byte)
            pos = byte - mf.file_from_offset
            assert pos == mf.wrote_position, "append away from the write position"
            _ENTRY.pack_into(mf.buffer, pos, phy_offset, size, tag_code)
            mf.wrote_position = pos + _UNIT  # published after the bytes, for readers
        elif queue_offset >= self._min_offset:
            found = self._mfq.find_by_offset(byte)
            assert found is not None, "no segment below max_offset_in_queue"
            _ENTRY.pack_into(
                found.buffer, byte - found.file_from_offset, phy_offset, size, tag_code
            )
        else:
            # Re-dispatch of an entry retention already expired: nobody can read it any more.
            LOG.debug("consume queue %s: skip expired queue_offset %s", self._name, queue_offset)
            return
        self._max_physic_offset = max(self._max_physic_offset, phy_offset + size)

    def _restart_at(self, queue_offset: int) -> None:
        """An empty queue starts at queue_offset; the slots before it in its segment are blank."""
        self._mfq.remove_files(list(self._mfq.files))
        self._min_offset = queue_offset
        self._max_physic_offset = -1
        self._fill_blanks(queue_offset - queue_offset % self._entries_per_file, queue_offset)

    def _fill_blanks(self, start_queue_offset: int, stop_queue_offset: int) -> None:
        queue_offset = start_queue_offset
        while queue_offset < stop_queue_offset:
            mf = self._mfq.last_or_create(queue_offset * _UNIT)
            pos = queue_offset * _UNIT - mf.file_from_offset
            assert pos == mf.wrote_position
            count = min(stop_queue_offset - queue_offset, (mf.file_size - pos) // _UNIT)
            mf.write_at(pos, _BLANK_ENTRY * count)
            mf.wrote_position = pos + count * _UNIT
            queue_offset += count

    # -- reading -----------------------------------------------------------------------------
    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(phy_offset, size, tag_code), or None outside [min, max) and for blank entries."""
        if not self._min_offset <= queue_offset < self.max_offset_in_queue:
            return None
        entry = next(self._scan(range(queue_offset, queue_offset + 1)), None)
        return None if entry is None or entry.size == BLANK_SIZE else entry[1:]

    def scan(self, start_queue_offset: int, batch_max: int = SCAN_BATCH_MAX) -> Iterator[CqEntry]:
        """Every real entry from ``start_queue_offset`` to the end as it is now, read
        ``batch_max`` at a time (the system services' full walks of a queue)."""
        offset = start_queue_offset
        while offset < self.max_offset_in_queue:
            entries = self.iter_entries(offset, batch_max)
            if not entries:
                return
            yield from entries
            offset = entries[-1].queue_offset + 1

    def iter_entries(self, start_queue_offset: int, max_count: int) -> list[CqEntry]:
        """Up to max_count real entries from start_queue_offset on. An empty list means nothing
        is readable before max_offset_in_queue: continue from there."""
        start = max(start_queue_offset, self._min_offset)
        found: list[CqEntry] = []
        if max_count <= 0:
            return found
        # An explicit loop that stops the walk: compiled by mypyc, islice over a generator
        # expression read the queue to its end, however few entries were asked for.
        for entry in self._scan(range(start, self.max_offset_in_queue)):
            if entry.size != BLANK_SIZE:
                found.append(entry)
                if len(found) >= max_count:
                    break
        return found

    def get_offset_in_queue_by_time(
        self, timestamp_ms: int, store_timestamp_of: Callable[[int, int], int | None]
    ) -> int:
        """The first queue_offset stored at or after timestamp_ms (min if all are, max if none).

        store_timestamp_of(phy_offset, size) reads the record's store time from the commitlog,
        None when the record is gone: it then counts as older, as retention deletes the oldest.
        """

        def is_not_older(entry: CqEntry) -> bool:
            stored_ms = store_timestamp_of(entry.phy_offset, entry.size)
            return stored_ms is not None and stored_ms >= timestamp_ms

        return self._search(is_not_older)

    # -- shrinking ---------------------------------------------------------------------------
    def truncate_dirty_logic_files(self, phy_offset: int) -> int:
        """Remove every entry pointing at or past phy_offset (the commitlog was cut there), and
        the blanks left trailing. Returns how many queue offsets were removed, blanks included."""
        old_max = self.max_offset_in_queue
        new_max = self._min_offset
        for entry in self._scan(range(old_max - 1, self._min_offset - 1, -1)):
            if entry.size != BLANK_SIZE and entry.phy_offset < phy_offset:
                new_max = entry.queue_offset + 1
                break
        if new_max == old_max:
            return 0
        self._truncate_to(new_max)
        self._max_physic_offset = self._last_physic_end()
        LOG.info("consume queue %s: truncated to queue_offset %s", self._name, new_max)
        return old_max - new_max

    def _truncate_to(self, queue_offset: int) -> None:
        self._mfq.truncate_dirty_files(queue_offset * _UNIT)
        files = self._mfq.files
        # The full segment before an empty last one already marks the end. An empty first one
        # stays: it keeps the position of a queue whose min offset is above 0.
        if len(files) > 1 and files[-1].wrote_position == 0:
            self._mfq.remove_files([files[-1]])

    def delete_expired_file(self, min_commit_log_offset: int) -> list[Path]:
        """Correct the min offset, then delete the segments (never the last) wholly below it:
        those whose entries all point below min_commit_log_offset. Returns the deleted paths."""
        self.correct_min_offset(min_commit_log_offset)  # first, so readers stop short of doomed
        min_byte = self._min_offset * _UNIT
        doomed = [
            mf for mf in self._mfq.files[:-1] if mf.file_from_offset + mf.file_size <= min_byte
        ]
        if doomed:
            self._mfq.remove_files(doomed)
            LOG.info("consume queue %s: deleted %s expired segments", self._name, len(doomed))
        return [mf.path for mf in doomed]

    def correct_min_offset(self, min_commit_log_offset: int) -> None:
        """Move the min offset to the first entry with phy_offset >= min_commit_log_offset (to max
        if none). It never moves back."""
        self._min_offset = self._search(lambda e: e.phy_offset >= min_commit_log_offset)

    # -- life cycle --------------------------------------------------------------------------
    def flush(self) -> None:
        self._mfq.flush()

    def close(self) -> None:
        self._mfq.close()

    def destroy(self) -> None:
        self._mfq.remove_files(list(self._mfq.files))
        if self.store_dir.is_dir():
            shutil.rmtree(self.store_dir)
        self._min_offset, self._max_physic_offset = 0, -1

    # -- scanning ----------------------------------------------------------------------------
    def _scan(self, queue_offsets: range) -> Iterator[CqEntry]:
        """Raw entries (blanks included) at queue_offsets, in the range's order."""
        buf, base = None, -1
        for queue_offset in queue_offsets:
            if buf is None or not base <= queue_offset < base + self._entries_per_file:
                mf = self._mfq.find_by_offset(queue_offset * _UNIT)
                if mf is None:
                    return
                buf, base = mf.buffer, mf.file_from_offset // _UNIT
            try:
                phy_offset, size, tag_code = _ENTRY.unpack_from(buf, (queue_offset - base) * _UNIT)
            except ValueError:  # the cleaner closed the segment after the lookup
                return
            yield CqEntry(queue_offset, phy_offset, size, tag_code)

    def _first_real(self, queue_offsets: range) -> CqEntry | None:
        for entry in self._scan(queue_offsets):  # a loop, not next(genexpr): see iter_entries
            if entry.size != BLANK_SIZE:
                return entry
        return None

    def _search(self, is_at_or_after: Callable[[CqEntry], bool]) -> int:
        """The first real queue_offset in [min, max) where the predicate holds (max if none).

        The predicate is monotonic over real entries (phy_offset and store time rise with
        queue_offset); a blank probe takes the value of the next real entry.
        """
        low, high = self._min_offset, self.max_offset_in_queue
        stop = high
        # Invariant: real entries below low fail, real entries at high or above hold.
        while low < high:
            mid = (low + high) // 2
            probe = self._first_real(range(mid, high))
            if probe is not None and not is_at_or_after(probe):
                low = probe.queue_offset + 1
            else:
                high = mid
        found = self._first_real(range(low, stop))
        return found.queue_offset if found else stop

    def _last_physic_end(self) -> int:
        first = self._mfq.first()
        floor = first.file_from_offset // _UNIT if first else 0
        last = self._first_real(range(self.max_offset_in_queue - 1, floor - 1, -1))
        return last.phy_offset + last.size if last else -1


def _valid_entry_count(mf: MappedFile) -> int:
    """Entries before the first all-zero one, less a torn tail of invalid ones.

    The zero entry is found with mmap.find, in C: a Python loop over a full segment's entries
    would cost every queue a noticeable delay at every start. Bytes after it are never read;
    appends overwrite them.
    """
    buf, end = mf.buffer, mf.file_size
    pos = buf.find(_ZERO_ENTRY, 0, end)
    while pos != -1:
        aligned = -(-pos // _UNIT) * _UNIT  # a run of zeros may straddle two entries
        if aligned + _UNIT <= end and buf[aligned : aligned + _UNIT] == _ZERO_ENTRY:
            end = aligned
            break
        pos = buf.find(_ZERO_ENTRY, pos + 1, end)
    count = end // _UNIT
    while count > 0:
        phy_offset, size, _ = _ENTRY.unpack_from(buf, (count - 1) * _UNIT)
        if phy_offset >= 0 and size > 0:
            break
        count -= 1
    return count


def is_valid_topic(topic: str) -> bool:
    return len(topic) <= TOPIC_LENGTH_MAX and _TOPIC_RE.fullmatch(topic) is not None


def parse_queue_id(name: str) -> int | None:
    if _QUEUE_ID_RE.fullmatch(name) is None or int(name) > QUEUE_ID_MAX:
        return None
    return int(name)


def check_topic(topic: str) -> None:
    if not is_valid_topic(topic):
        raise MessageIllegalError(
            "topic", f"{_TOPIC_RE.pattern}, at most {TOPIC_LENGTH_MAX} chars", f"got {topic!r}"
        )
