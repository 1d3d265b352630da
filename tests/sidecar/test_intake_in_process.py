"""Intake (sidecar/intake.py) in this process, against the memory outbox and a scripted broker:
each message is STORED, SPOOLED or REJECTED, and what went to the broker and the outbox says why.

It proves:
- a message the broker stores is STORED with the broker's offset (and no queue: the broker's
  answer names none), in one request, and nothing is spooled;
- bad input is rejected naming its field, with nothing sent and nothing spooled;
- a throttled send is spooled THROTTLED after its one request (no immediate retry: RocketMQ's
  rule), due only after a back-off step;
- a broker that answers with an error gets 1 + retry_times_when_send_failed requests of the same
  message id, then the message is spooled UNAVAILABLE, not maybe stored;
- a broker that fails the call (gRPC UNAVAILABLE on a live connection) or never answers leaves
  the message maybe stored: spooled AMBIGUOUS, marked so;
- once a FIFO group has a message spooled, its next message is spooled behind it (FIFO_FENCE)
  without a request to the broker, while another group is sent as usual;
- an outbox that cannot spool turns into a REJECTED answer (UNAVAILABLE with a retry-after),
  the one rejection type, never an outbox error reaching the app.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from outbox import EntryState, SpoolCause
from sidecar.errors import SPOOL_OUTCOME_OPEN, SendRejectedError
from sidecar.intake import Spooled, Stored
from sidecar.producer import QUEUE_ID_UNKNOWN
from tests.sidecar.in_process import RETRY_TIMES_WHEN_SEND_FAILED, core, message
from tests.sidecar.scripted_broker import BROKER_NAME, Answer


def test_a_message_the_broker_stores_is_stored_and_not_spooled() -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            accepted = await c.intake.accept(message(1))
            assert isinstance(accepted, Stored)
            stored = c.broker.stored[message(1).message_id]
            # The broker's answer names no queue: the receipt does not guess one.
            assert (accepted.receipt.broker_name, accepted.receipt.queue_id) == (
                BROKER_NAME, QUEUE_ID_UNKNOWN,
            )  # fmt: skip
            assert accepted.receipt.queue_offset == stored.queue_offset
            assert accepted.receipt.durable
            assert c.broker.requests == [[message(1).message_id]]
            assert c.outbox.get(message(1).message_id) is None

    asyncio.run(run())


def test_bad_input_is_rejected_naming_its_field_with_nothing_sent_or_spooled() -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            with pytest.raises(SendRejectedError) as rejected:
                await c.intake.accept(message(1, body=b""))
            assert (rejected.value.code, rejected.value.field) == (
                grpc.StatusCode.INVALID_ARGUMENT, "body",
            )  # fmt: skip
            assert not rejected.value.retriable
            assert c.broker.requests == []
            assert c.outbox.get(message(1).message_id) is None

    asyncio.run(run())


def test_a_throttled_send_is_spooled_after_one_request() -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            c.broker.answer_next(Answer.THROTTLE)
            accepted = await c.intake.accept(message(1))
            assert isinstance(accepted, Spooled)
            assert (accepted.entry.cause, accepted.entry.maybe_stored) == (
                SpoolCause.THROTTLED, False,
            )  # fmt: skip
            assert len(c.broker.requests) == 1, "no immediate retry after throttling"
            entry = c.entry(message(1).message_id)
            assert entry.state is EntryState.PENDING
            assert entry.next_send_time_ms > entry.created_ms, "due after a back-off step"

    asyncio.run(run())


def test_a_failing_broker_gets_every_retry_then_the_message_is_spooled() -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            c.broker.answer_next(*[Answer.BROKER_ERROR] * (1 + RETRY_TIMES_WHEN_SEND_FAILED))
            accepted = await c.intake.accept(message(1))
            assert isinstance(accepted, Spooled)
            assert (accepted.entry.cause, accepted.entry.maybe_stored) == (
                SpoolCause.UNAVAILABLE, False,
            )  # fmt: skip
            assert c.broker.requests == [[message(1).message_id]] * 3, "one id on every retry"
            assert c.broker.stored == {}

    asyncio.run(run())


@pytest.mark.parametrize("answer", [Answer.UNAVAILABLE, Answer.HANG])
def test_a_call_that_fails_or_never_answers_spools_the_message_maybe_stored(
    answer: Answer,
) -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            c.broker.answer_next(*[answer] * (1 + RETRY_TIMES_WHEN_SEND_FAILED))
            accepted = await c.intake.accept(message(1))
            assert isinstance(accepted, Spooled)
            assert (accepted.entry.cause, accepted.entry.maybe_stored) == (
                SpoolCause.AMBIGUOUS, True,
            )  # fmt: skip
            assert c.entry(message(1).message_id).maybe_stored

    asyncio.run(run())


def test_a_spooled_fifo_group_fences_its_next_message_and_no_other_group() -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            # A send stored first: the failure below is its message's own, not an outage.
            assert isinstance(await c.intake.accept(message(0, "Fifo", message_group="f")), Stored)
            c.broker.answer_next(*[Answer.BROKER_ERROR] * (1 + RETRY_TIMES_WHEN_SEND_FAILED))
            first = await c.intake.accept(message(1, "Fifo", message_group="g"))
            assert isinstance(first, Spooled)
            requests_before = len(c.broker.requests)

            fenced = await c.intake.accept(message(2, "Fifo", message_group="g"))
            assert isinstance(fenced, Spooled)
            assert fenced.entry.cause is SpoolCause.FIFO_FENCE
            assert len(c.broker.requests) == requests_before, "nothing sent past the fence"
            other = await c.intake.accept(message(3, "Fifo", message_group="h"))
            assert isinstance(other, Stored)
            assert c.broker.requests[-1] == [message(3).message_id]

    asyncio.run(run())


def test_an_outbox_that_cannot_spool_answers_rejected_unavailable() -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            c.outbox.close()  # the backend under the sidecar is gone
            c.broker.answer_next(Answer.THROTTLE)
            with pytest.raises(SendRejectedError) as rejected:
                await c.intake.accept(message(1))
            assert rejected.value.code is grpc.StatusCode.UNAVAILABLE
            assert rejected.value.retry_after_ms > 0
            assert rejected.value.retriable
            # The outbox did not answer the write: the app is told to send it again by its id.
            assert f"{SPOOL_OUTCOME_OPEN} {message(1).message_id}" in rejected.value.reason

    asyncio.run(run())
