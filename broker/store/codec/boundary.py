"""A record boundary found near a position without walking the size chain to it.

Every record holds its own phy_offset (PHYSICALOFFSET, written when its place in the log was
assigned). So the first record boundary at or past a position is, in a sound log, the first
position there where a valid record (as ``check_record`` finds it: its body CRC, and its record
CRC where it has the pair, as the scan reads a log RocketMQ wrote) starts that claims that
position as its phy_offset. Finding it reads the bytes of the one record
that spans the position, where walking the size chain from the segment's start (``skip_chain``)
reads a size in every record before it: the reconciliation's scan tasks, one a part of a
segment, found their starts that way, and the walks of a segment cut in four cost a sizeable
fraction of the scan of it (docs/benchmarks.md).

A record's body could hold bytes that look like such a record (a producer can learn where its
message will be stored and write a record there). A caller must therefore confirm a boundary
found here the way the chain would have: the reconciliation checks that the part before ended
exactly there (reconcile/commitlog_source.py) and scans the segment whole when it did not.
"""

from __future__ import annotations

from broker.store.codec.check import RecordKind, check_record
from broker.store.codec.layout import (
    I32,
    I64,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POSITION_PHYSICAL_OFFSET,
)
from broker.store.codec.scan_columns import ScanBuffer

# Bytes past the position searched at most: a record that spans more is found by the chain
# instead (None here). The broker's default largest message is 4 MiB.
CLAIMED_SEARCH_BYTES_MAX = 8 * 1024 * 1024
_MAGIC_AT = 4
# The two message magic codes differ in their last byte only: the search looks for the rest.
_MAGIC_PREFIX = I32.pack(MESSAGE_MAGIC_CODE)[:3]
assert I32.pack(MESSAGE_MAGIC_CODE_V2)[:3] == _MAGIC_PREFIX


def first_claimed_record(
    buf: ScanBuffer, limit: int, file_from_offset: int, target: int, search_bytes_max: int
) -> int | None:
    """The first position at or past ``target`` (within ``search_bytes_max`` bytes) where a valid
    record starts that claims it as its phy_offset; None when there is none there (zeros, a
    blank marker, damage, or a record larger than the search).

    The magic code is searched for (``find``, at the speed of memchr); only where it is found is
    the claimed phy_offset read, and only where that matches is the record checked whole."""
    end = min(limit - POSITION_PHYSICAL_OFFSET - 8, target + search_bytes_max)
    at = target
    while at < end:
        found = buf.find(_MAGIC_PREFIX, at + _MAGIC_AT, end + _MAGIC_AT)
        if found < 0:
            return None
        at = found - _MAGIC_AT
        if _claims_its_place(buf, limit, file_from_offset, at):
            return at
        at += 1
    return None


def _claims_its_place(buf: ScanBuffer, limit: int, file_from_offset: int, at: int) -> bool:
    """A message's magic code and a phy_offset claiming ``at``, read first (8 bytes each), then
    the record checked whole."""
    (magic,) = I32.unpack_from(buf, at + _MAGIC_AT)
    (claimed,) = I64.unpack_from(buf, at + POSITION_PHYSICAL_OFFSET)
    here = file_from_offset + at
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or claimed != here:
        return False
    checked = check_record(buf, at, limit, True, False)
    request = checked.request
    return (
        checked.kind == RecordKind.MESSAGE
        and request is not None
        and (request.commit_log_offset == here)
    )
