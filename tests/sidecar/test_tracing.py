"""The sidecar's spans (sidecar/tracing.py), recorded by OpenTelemetry's in-memory exporter over
intake and the resend pool in this process (tests/sidecar/in_process.py).

It proves:
- a spool write is one ``rocketbox.spool`` span, linked to each spooled message's trace context
  (the link naming the message id), with the messaging attributes and the spool cause; a message
  without a trace context is counted and not linked;
- a resend is one ``rocketbox.resend`` span linked to its messages' contexts, and its broker call
  a ``rocketbox.resend.send`` PRODUCER span, its child;
- a burial is a ``rocketbox.bury`` span, a child of the buried message's own context, with the
  reason;
- a send the broker stores at once records no span (the hot path pays for none);
- without OpenTelemetry, spans are no-ops and the operations run as before.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from opentelemetry.trace import SpanKind

from outbox import EntryState, OutboxMessage
from rocketbox_api import tracing
from sidecar.intake import Spooled, Stored
from tests.otel_spans import TRACEPARENT, TRACESTATE, linked, named, recorded_spans, the_producer
from tests.sidecar.in_process import FAST_RESEND, RETRY_TIMES_WHEN_SEND_FAILED, Core, core, message
from tests.sidecar.in_process import wait_for as wait_in_process
from tests.sidecar.scripted_broker import Answer

EVERY_ATTEMPT = 1 + RETRY_TIMES_WHEN_SEND_FAILED
TRACED = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}
# Another app's context: a second trace the same write links to.
OTHER_TRACE_ID_HEX = "0af7651916cd43dd8448eb211c80319c"
OTHER_SPAN_ID_HEX = "b7ad6b7169203331"
OTHER = {"traceparent": f"00-{OTHER_TRACE_ID_HEX}-{OTHER_SPAN_ID_HEX}-01"}


def traced(n: int, properties: dict[str, str]) -> OutboxMessage:
    return message(n, properties=properties)


def producer_ids() -> tuple[int, int]:
    c = the_producer()
    return c.trace_id, c.span_id


def test_a_spool_write_links_each_message_and_names_the_cause() -> None:
    async def run() -> None:
        with recorded_spans() as spans:
            async with core(pool_running=False) as c:
                c.broker.answer_next(*[Answer.BROKER_ERROR] * EVERY_ATTEMPT)
                # One coalesced request fails: its three messages share one spool write.
                ms = [traced(1, TRACED), traced(2, OTHER), message(3)]
                outcomes = await asyncio.gather(*(c.intake.accept(m) for m in ms))
                assert all(isinstance(o, Spooled) for o in outcomes)
            [spool] = named(spans.get_finished_spans(), "rocketbox.spool")
            attributes = dict(spool.attributes or {})
            assert attributes["messaging.system"] == "rocketmq"
            assert attributes["messaging.operation.name"] == "spool"
            assert attributes["messaging.destination.name"] == "Orders"
            assert attributes["messaging.batch.message_count"] == 3
            assert attributes["rocketbox.spool.cause"] == "UNAVAILABLE"
            assert linked(spool) == {
                ms[0].message_id: producer_ids(),
                ms[1].message_id: (int(OTHER_TRACE_ID_HEX, 16), int(OTHER_SPAN_ID_HEX, 16)),
            }
            assert spool.links[0].context.trace_state.get("rojo") == "00f067aa0ba902b7"

    asyncio.run(run())


async def spooled_then_resent(c: Core) -> OutboxMessage:
    """A traced message the broker refuses at every attempt (so spooled), then delivered by
    the running resend pool."""
    c.broker.answer_next(*[Answer.BROKER_ERROR] * EVERY_ATTEMPT)
    m = traced(1, TRACED)
    assert isinstance(await c.intake.accept(m), Spooled)
    await wait_in_process(lambda: c.pool.totals["DELIVERED"] == 1, "the resend delivered")
    return m


def test_a_resend_links_its_messages_and_its_broker_call_is_its_child() -> None:
    async def run() -> None:
        with recorded_spans() as spans:
            async with core(pool_running=True) as c:
                m = await spooled_then_resent(c)
            finished = spans.get_finished_spans()
            [resend] = named(finished, "rocketbox.resend")
            [send] = named(finished, "rocketbox.resend.send")
            assert linked(resend) == {m.message_id: producer_ids()}
            attributes = dict(resend.attributes or {})
            assert attributes["messaging.message.id"] == m.message_id
            assert attributes["messaging.destination.name"] == "Orders"
            assert attributes["rocketbox.resend.attempt"] == 1
            assert send.kind is SpanKind.PRODUCER
            assert send.parent is not None
            assert send.parent.span_id == resend.context.span_id
            assert dict(send.attributes or {})["messaging.operation.type"] == "send"
            assert c.broker.stored[m.message_id]

    asyncio.run(run())


def test_a_burial_is_a_child_of_the_messages_own_context() -> None:
    resend = dataclasses.replace(FAST_RESEND, age_max_s=1)

    async def run() -> None:
        with recorded_spans() as spans:
            async with core(resend, pool_running=True) as c:
                c.broker.standing_answer = Answer.BROKER_ERROR
                m = traced(1, TRACED)
                assert isinstance(await c.intake.accept(m), Spooled)

                def dead() -> bool:
                    entry = c.outbox.get(m.message_id)
                    return entry is not None and entry.state is EntryState.DEAD

                await wait_in_process(dead, "the entry buried")
            [bury] = named(spans.get_finished_spans(), "rocketbox.bury")
            assert bury.parent is not None
            assert (bury.parent.trace_id, bury.parent.span_id) == producer_ids()
            assert bury.context.trace_id == producer_ids()[0]
            attributes = dict(bury.attributes or {})
            assert attributes["messaging.message.id"] == m.message_id
            assert attributes["rocketbox.spool.cause"] == "UNAVAILABLE"
            assert str(attributes["rocketbox.bury.reason"]).startswith(
                "not delivered within its budget of 1 s"
            )

    asyncio.run(run())


def test_a_send_stored_at_once_records_no_span() -> None:
    async def run() -> None:
        with recorded_spans() as spans:
            async with core(pool_running=True) as c:
                assert isinstance(await c.intake.accept(traced(1, TRACED)), Stored)
            assert spans.get_finished_spans() == ()

    asyncio.run(run())


def test_links_per_span_are_bounded() -> None:
    with recorded_spans() as spans:
        with tracing.MessageSpans("test").start("many") as span:
            assert span is not None
            many = [(f"id-{n}", TRACED) for n in range(tracing.SPAN_LINKS_MAX + 5)]
            tracing.link_messages(span, many)
        [recorded] = spans.get_finished_spans()
        assert len(recorded.links) == tracing.SPAN_LINKS_MAX
        assert dict(recorded.attributes or {})["rocketbox.links_omitted"] == 5


def test_without_opentelemetry_spans_are_no_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "trace", None)

    async def run() -> None:
        with recorded_spans() as spans:
            async with core(pool_running=True) as c:
                m = await spooled_then_resent(c)
            assert spans.get_finished_spans() == ()
            assert c.broker.stored[m.message_id]

    asyncio.run(run())
