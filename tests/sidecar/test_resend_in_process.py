"""The resend pool (sidecar/resend_pool.py) in this process, draining what intake spooled into
the memory outbox back into a scripted broker.

It proves:
- an entry spooled while the broker failed is resent under its message id once the broker
  stores again, and ends DELIVERED with the broker's offset (and no queue: its answer names none);
- an entry that may be stored and is (the broker stored it, then the call never answered) is
  settled by the broker's index: DELIVERED with the stored copy's queue and offset, never sent
  again;
- an entry that may be stored and is not (the call never answered) is looked up, then sent: the
  broker holds it once;
- a throttled resend is rescheduled with its attempt counted, then delivered;
- an entry whose resends keep failing is buried (DEAD) once its delivery budget ran out, with its
  last error, and on_fifo_delivered hears of a FIFO entry that left PENDING that way.
"""

from __future__ import annotations

import asyncio

from outbox import EntryState, SpoolCause
from sidecar.intake import Spooled
from sidecar.producer import QUEUE_ID_UNKNOWN
from tests.sidecar.in_process import (
    RETRY_TIMES_WHEN_SEND_FAILED,
    Core,
    core,
    message,
    wait_for,
)
from tests.sidecar.scripted_broker import Answer

EVERY_ATTEMPT = 1 + RETRY_TIMES_WHEN_SEND_FAILED


def delivered(c: Core, message_id: str) -> bool:
    entry = c.outbox.get(message_id)
    return entry is not None and entry.state is EntryState.DELIVERED


def test_an_entry_spooled_in_an_outage_is_resent_and_delivered() -> None:
    async def run() -> None:
        async with core(pool_running=True) as c:
            c.broker.answer_next(*[Answer.BROKER_ERROR] * EVERY_ATTEMPT)
            m = message(1)
            assert isinstance(await c.intake.accept(m), Spooled)
            await wait_for(lambda: delivered(c, m.message_id), "the resend delivered")
            stored = c.broker.stored[m.message_id]
            receipt = c.entry(m.message_id).receipt
            assert receipt is not None
            assert (receipt.queue_id, receipt.queue_offset) == (
                QUEUE_ID_UNKNOWN, stored.queue_offset,
            )  # fmt: skip
            assert c.broker.store_log == [m.message_id]
            assert c.pool.totals["DELIVERED"] == 1

    asyncio.run(run())


def test_a_maybe_stored_entry_the_broker_holds_is_settled_by_its_index() -> None:
    async def run() -> None:
        async with core(pool_running=True) as c:
            c.broker.answer_next(Answer.STORE_AND_HANG)
            m = message(1)
            spooled = await c.intake.accept(m)
            assert isinstance(spooled, Spooled)
            assert (spooled.entry.cause, spooled.entry.maybe_stored) == (
                SpoolCause.AMBIGUOUS, True,
            )  # fmt: skip
            sends_before = len(c.broker.requests)
            await wait_for(lambda: delivered(c, m.message_id), "the index settled it")
            assert c.broker.lookups == [m.message_id]
            assert len(c.broker.requests) == sends_before, "not sent again"
            assert c.broker.store_log == [m.message_id], "stored once"
            receipt = c.entry(m.message_id).receipt
            assert receipt is not None
            stored = c.broker.stored[m.message_id]
            assert (receipt.queue_id, receipt.queue_offset) == (
                stored.queue_id, stored.queue_offset,
            )  # fmt: skip

    asyncio.run(run())


def test_a_maybe_stored_entry_the_broker_lacks_is_looked_up_then_sent() -> None:
    async def run() -> None:
        async with core(pool_running=True) as c:
            c.broker.answer_next(Answer.HANG)  # it takes the whole send_msg_timeout_ms
            m = message(1)
            spooled = await c.intake.accept(m)
            assert isinstance(spooled, Spooled)
            assert spooled.entry.maybe_stored
            await wait_for(lambda: delivered(c, m.message_id), "the resend delivered")
            assert c.broker.lookups == [m.message_id]
            assert c.broker.store_log == [m.message_id], "stored once"

    asyncio.run(run())


def test_a_throttled_resend_is_rescheduled_then_delivered() -> None:
    async def run() -> None:
        async with core(pool_running=True) as c:
            c.broker.answer_next(Answer.THROTTLE, Answer.THROTTLE)
            m = message(1)
            assert isinstance(await c.intake.accept(m), Spooled)
            await wait_for(lambda: delivered(c, m.message_id), "the resend delivered")
            assert c.entry(m.message_id).attempts == 1, "the throttled resend was counted"
            assert c.pool.totals == {"DELIVERED": 1, "RESCHEDULED": 1, "BURIED": 0}
            # Intake's send, the throttled resend, the one that stored: no retry in between.
            assert c.broker.requests == [[m.message_id]] * 3

    asyncio.run(run())


def test_an_entry_past_its_delivery_budget_is_buried_with_its_last_error() -> None:
    async def run() -> None:
        async with core(pool_running=True) as c:
            c.broker.standing_answer = Answer.BROKER_ERROR
            m = message(1, "Fifo", message_group="g", delivery_timeout_ms=1_000)
            assert isinstance(await c.intake.accept(m), Spooled)

            def dead() -> bool:
                entry = c.outbox.get(m.message_id)
                return entry is not None and entry.state is EntryState.DEAD

            await wait_for(dead, "the entry buried")
            entry = c.entry(m.message_id)
            assert entry.last_error.startswith("not delivered within its budget of 1 s ("), (
                entry.last_error
            )
            assert "; last: UNAVAILABLE" in entry.last_error
            assert c.pool.totals["BURIED"] == 1
            assert c.pool.totals["DELIVERED"] == 0
            assert c.fifo_settled == [("Fifo", "g")]
            assert c.broker.stored == {}

    asyncio.run(run())
