"""Column-wise reads of a batch of records, for the scan (scan.py): numpy gathers of fixed-width
fields at many positions at once, and the message-id search.

Every position is clipped into the buffer: a torn record may point anywhere, and its checks fail
on whatever is read, so a gather never raises on damage.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from broker.store.codec.layout import (
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    POSITION_BODY_LENGTH_V4,
    PROPERTY_SEPARATOR_BYTE,
    TOTAL_AND_MAGIC,
)
from broker.store.codec.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
from broker.store.codec.text_columns import CodedColumn, TextColumn, utf8_prefix

# What the scan reads from: it searches the properties in place (``find``) and looks topics up
# by their bytes (hashable slices).
ScanBuffer = bytes | mmap.mmap

_UNIQ_KEY_NAME = (PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX + NAME_VALUE_SEPARATOR).encode()
_UNIQ_KEY_NAME_LEN = len(_UNIQ_KEY_NAME)
_UNIQ_KEY_NAME_ARRAY = np.frombuffer(_UNIQ_KEY_NAME, np.uint8)
_PAIR_END = PROPERTY_SEPARATOR_BYTE
PAIR_END_BYTE = _PAIR_END[0]
# Passes that take message ids of one layout from a whole batch at once (records of more
# producers than this in one batch fall back to a search per record).
ID_LAYOUTS_MAX = 8
# The smallest V1 record: the fixed fields with IPv4 hosts, an empty body, topic and properties.
RECORD_BYTES_MIN = POSITION_BODY_LENGTH_V4 + 4 + 1 + 2
# Walking the size chain (``skip_chain``, the scan's walk): records whose sizes one probe checks
# at once (at first, at most), the run of one size below which sizes count as varied, and the
# records then stepped one by one before the next probe.
SKIP_PROBE_RECORDS_MIN = 64
SKIP_PROBE_RECORDS_MAX = 65_536
SKIP_RUN_MIN = 8
SKIP_STEP_RECORDS = 256


def _empty_i64() -> npt.NDArray[np.int64]:
    return np.empty(0, np.int64)


def _empty_i32() -> npt.NDArray[np.int32]:
    return np.empty(0, np.int32)


@dataclass(slots=True)
class RecordColumns:
    """One batch of records, column by column (what the reconciliation turns into Arrow)."""

    message_id: TextColumn = field(default_factory=TextColumn)  # UNIQ_KEY; absent: not valid
    topic: CodedColumn = field(default_factory=CodedColumn)
    queue_id: npt.NDArray[np.int32] = field(default_factory=_empty_i32)
    queue_offset: npt.NDArray[np.int64] = field(default_factory=_empty_i64)
    phy_offset: npt.NDArray[np.int64] = field(default_factory=_empty_i64)
    store_timestamp_ms: npt.NDArray[np.int64] = field(default_factory=_empty_i64)
    born_timestamp_ms: npt.NDArray[np.int64] = field(default_factory=_empty_i64)
    body_size_bytes: npt.NDArray[np.int32] = field(default_factory=_empty_i32)
    sysflag: npt.NDArray[np.int32] = field(default_factory=_empty_i32)  # MessageSysFlag bits

    def __len__(self) -> int:
        return len(self.topic)


def concat(a: RecordColumns, b: RecordColumns) -> RecordColumns:
    if not len(b):
        return a
    return RecordColumns(
        a.message_id.concat(b.message_id),
        a.topic.concat(b.topic),
        *(np.concatenate([x, y]) for x, y in zip(_arrays(a), _arrays(b), strict=True)),
    )


def _arrays(c: RecordColumns) -> tuple[npt.NDArray[Any], ...]:
    return (c.queue_id, c.queue_offset, c.phy_offset, c.store_timestamp_ms, c.born_timestamp_ms,
            c.body_size_bytes, c.sysflag)  # fmt: skip


def valid_prefix(ok: npt.NDArray[np.bool_]) -> int:
    """How many leading entries of ``ok`` are true."""
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else len(ok)


def gather(
    arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], width: int
) -> npt.NDArray[np.uint8]:
    """``width`` bytes at each position, as rows. Positions are clipped into the buffer: a torn
    record may point anywhere, and its checks fail on whatever is read.

    The buffer is seen as one ``width``-byte item starting at every byte, so that each row is
    taken as one item (several times faster than rows of a sliding window view, which numpy
    copies byte column by byte column)."""
    if not width:
        return np.empty((len(at), 0), np.uint8)
    every_byte = np.ndarray((len(arr) - width + 1,), f"V{width}", buffer=arr, strides=(1,))
    rows = every_byte[np.clip(at, 0, len(arr) - width)]
    return rows.view(np.uint8).reshape(len(at), width)


def field_of(rows: npt.NDArray[np.uint8], at: int, dtype: str) -> npt.NDArray[np.int64]:
    """A big-endian integer at byte ``at`` of each gathered row."""
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(rows[:, at : at + width]).view(dtype).ravel().astype(np.int64)


def i64(arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return _ints(arr, at, ">i8")


def i32(arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return _ints(arr, at, ">i4")


def i16(arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return _ints(arr, at, ">i2")


def _ints(
    arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], dtype: str
) -> npt.NDArray[np.int64]:
    """The big-endian integers at the positions (clipped, as ``gather``'s): the buffer seen as
    integers starting at every byte (a stride of one), so that each is taken whole, not as
    ``width`` bytes a row (faster: one copy instead of a row gathered and viewed)."""
    width = np.dtype(dtype).itemsize
    every_byte = np.ndarray((len(arr) - width + 1,), dtype, buffer=arr, strides=(1,))
    return every_byte[np.clip(at, 0, len(arr) - width)].astype(np.int64)


def message_ids(
    arr: npt.NDArray[np.uint8],
    buf: ScanBuffer,
    props_at: npt.NDArray[np.int64],
    props_end: npt.NDArray[np.int64],
) -> tuple[TextColumn, int]:
    """The records' message ids (absent where a record has none), and how many lead before one
    whose id is not UTF-8.

    One producer's records carry their UNIQ_KEY property at the same place with ids of one
    length: each pass finds it in the first record not yet done, then finds it in every record
    that has it at the same place, all at once. After ``ID_LAYOUTS_MAX`` passes (records of many
    producers mixed), the rest are searched one by one. ``props_end``: where each record's
    properties end, the record CRC pair left out. The ids' bytes are then gathered into one
    buffer, checked as UTF-8 once (text_columns.py)."""
    n = len(props_at)
    id_at = np.zeros(n, np.int64)  # where each id's bytes begin in the buffer
    id_len = np.full(n, -1, np.int64)  # -1: the record has no id
    todo = np.arange(n)
    for _ in range(ID_LAYOUTS_MAX):
        if not len(todo):
            break
        first = int(todo[0])
        start = int(props_at[first])
        span = _message_id_span(bytes(buf[start : int(props_end[first])]))
        if span is None:  # no id: one by one, below
            break
        length = span[1] - span[0]
        name_at = props_at[todo] + span[0] - _UNIQ_KEY_NAME_LEN
        width = _UNIQ_KEY_NAME_LEN + length + 1
        rows = gather(arr, name_at, width)
        same = (
            (name_at + width <= props_end[todo])
            & (rows[:, :_UNIQ_KEY_NAME_LEN] == _UNIQ_KEY_NAME_ARRAY).all(axis=1)
            & (rows[:, -1] == PAIR_END_BYTE)
            & ~(rows[:, _UNIQ_KEY_NAME_LEN:-1] == PAIR_END_BYTE).any(axis=1)
        )
        if span[0] > _UNIQ_KEY_NAME_LEN:  # not the first pair: a pair must end just before it
            same &= arr[name_at - 1] == PAIR_END_BYTE
        done = todo[same]
        id_at[done] = name_at[same] + _UNIQ_KEY_NAME_LEN
        id_len[done] = length
        todo = todo[~same]
    for i in todo.tolist():
        start = int(props_at[i])
        span = _message_id_span(bytes(buf[start : int(props_end[i])]))
        if span is not None:
            id_at[i], id_len[i] = start + span[0], span[1] - span[0]
    ids = _text(arr, id_at, id_len)
    n = utf8_prefix(ids.data, ids.offsets)
    return (ids if n == len(ids) else ids.head(n)), n


def _text(
    arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
) -> TextColumn:
    """The ``length`` bytes at each of ``at`` (none where ``length`` is -1) as one column."""
    valid = length >= 0
    lengths = np.where(valid, length, 0)
    offsets = np.zeros(len(at) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    present = lengths[valid]
    if not offsets[-1]:
        data = np.empty(0, np.uint8)
    elif (present == present[0]).all():  # ids of one length (one producer's): one gather
        data = gather(arr, at[valid], int(present[0])).ravel()
    else:  # each byte's place in the buffer: its id's start, then one more a byte
        shift = np.repeat(at[valid] - offsets[:-1][valid], present)
        data = arr[shift + np.arange(offsets[-1])]
    return TextColumn(data, offsets, valid)


def _message_id_span(props: bytes) -> tuple[int, int] | None:
    """Where the UNIQ_KEY value lies in ``props``: the name must start a pair (a name may end in
    ``UNIQ_KEY``), and the value ends at its pair's end, or at the end of the properties (a
    writer may leave the last pair without its separator)."""
    at = props.find(_UNIQ_KEY_NAME)
    while at > 0 and props[at - 1] != PAIR_END_BYTE:
        at = props.find(_UNIQ_KEY_NAME, at + 1)
    if at < 0:
        return None
    start = at + _UNIQ_KEY_NAME_LEN
    end = props.find(_PAIR_END, start)
    return start, len(props) if end < 0 else end


def text_prefix(
    arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
) -> int:
    """How many leading texts (``length`` bytes at each of ``at``) hold no zero byte and are
    UTF-8 each: what ``check_record`` requires of properties no record CRC vouches for."""
    text = _text(arr, at, length)
    zeros = np.flatnonzero(text.data == 0)
    n = len(at)
    if len(zeros):
        n = int(np.searchsorted(text.offsets, zeros[0], side="right")) - 1
    return min(n, utf8_prefix(text.data, text.offsets))


def skip_chain(buf: ScanBuffer, limit: int, position: int, target: int) -> int:
    """The first record boundary at or past ``target``, walking the chain of TOTALSIZE fields
    from ``position`` (a boundary) and reading nothing else; or where the chain ends before it
    (zeros, a blank marker, a size that cannot be right: where the scan's walk ends).

    A log's records often have one size: a probe checks the sizes at many places that many
    bytes apart at once, twice as many each time all matched (from ``SKIP_PROBE_RECORDS_MIN``
    to ``SKIP_PROBE_RECORDS_MAX``); where sizes vary, it steps record by record for
    ``SKIP_STEP_RECORDS`` records before it probes again."""
    pos = position
    probe = SKIP_PROBE_RECORDS_MIN
    arr = np.frombuffer(buf, dtype=np.uint8, count=limit)
    try:
        while pos < target:
            total = _chain_size(buf, limit, pos)
            if total is None:
                break
            wanted = min(probe, (target - pos - 1) // total)
            ahead = same_size_run(arr, pos, total, wanted)
            pos += total * (ahead + 1)
            if ahead >= probe:
                probe = min(2 * probe, SKIP_PROBE_RECORDS_MAX)
            elif ahead < SKIP_RUN_MIN:
                probe = SKIP_PROBE_RECORDS_MIN
                pos = _step(buf, limit, pos, target)
    finally:
        # A view of a mapping must not outlive this call: the mapping is closed after the scan.
        del arr
    return pos


def _chain_size(buf: ScanBuffer, limit: int, pos: int) -> int | None:
    """The TOTALSIZE at ``pos`` when a message record (V1 or V2) of a possible size starts
    there; None where the scan's walk would end."""
    if limit - pos < END_FILE_MIN_BLANK_LENGTH:
        return None
    total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return None
    if total < RECORD_BYTES_MIN or pos + total > limit:
        return None
    return int(total)


def same_size_run(arr: npt.NDArray[np.uint8], pos: int, total: int, wanted: int) -> int:
    """How many of the next ``wanted`` records after the one at ``pos`` are messages (V1 or V2)
    of ``total`` bytes too, back to back and within the buffer, before the first that is not."""
    if wanted <= 0:
        return 0
    at = pos + total * np.arange(1, wanted + 1, dtype=np.int64)
    magic = i32(arr, at + 4)
    same = (
        (at + total <= len(arr))
        & (i32(arr, at) == total)
        & ((magic == MESSAGE_MAGIC_CODE) | (magic == MESSAGE_MAGIC_CODE_V2))
    )
    return valid_prefix(same)


def _step(buf: ScanBuffer, limit: int, pos: int, target: int) -> int:
    for _ in range(SKIP_STEP_RECORDS):
        if pos >= target:
            break
        total = _chain_size(buf, limit, pos)
        if total is None:
            break
        pos += total
    return pos
