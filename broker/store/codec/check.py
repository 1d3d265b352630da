"""Checking a record in place: is there a valid message at this position, and what does the
dispatcher need of it?

``check_record`` is RocketMQ's checkMessageAndReturnSize: recovery calls it record by record to
find where valid data ends; the dispatcher calls it to build consume queues and the index; the
scan (scan.py) calls it to describe the damage it stops at, so a tool and the broker describe the
same damage the same way.

With ``check_crc`` it checks the body CRC of every record, and the record CRC of a record that
ends with its pair (layout.py). A record without the pair, as RocketMQ writes by default, is
accepted on its body CRC and its structure unless ``require_record_crc``: rocketbox's recovery
requires it on rocketbox's own log (a record of ours without it lost it to damage); the
reconciliation, which also reads logs RocketMQ wrote, does not.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

from broker.store.codec.crc import crc32
from broker.store.codec.decode import decode_record_at
from broker.store.codec.encode import body_crc
from broker.store.codec.layout import (
    BLANK_MAGIC_CODE,
    CRC32_DIGITS,
    CRC32_RESERVED_LENGTH,
    END_FILE_MIN_BLANK_LENGTH,
    HEAD,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_SEPARATOR_BYTE,
    TOTAL_AND_MAGIC,
    ReadableBuffer,
    has_record_crc,
)
from broker.store.codec.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageExt,
    tags_string_to_tags_code,
)


class DispatchRequest(NamedTuple):
    """What the dispatcher needs of one record (RocketMQ's DispatchRequest)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp_ms: int
    consume_queue_offset: int
    keys: str
    uniq_key: str | None
    sysflag: int
    prepared_transaction_offset: int
    properties: dict[str, str]


class RecordKind:
    """What ``check_record`` found at a position."""

    MESSAGE: Final = 0
    BLANK: Final = 1  # segment tail padding: continue in the next segment
    END: Final = 2  # zeros: no record was ever written here
    CORRUPT: Final = 3  # a torn or damaged record


@dataclass(slots=True)
class CheckResult:
    kind: int
    size: int
    request: DispatchRequest | None
    reason: str = ""


def check_record(
    buf: ReadableBuffer, pos: int, limit: int, check_crc: bool, require_record_crc: bool = False
) -> CheckResult:
    """Validate the record at ``pos`` (never reading at or past ``limit``) and describe it."""
    if limit - pos < END_FILE_MIN_BLANK_LENGTH:
        return CheckResult(RecordKind.END, 0, None)
    total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total == limit - pos:
            return CheckResult(RecordKind.BLANK, total, None)
        return CheckResult(RecordKind.CORRUPT, 0, None, f"blank marker of {total} bytes at {pos}")
    if total == 0 and magic == 0:
        return CheckResult(RecordKind.END, 0, None)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return CheckResult(RecordKind.CORRUPT, 0, None, f"bad magic code {magic:#x}")
    if total < HEAD.size or pos + total > limit:
        return CheckResult(RecordKind.CORRUPT, 0, None, f"total size {total} out of range")
    try:
        msg, properties_at = decode_record_at(buf, pos, total, magic, with_body=check_crc)
    except (struct.error, ValueError, UnicodeDecodeError, OSError) as e:
        return CheckResult(RecordKind.CORRUPT, 0, None, f"undecodable record: {e}")
    if check_crc:
        reason = _crc_problem(buf, pos, total, properties_at, msg, require_record_crc)
        if reason:
            return CheckResult(RecordKind.CORRUPT, 0, None, reason)
    req = DispatchRequest(
        msg.topic,
        msg.queue_id,
        msg.commit_log_offset,
        total,
        tags_string_to_tags_code(msg.properties.get(PROPERTY_TAGS)),
        msg.store_timestamp_ms,
        msg.queue_offset,
        msg.properties.get(PROPERTY_KEYS, ""),
        msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        msg.sysflag,
        msg.prepared_transaction_offset,
        msg.properties,
    )
    if msg.commit_log_offset != -1 and msg.commit_log_offset < 0:
        return CheckResult(RecordKind.CORRUPT, 0, None, "negative physical offset")
    return CheckResult(RecordKind.MESSAGE, total, req)


def _crc_problem(
    buf: ReadableBuffer,
    pos: int,
    total: int,
    properties_at: int,
    msg: MessageExt,
    require_record_crc: bool,
) -> str:
    if body_crc(msg.body) != msg.body_crc:
        return "body CRC mismatch"
    end = pos + total
    if not has_record_crc(buf, properties_at, end):
        return "record CRC property missing" if require_record_crc else ""
    digits = bytes(buf[end - 1 - CRC32_DIGITS : end - 1])
    if not digits.isdigit() or buf[end - 1] != PROPERTY_SEPARATOR_BYTE[0]:
        return "malformed record CRC property"
    if crc32(buf[pos : end - CRC32_RESERVED_LENGTH]) & 0x7FFFFFFF != int(digits[::-1]):
        return "record CRC mismatch"
    return ""
