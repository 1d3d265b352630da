"""The resend pool (sidecar/resend_pool.py) draining an outbox into a real broker process.

It proves:
- resends are coalesced per topic: plain messages of one topic go up to
  RESEND_BATCH_MESSAGES_MAX per SendMessage request, fewer when their bodies would pass
  RESEND_BATCH_BYTES_MAX; FIFO, delayed and maybe-stored messages go alone;
- a drain marks each resend batch delivered with one ``mark_delivered_many`` (never one
  ``mark_delivered`` per message), every entry ends DELIVERED with the broker's receipt, and the
  broker holds each message;
- ``on_fifo_delivered`` hears of every FIFO entry that left PENDING, delivered or buried (the
  sidecar's fence lifts there), and of no plain one.

The outbox is the reference MemoryOutbox, with its mark_delivered calls recorded on the way.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from outbox.backends.memory import MemoryOutbox
from outbox.entry import (
    DeliveryReceipt,
    EntryState,
    OutboxEntry,
    OutboxLimits,
    OutboxMessage,
    SpoolCause,
)
from sidecar.async_outbox import AsyncOutbox
from sidecar.backoff import Backoff
from sidecar.channels import Endpoint
from sidecar.clock import now_ms
from sidecar.config import ResendConfig
from sidecar.producer import Producer, ProducerConfig
from sidecar.resend_pool import (
    RESEND_BATCH_BYTES_MAX,
    RESEND_BATCH_MESSAGES_MAX,
    ResendPool,
    resend_jobs,
)
from tests.broker.broker_process import BrokerProcess
from tests.sidecar.sidecar_process import wait_stored

pytestmark = pytest.mark.slow

DRAIN_DEADLINE_S = 60.0


def entry(
    n: int,
    topic: str = "Orders",
    *,
    group: str | None = None,
    body: bytes = b"payload",
    delivery_timestamp_ms: int | None = None,
    maybe_stored: bool = False,
) -> OutboxEntry:
    created_ms = now_ms()
    return OutboxEntry(
        message=OutboxMessage(
            topic=topic,
            body=body,
            message_id=f"01{n:032X}",
            message_group=group,
            delivery_timestamp_ms=delivery_timestamp_ms,
        ),
        cause=SpoolCause.UNAVAILABLE,
        created_ms=created_ms,
        next_send_time_ms=created_ms,
        maybe_stored=maybe_stored,
    )


def test_plain_messages_of_a_topic_are_resent_together_up_to_the_limits() -> None:
    orders = [entry(n) for n in range(RESEND_BATCH_MESSAGES_MAX * 2 + 5)]
    payments = [entry(1_000 + n, "Payments") for n in range(3)]
    alone = [
        entry(2_000, group="g"),
        entry(2_001, delivery_timestamp_ms=now_ms() + 60_000),
        entry(2_002, maybe_stored=True),
    ]
    # Interleaved, as a claim hands them out: the batches gather per topic all the same.
    claimed = [*orders[:3], *payments, *alone, *orders[3:]]
    jobs = resend_jobs(claimed)
    assert [len(j) for j in jobs if j[0].message.topic == "Orders" and len(j) > 1] == [
        RESEND_BATCH_MESSAGES_MAX,
        RESEND_BATCH_MESSAGES_MAX,
        5,
    ]
    assert [j for j in jobs if j[0].message.topic == "Payments"] == [payments]
    assert [j for j in jobs if j[0] in alone] == [[e] for e in alone]
    assert sorted(e.message_id for j in jobs for e in j) == sorted(e.message_id for e in claimed)

    # Bodies bound a batch before the count does.
    quarter = RESEND_BATCH_BYTES_MAX // 4
    big = [entry(3_000 + n, body=b"x" * quarter) for n in range(9)]
    assert [len(j) for j in resend_jobs(big)] == [4, 4, 1]


class RecordingOutbox(MemoryOutbox):
    """The reference outbox, recording how the pool marks entries delivered."""

    def __init__(self, limits: OutboxLimits) -> None:
        super().__init__(limits)
        self.single_marks = 0
        self.many_marks: list[int] = []
        self._record = threading.Lock()

    def mark_delivered(self, message_id: str, receipt: DeliveryReceipt) -> bool:
        with self._record:
            self.single_marks += 1
        return super().mark_delivered(message_id, receipt)

    def mark_delivered_many(self, deliveries: Sequence[tuple[str, DeliveryReceipt]]) -> list[bool]:
        with self._record:
            self.many_marks.append(len(deliveries))
        # Not the base's loop of mark_delivered: each item as the reference does it, counted once.
        return [MemoryOutbox.mark_delivered(self, m, r) for m, r in deliveries]


async def drain(
    outbox: RecordingOutbox, broker: BrokerProcess, lifted: list[tuple[str, str]]
) -> ResendPool:
    """Run a pool on ``outbox`` until nothing is PENDING; the pool, stopped."""
    async_outbox = AsyncOutbox(outbox, threads=4)
    producer = Producer(ProducerConfig(access_points=(Endpoint("127.0.0.1", broker.port),)))
    pool = ResendPool(
        ResendConfig(poll_interval_ms=20),
        producer,
        async_outbox,
        Backoff(initial_ms=100, max_ms=500),
        on_fifo_delivered=lambda topic, group: lifted.append((topic, group)),
    )
    runner = asyncio.create_task(pool.run())
    try:
        deadline_s = time.monotonic() + DRAIN_DEADLINE_S
        while outbox.stats(now_ms()).pending:
            assert time.monotonic() < deadline_s, f"not drained: {outbox.stats(now_ms())}"
            assert not runner.done(), "the pool stopped on its own"
            await asyncio.sleep(0.01)
    finally:
        pool.stop()
        await runner
        await producer.close()
        await async_outbox.close()
    return pool


def test_a_drain_marks_each_batch_delivered_in_one_write(broker: BrokerProcess) -> None:
    outbox = RecordingOutbox(OutboxLimits())
    plain = [entry(n) for n in range(300)]
    fifo = [entry(1_000 + n, "Fifo", group="g-1") for n in range(3)]
    outbox.put(plain + fifo)
    lifted: list[tuple[str, str]] = []

    pool = asyncio.run(drain(outbox, broker, lifted))

    assert pool.totals == {"DELIVERED": 303, "RESCHEDULED": 0, "BURIED": 0}
    assert outbox.single_marks == 0
    assert sum(outbox.many_marks) == 303
    assert max(outbox.many_marks) == RESEND_BATCH_MESSAGES_MAX
    for e in plain + fifo:
        stored = outbox.get(e.message_id)
        assert stored is not None
        assert stored.state is EntryState.DELIVERED
        assert stored.receipt is not None
    assert len(wait_stored(broker.endpoint, plain[-1].message_id)) == 1
    # One report per FIFO entry delivered (in order: the group has one in flight).
    assert lifted == [("Fifo", "g-1")] * 3
    assert outbox.pending_groups() == set()


def test_on_fifo_delivered_hears_of_a_buried_fifo_entry(broker: BrokerProcess) -> None:
    outbox = RecordingOutbox(OutboxLimits())
    # A topic name the broker refuses: the resend is rejected, and the entry buried.
    rejected = entry(1, "no such topic!", group="g-2")
    outbox.put([rejected, entry(2)])
    lifted: list[tuple[str, str]] = []

    pool = asyncio.run(drain(outbox, broker, lifted))

    assert pool.totals == {"DELIVERED": 1, "RESCHEDULED": 0, "BURIED": 1}
    buried = outbox.get(rejected.message_id)
    assert buried is not None
    assert buried.state is EntryState.DEAD
    assert lifted == [("no such topic!", "g-2")]
