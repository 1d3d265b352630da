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
    I32,
    NAME_VALUE_SEPARATOR,
    POSITION_BORN_HOST,
    POSITION_SYSFLAG,
    PROPERTY_SEPARATOR_BYTE,
    RECONSUME_PREPARED_BYTES,
)
from broker.store.codec.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageSysFlag

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


def _empty_i64() -> npt.NDArray[np.int64]:
    return np.empty(0, np.int64)


def _empty_i32() -> npt.NDArray[np.int32]:
    return np.empty(0, np.int32)


@dataclass(slots=True)
class RecordColumns:
    """One batch of records, column by column (what the reconciliation turns into Arrow)."""

    message_id: list[str | None] = field(default_factory=list)  # UNIQ_KEY; None when absent
    topic: list[str] = field(default_factory=list)
    queue_id: npt.NDArray[np.int32] = field(default_factory=_empty_i32)
    queue_offset: npt.NDArray[np.int64] = field(default_factory=_empty_i64)
    phy_offset: npt.NDArray[np.int64] = field(default_factory=_empty_i64)
    store_timestamp_ms: npt.NDArray[np.int64] = field(default_factory=_empty_i64)
    born_timestamp_ms: npt.NDArray[np.int64] = field(default_factory=_empty_i64)
    body_size_bytes: npt.NDArray[np.int32] = field(default_factory=_empty_i32)

    def __len__(self) -> int:
        return len(self.topic)


def body_size(buf: ScanBuffer, pos: int) -> int:
    (sysflag,) = I32.unpack_from(buf, pos + POSITION_SYSFLAG)
    at = pos + POSITION_BORN_HOST + (20 if sysflag & MessageSysFlag.BORNHOST_V6_FLAG else 8) + 8
    store_host_bytes = 20 if sysflag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else 8
    at += store_host_bytes + RECONSUME_PREPARED_BYTES
    (size,) = I32.unpack_from(buf, at)
    return int(size)


def concat(a: RecordColumns, b: RecordColumns) -> RecordColumns:
    if not len(b):
        return a
    return RecordColumns(
        a.message_id + b.message_id,
        a.topic + b.topic,
        *(np.concatenate([x, y]) for x, y in zip(_arrays(a), _arrays(b), strict=True)),
    )


def _arrays(c: RecordColumns) -> tuple[npt.NDArray[Any], ...]:
    return (c.queue_id, c.queue_offset, c.phy_offset, c.store_timestamp_ms, c.born_timestamp_ms,
            c.body_size_bytes)  # fmt: skip


def valid_prefix(ok: npt.NDArray[np.bool_]) -> int:
    """How many leading entries of ``ok`` are true."""
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else len(ok)


def gather(
    arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], width: int
) -> npt.NDArray[np.uint8]:
    """``width`` bytes at each position, as rows. Positions are clipped into the buffer: a torn
    record may point anywhere, and its checks fail on whatever is read."""
    windows = np.lib.stride_tricks.sliding_window_view(arr, width)
    return windows[np.clip(at, 0, len(arr) - width)]


def field_of(rows: npt.NDArray[np.uint8], at: int, dtype: str) -> npt.NDArray[np.int64]:
    """A big-endian integer at byte ``at`` of each gathered row."""
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(rows[:, at : at + width]).view(dtype).ravel().astype(np.int64)


def i64(arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return gather(arr, at, 8).view(">i8").ravel().astype(np.int64)


def i32(arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return gather(arr, at, 4).view(">i4").ravel().astype(np.int64)


def i16(arr: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return gather(arr, at, 2).view(">i2").ravel().astype(np.int64)


def message_ids(
    arr: npt.NDArray[np.uint8],
    buf: ScanBuffer,
    props_at: npt.NDArray[np.int64],
    crc_at: npt.NDArray[np.int64],
) -> tuple[list[str | None], int]:
    """The records' message ids (None where a record has none), and how many lead before one
    that does not decode.

    One producer's records carry their UNIQ_KEY property at the same place with ids of one
    length: each pass finds it in the first record not yet done, then takes it from every
    record that has it at the same place, all at once. After ``ID_LAYOUTS_MAX`` passes (records
    of many producers mixed), the rest are searched one by one."""
    n = len(props_at)
    out = np.empty(n, dtype=object)
    todo = np.arange(n)
    for _ in range(ID_LAYOUTS_MAX):
        if not len(todo):
            break
        first = int(todo[0])
        start, stop = int(props_at[first]), int(crc_at[first])
        found = _message_id(bytes(buf[start:stop]))
        if found is None:  # no id (or an undecodable one): one by one, below
            break
        raw = found.encode()
        rel = bytes(buf[start:stop]).find(_UNIQ_KEY_NAME + raw + _PAIR_END)
        width = _UNIQ_KEY_NAME_LEN + len(raw) + 1
        at = props_at[todo] + rel
        rows = gather(arr, at, width)
        id_bytes = rows[:, _UNIQ_KEY_NAME_LEN:-1]
        same = (
            (at + width <= crc_at[todo])
            & (rows[:, :_UNIQ_KEY_NAME_LEN] == _UNIQ_KEY_NAME_ARRAY).all(axis=1)
            & (rows[:, -1] == PAIR_END_BYTE)
            & ~(id_bytes == PAIR_END_BYTE).any(axis=1)
        )
        if rel > 0:
            same &= arr[at - 1] == PAIR_END_BYTE
        try:
            text = np.char.decode(
                np.ascontiguousarray(id_bytes[same]).view(f"S{len(raw)}").ravel(), "utf-8"
            )
        except UnicodeDecodeError:
            break
        out[todo[same]] = text
        todo = todo[~same]
    for i in todo.tolist():
        try:
            out[i] = _message_id(bytes(buf[int(props_at[i]) : int(crc_at[i])]))
        except UnicodeDecodeError:
            n = i
            break
    ids: list[str | None] = out[:n].tolist()
    return ids, n


def _message_id(props: bytes) -> str | None:
    """The UNIQ_KEY value: the name must start a pair (a name may end in ``UNIQ_KEY``)."""
    at = props.find(_UNIQ_KEY_NAME)
    while at > 0 and props[at - 1] != PAIR_END_BYTE:
        at = props.find(_UNIQ_KEY_NAME, at + 1)
    if at < 0:
        return None
    start = at + _UNIQ_KEY_NAME_LEN
    return props[start : props.index(_PAIR_END, start)].decode()
