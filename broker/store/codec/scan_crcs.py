"""The scan's CRC columns: the CRCs of many records' byte ranges at once, and where each record
ends with the record CRC pair (``__CRC32#``) and what its digits say."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from broker.store.codec.crc import crc32
from broker.store.codec.layout import CRC32_DIGITS, CRC32_PREFIX, CRC32_RESERVED_LENGTH
from broker.store.codec.scan_columns import PAIR_END_BYTE, ScanBuffer, gather

_CRC_PROPERTY_PREFIX = np.frombuffer(CRC32_PREFIX, np.uint8)
_CRC_NAME_BYTES = len(CRC32_PREFIX)
# Ranges whose CRCs ``crcs`` takes as rows of one strided view when they are regular.
CRC_RUN_RECORDS = 64


def crcs(
    buf: ScanBuffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """crc32 & 0x7FFFFFFF of the bytes from each start to its end (a record's body, or its
    bytes before the record CRC pair): one CRC call each (crc.py), driven from C by map (no
    Python frame a record, only the CRC's work).

    What a call costs is mostly getting the bytes to it: a slice of a memoryview each. Where
    ``CRC_RUN_RECORDS`` ranges in a row have one length and lie one stride apart (records of one
    size back to back), they are rows of one strided view of the buffer instead, about half the
    cost a range."""
    n = len(starts)
    out = np.empty(n, np.int64)
    if not n:
        return out
    arr = np.frombuffer(buf, np.uint8)
    try:
        if n < CRC_RUN_RECORDS:
            return _sliced_crcs(arr, starts, ends) & 0x7FFFFFFF
        whole = n - n % CRC_RUN_RECORDS
        chunks = starts[:whole].reshape(-1, CRC_RUN_RECORDS)
        lengths = (ends[:whole] - starts[:whole]).reshape(-1, CRC_RUN_RECORDS)
        steps = np.diff(chunks, axis=1)
        regular = (
            (lengths == lengths[:, :1]).all(axis=1)
            & (steps == steps[:, :1]).all(axis=1)
            & (steps[:, 0] >= lengths[:, 0])
        )
        # Regular chunks that continue one another (one length, one stride) make one view.
        first_starts = chunks[:, 0]
        continues = np.zeros(len(regular), np.bool_)
        continues[1:] = (
            regular[1:]
            & regular[:-1]
            & (lengths[1:, 0] == lengths[:-1, 0])
            & (steps[1:, 0] == steps[:-1, 0])
            & (first_starts[1:] == first_starts[:-1] + CRC_RUN_RECORDS * steps[:-1, 0])
        )
        # The strided views below are not bounds-checked: every range must lie in the buffer.
        assert starts.min() >= 0
        assert ends.max() <= len(arr)
        heads = np.flatnonzero(regular & ~continues)
        breaks = np.append(np.flatnonzero(~continues), len(regular))
        run_ends = breaks[np.searchsorted(breaks, heads, side="right")]
        for chunk, after in zip(heads.tolist(), run_ends.tolist(), strict=True):
            count = CRC_RUN_RECORDS * (after - chunk)
            at = chunk * CRC_RUN_RECORDS
            rows = np.lib.stride_tricks.as_strided(
                arr[int(first_starts[chunk]) :],
                shape=(count, int(lengths[chunk, 0])),
                strides=(int(steps[chunk, 0]), 1),
                writeable=False,
            )
            out[at : at + count] = np.fromiter(map(crc32, rows), np.int64, count)
            del rows
        rest = np.ones(n, np.bool_)
        rest[:whole] = np.repeat(~regular, CRC_RUN_RECORDS)
        out[rest] = _sliced_crcs(arr, starts[rest], ends[rest])
    finally:
        # A view of a mapping must not outlive this call: the mapping is closed after the scan.
        del arr
    return out & 0x7FFFFFFF


def _sliced_crcs(
    arr: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    slices = map(slice, starts.tolist(), ends.tolist())
    with memoryview(arr.data) as view:
        return np.fromiter(map(crc32, map(view.__getitem__, slices)), np.int64, len(starts))


def crc_pairs(
    arr: npt.NDArray[np.uint8], crc_at: npt.NDArray[np.int64], props_at: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """The record CRC pair where a record ends with one (its name, 10 digits, the closing
    separator): whether it does, the digits, and whether the pair is well formed."""
    tail = gather(arr, crc_at, CRC32_RESERVED_LENGTH)
    has_crc = (
        (crc_at >= props_at)
        & (tail[:, :_CRC_NAME_BYTES] == _CRC_PROPERTY_PREFIX).all(axis=1)
        & ((crc_at == props_at) | (arr[np.clip(crc_at - 1, 0, len(arr) - 1)] == PAIR_END_BYTE))
    )
    digits = tail[:, _CRC_NAME_BYTES : _CRC_NAME_BYTES + CRC32_DIGITS].astype(np.int64) - ord("0")
    sound = (tail[:, -1] == PAIR_END_BYTE) & ((digits >= 0) & (digits <= 9)).all(axis=1)
    return has_crc, digits, sound
