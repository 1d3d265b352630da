"""Expected outcomes of store calls, as RocketMQ names them (PutMessageStatus, GetMessageStatus)."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.store.codec.message import MessageExt
from broker.store.errors import MessageIllegalError


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    # Stored, but not durable within sync_flush_timeout_ms: weakly durable, never resend.
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    # SYNC_MASTER: stored here, but no slave acknowledged it within sync_flush_timeout_ms.
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    # SYNC_MASTER: stored here, but no slave is connected, or it is further behind than
    # ha_max_gap_not_in_sync_bytes: nothing to wait for.
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    # Store not running, shutting down, or the disk is above disk_used_space_ratio_max.
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    # The put lock has been held longer than os_page_cache_busy_timeout_ms: system busy.
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def is_stored(self) -> bool:
        return self in _STORED


_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


class AppendMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class AppendMessageResult(NamedTuple):
    """Where a record landed (RocketMQ's AppendMessageResult). A NamedTuple: one is made per
    stored message, and a frozen dataclass costs several times as much to build."""

    wrote_offset: int  # phy_offset of the record
    wrote_bytes: int
    queue_offset: int
    store_timestamp_ms: int
    msg_id: str | None


class PutMessageResult(NamedTuple):
    status: PutMessageStatus
    append: AppendMessageResult | None = None
    # Set for MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED: names the field and the limit.
    illegal: MessageIllegalError | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status.is_stored


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)


# Given a put's results, the results to answer once a slave holds them (a SYNC_MASTER's wait).
ReplicaWait = Callable[[list[PutMessageResult]], Awaitable[list[PutMessageResult]]]


def illegal_result(error: MessageIllegalError) -> PutMessageResult:
    """The answer to a message validation refused."""
    status = (
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        if error.field == "properties"
        else PutMessageStatus.MESSAGE_ILLEGAL
    )
    return PutMessageResult(status, illegal=error, detail=str(error))


def flush_timeouts(results: list[PutMessageResult]) -> list[PutMessageResult]:
    """``results`` once their fsync did not come within sync_flush_timeout_ms: what was stored
    is FLUSH_DISK_TIMEOUT (weakly durable); the refused stay as they were."""
    return [
        PutMessageResult(
            PutMessageStatus.FLUSH_DISK_TIMEOUT,
            r.append,
            detail="stored, but not flushed within sync_flush_timeout_ms",
        )
        if r.status is PutMessageStatus.PUT_OK
        else r
        for r in results
    ]
