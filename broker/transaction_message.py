"""Transactional messages (RocketMQ's TransactionalMessageService), kept in the commitlog.

- A half message is stored under ``RMQ_SYS_TRANS_HALF_TOPIC`` (queue 0) with its real topic and
  queue as properties: durable, invisible to consumers.
- Its transaction id encodes the half message's phy_offset (plus a check on the message id), so
  EndTransaction finds it again after any restart without a table.
- COMMIT puts a copy under the real topic (same message id), then an op record under
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` whose body is the half message's queue offset; ROLLBACK writes
  the op record only. A half message with an op record is resolved; a second EndTransaction for
  it answers OK and changes nothing. A crash between the copy and the op record is caught by
  looking the message id up in the real topic before copying again.
- The check service walks unresolved half messages older than ``transaction_timeout_ms`` every
  ``transaction_check_interval_ms`` and asks a live producer of the topic (``request_check``);
  after ``transaction_check_max`` checks without an answer the message is rolled back.
- Progress (``config/transaction_progress.json``): the half-queue watermark below which every half
  message is resolved, and the check counts. Resolutions themselves are the op records, so
  losing the progress file only costs extra checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from broker.background import BackgroundTasks
from broker.state_file import StateWriter, read_json
from broker.store.codec.message import (
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    MessageExt,
    MessageExtBrokerInner,
)
from broker.store.message_store import DefaultMessageStore
from broker.system_topic import park, real_topic_of, unparked_copy

LOG = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
SYSTEM_QUEUE_ID = 0
PROGRESS_FILE_NAME = "transaction_progress.json"
PROGRESS_FLUSH_INTERVAL_S = 1.0
TRANSACTION_ID_LENGTH = 24

# Asks a producer of the topic to check the half message; False when none is connected.
RequestCheck = Callable[[str, MessageExt, str], bool]


class Resolution(enum.Enum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class EndTransactionOutcome(enum.Enum):
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    ALREADY_RESOLVED = "ALREADY_RESOLVED"


class TransactionError(Exception):
    """EndTransaction for a transaction the broker does not know, or cannot resolve now."""

    def __init__(self, reason: str, *, invalid_id: bool = False, retriable: bool = False) -> None:
        self.invalid_id = invalid_id
        self.retriable = retriable
        super().__init__(reason)


def make_transaction_id(phy_offset: int, msg_id: str) -> str:
    return f"{phy_offset:016X}{zlib.crc32(msg_id.encode()):08X}"


class TransactionalMessageService:
    def __init__(
        self,
        store: DefaultMessageStore,
        config_dir: Path,
        timeout_ms: int,
        check_interval_ms: int,
        check_max: int,
        request_check: RequestCheck,
    ) -> None:
        self._store = store
        self._progress_path = config_dir / PROGRESS_FILE_NAME
        self._timeout_ms = timeout_ms
        self._check_interval_s = check_interval_ms / 1000
        self._check_max = check_max
        self._request_check = request_check
        self._resolved: set[int] = set()  # half queue offsets at or above the watermark
        self._watermark = 0
        self._checks: dict[int, int] = {}
        self._lock = asyncio.Lock()  # one resolution at a time: client and check may race
        self._progress = StateWriter(
            self._progress_path,
            lambda: {
                "watermark": self._watermark,
                "checks": {str(k): v for k, v in self._checks.items()},
            },
            PROGRESS_FLUSH_INTERVAL_S,
        )
        self._task: asyncio.Task[None] | None = None
        self.checks_sent = 0
        self.rolled_back_unresolved = 0

    # -- the send side -------------------------------------------------------------------
    def wrap_half(self, inner: MessageExtBrokerInner, real_queue_id: int) -> None:
        park(inner, HALF_TOPIC, SYSTEM_QUEUE_ID, real_queue_id)
        inner.properties[PROPERTY_TRANSACTION_PREPARED] = "true"

    # -- life cycle ----------------------------------------------------------------------
    async def start(self, tasks: BackgroundTasks) -> None:
        raw = read_json(self._progress_path)
        if raw is not None:
            self._watermark = int(raw["watermark"])
            self._checks = {int(k): int(v) for k, v in raw["checks"].items()}
        self._load_resolutions()
        self._task = tasks.start(self._check_loop(), "transaction-check")
        self._progress.start(tasks)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._progress.stop()

    def _load_resolutions(self) -> None:
        cq = self._store.consume_queue_store.find(OP_TOPIC, SYSTEM_QUEUE_ID)
        if cq is None:
            return
        for e in cq.scan(cq.min_offset_in_queue):
            op = self._store.look_message_by_offset(e.phy_offset, e.size)
            if op is not None and op.body.isdigit():
                half_offset = int(op.body)
                if half_offset >= self._watermark:
                    self._resolved.add(half_offset)

    # -- EndTransaction ------------------------------------------------------------------
    async def end_transaction(
        self, topic: str, message_id: str, transaction_id: str, resolution: Resolution
    ) -> EndTransactionOutcome:
        half = self._find_half(topic, message_id, transaction_id)
        async with self._lock:
            return await self._resolve(half, resolution, reason="client")

    def _find_half(self, topic: str, message_id: str, transaction_id: str) -> MessageExt:
        tid = transaction_id.strip()
        if len(tid) != TRANSACTION_ID_LENGTH:
            raise TransactionError(
                f"transaction_id {transaction_id!r} is not one of ours", invalid_id=True
            )
        try:
            phy_offset = int(tid[:16], 16)
        except ValueError:
            raise TransactionError(
                f"transaction_id {transaction_id!r} is not hex", invalid_id=True
            ) from None
        if tid != make_transaction_id(phy_offset, message_id):
            raise TransactionError(
                f"transaction_id {transaction_id!r} does not belong to message {message_id!r}",
                invalid_id=True,
            )
        half = self._store.look_message_by_offset(phy_offset)
        if (
            half is None
            or half.topic != HALF_TOPIC
            or half.msg_id != message_id
            or real_topic_of(half) != topic
        ):
            raise TransactionError(
                f"no half message {message_id!r} of topic {topic!r} for transaction {tid}"
            )
        return half

    async def _resolve(
        self, half: MessageExt, resolution: Resolution, reason: str
    ) -> EndTransactionOutcome:
        offset = half.queue_offset
        if offset < self._watermark or offset in self._resolved:
            return EndTransactionOutcome.ALREADY_RESOLVED
        if resolution is Resolution.COMMIT:
            await self._put_real_copy(half)
        op = MessageExtBrokerInner(
            topic=OP_TOPIC,
            body=str(offset).encode(),
            queue_id=SYSTEM_QUEUE_ID,
            properties={PROPERTY_TAGS: resolution.value},
        )
        [result] = await self._store.async_put_messages([op])
        if not result.ok:
            raise TransactionError(f"op record not stored: {result.status.value}", retriable=True)
        self._resolved.add(offset)
        self._checks.pop(offset, None)
        self._progress.dirty = True
        while self._watermark in self._resolved:
            self._resolved.remove(self._watermark)
            self._watermark += 1
        LOG.info(
            "transaction of %s %s (%s)",
            half.msg_id,
            "committed" if resolution is Resolution.COMMIT else "rolled back",
            reason,
            extra={"message_id": half.msg_id, "topic": real_topic_of(half)},
        )
        if resolution is Resolution.COMMIT:
            return EndTransactionOutcome.COMMITTED
        return EndTransactionOutcome.ROLLED_BACK

    async def _put_real_copy(self, half: MessageExt) -> None:
        real_topic = real_topic_of(half)
        if half.msg_id and self._store.look_message_by_id(half.msg_id, real_topic) is not None:
            return  # committed before a crash lost the op record
        copy = unparked_copy(half, drop=(PROPERTY_TRANSACTION_PREPARED,))
        [result] = await self._store.async_put_messages([copy])
        if not result.ok:
            raise TransactionError(f"commit not stored: {result.status.value}", retriable=True)

    # -- check-back ----------------------------------------------------------------------
    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval_s)
            try:
                await self.check_once(time.time_ns() // 1_000_000)
            except Exception:
                LOG.exception("transaction check pass failed")

    async def check_once(self, now_ms: int) -> None:
        cq = self._store.consume_queue_store.find(HALF_TOPIC, SYSTEM_QUEUE_ID)
        if cq is None:
            return
        async with self._lock:
            if cq.min_offset_in_queue > self._watermark:
                self._watermark = cq.min_offset_in_queue
                self._progress.dirty = True
            for e in cq.scan(self._watermark):
                if e.queue_offset in self._resolved:
                    continue
                half = self._store.look_message_by_offset(e.phy_offset, e.size)
                if half is None:
                    continue
                if now_ms - half.store_timestamp_ms < self._timeout_ms:
                    return  # later half messages are younger still
                await self._check(half, e.phy_offset)

    async def _check(self, half: MessageExt, phy_offset: int) -> None:
        offset = half.queue_offset
        count = self._checks.get(offset, 0)
        if count >= self._check_max:
            self.rolled_back_unresolved += 1
            with contextlib.suppress(TransactionError):
                await self._resolve(half, Resolution.ROLLBACK, f"unresolved after {count} checks")
            return
        self._checks[offset] = count + 1
        self._progress.dirty = True
        real_topic = real_topic_of(half)
        tid = make_transaction_id(phy_offset, half.msg_id or "")
        if self._request_check(real_topic, half, tid):
            self.checks_sent += 1
        else:
            LOG.warning("no producer of %s to check transaction %s", real_topic, tid)
