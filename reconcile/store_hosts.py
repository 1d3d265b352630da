"""The STOREHOSTADDRESS of many records at once: the broker that stored each one.

The reconciliation reads several commitlogs of one cluster (one per broker group, and a slave's
copy of its master's). A slave's copy is its master's log byte for byte: the same records at the
same physical offsets, with the master's store host and store timestamp in them. So a record is
identified across directories by (message id, store host, phy_offset, store timestamp): two
directories holding it hold ONE record. A resend of the same message id is stored again, at
another offset or by another broker, and stays a second copy. classify.py folds on that key.

The address sits after BORNHOST, whose width (8 or 20 bytes) the record's SYSFLAG gives, and is
8 or 20 bytes itself (IPv4 or IPv6 address, then a 4-byte port). Records of one log carry one or
a few store hosts, so each distinct address is formatted once, and the column is built from them
by Arrow (a dictionary of them): a list of a Python string a record, and sorting the addresses
to find the distinct ones where they were all one, was a noticeable share of the scan
(docs/benchmarks.md).
"""

from __future__ import annotations

import ipaddress
import mmap

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from broker.store.codec.layout import POSITION_BORN_HOST, POSITION_SYSFLAG
from broker.store.codec.message import MessageSysFlag
from broker.store.codec.scan_columns import gather, i32

_V4_HOST_BYTES = 8
_V6_HOST_BYTES = 20
_STORE_TIMESTAMP_BYTES = 8


def store_hosts(buf: mmap.mmap | bytes, positions: npt.NDArray[np.int64]) -> pa.DictionaryArray:
    """``HOST:PORT`` (``[HOST]:PORT`` for IPv6) of the records starting at ``positions`` of
    ``buf`` (positions in the buffer, of records the scan found valid), as indices into the
    distinct addresses (its ``dictionary``)."""
    if not len(positions):
        return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
    arr = np.frombuffer(buf, dtype=np.uint8)
    try:
        sysflag = i32(arr, positions + POSITION_SYSFLAG)
        born_v6 = (sysflag & MessageSysFlag.BORNHOST_V6_FLAG) != 0
        store_v6 = (sysflag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG) != 0
        at = (
            positions
            + POSITION_BORN_HOST
            + np.where(born_v6, _V6_HOST_BYTES, _V4_HOST_BYTES)
            + _STORE_TIMESTAMP_BYTES
        )
        rows = np.zeros((len(positions), _V6_HOST_BYTES + 1), np.uint8)
        rows[:, :_V6_HOST_BYTES] = gather(arr, at, _V6_HOST_BYTES)
    finally:
        # A view of a mapping must not outlive this call: the mapping is closed after the scan.
        del arr
    # An IPv4 host is its first 8 bytes; the last byte tells the kinds apart.
    rows[~store_v6, _V4_HOST_BYTES:] = 0
    rows[store_v6, _V6_HOST_BYTES] = 1
    if (rows == rows[0]).all():  # one broker stored them all: the usual batch
        distinct, inverse = rows[:1], np.zeros(len(rows), np.int32)
    else:
        keys = np.ascontiguousarray(rows).view(np.dtype((np.void, _V6_HOST_BYTES + 1))).ravel()
        distinct, found = np.unique(keys, return_inverse=True)
        inverse = found.ravel().astype(np.int32)
    names = [format_host(bytes(key)) for key in distinct]
    return pa.DictionaryArray.from_arrays(pa.array(inverse), pa.array(names, pa.string()))


def format_host(key: bytes) -> str:
    """One key of ``store_hosts`` (address bytes, port, a v6 marker byte) as text."""
    if key[_V6_HOST_BYTES]:
        address = ipaddress.IPv6Address(key[:16])
        return f"[{address}]:{int.from_bytes(key[16:20], 'big', signed=True)}"
    return f"{ipaddress.IPv4Address(key[:4])}:{int.from_bytes(key[4:8], 'big', signed=True)}"
