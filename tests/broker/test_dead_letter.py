"""Dead-lettering (broker/dead_letter.py) in process over a real store, its span recorded by
OpenTelemetry's in-memory exporter.

It proves: a message past its group's maximum attempts is copied to ``%DLQ%<group>`` with its
trace context (``traceparent``, ``tracestate``) and its message id kept, and the dead-lettering is
one ``rocketbox.dead_letter`` span, a child of the message's own context, naming the message,
its topic, the group and the attempts; a message a consumer forwards is dead-lettered alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker import pop_message
from broker.group_config import GroupConfig, dlq_topic
from broker.pop_message import PopMessageService
from broker.store.codec.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageExtBrokerInner
from broker.store.message_store import DefaultMessageStore
from tests.broker.test_pop_message import DISPATCH_DEADLINE_S, Clock, open_store, service
from tests.otel_spans import TRACEPARENT, TRACESTATE, named, recorded_spans, the_producer

TOPIC = "Flaky"
# One delivery allowed: the second goes to the dead-letter queue instead.
GROUP = GroupConfig("Careful", retry_max_times=0)
INVISIBLE_MS = 10_000
MESSAGE_ID = "01" + "AB" * 16


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(pop_message, "_now_ms", lambda: c.now_ms)
    return c


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    s = open_store(tmp_path)
    yield s
    s.shutdown()


def put_traced(store: DefaultMessageStore) -> None:
    properties = {
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: MESSAGE_ID,
        "traceparent": TRACEPARENT,
        "tracestate": TRACESTATE,
    }
    [result] = store.put_messages(
        [MessageExtBrokerInner(topic=TOPIC, body=b"poison", queue_id=0, properties=properties)]
    )
    assert result.ok, result
    assert store.wait_dispatched(DISPATCH_DEADLINE_S), "the store did not dispatch in time"


async def dead_lettered(pop: PopMessageService) -> dict[str, str]:
    """The properties of the one message in the group's dead-letter queue."""
    [dead] = await pop.receive(
        GroupConfig("Janitors"), dlq_topic(GROUP.group_name), (0,), None, 8, INVISIBLE_MS, 0
    )
    assert dead.message.body == b"poison"
    return dead.message.properties


def test_a_message_past_its_attempts_is_dead_lettered_under_its_own_trace(
    store: DefaultMessageStore, tmp_path: Path, clock: Clock
) -> None:
    async def run() -> None:
        put_traced(store)
        pop = service(store, tmp_path)
        with recorded_spans() as spans:
            [first] = await pop.receive(GROUP, TOPIC, (0,), None, 8, INVISIBLE_MS, 0)
            assert first.attempt == 1
            clock.now_ms += INVISIBLE_MS + 1  # expired: the next hand-out would be attempt 2
            assert await pop.receive(GROUP, TOPIC, (0,), None, 8, INVISIBLE_MS, 0) == []
            [span] = named(spans.get_finished_spans(), "rocketbox.dead_letter")
        properties = await dead_lettered(pop)
        assert (properties["traceparent"], properties["tracestate"]) == (TRACEPARENT, TRACESTATE)
        assert properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == MESSAGE_ID
        producer = the_producer()
        assert span.parent is not None
        assert (span.parent.trace_id, span.parent.span_id) == (
            producer.trace_id, producer.span_id,
        )  # fmt: skip
        attributes = dict(span.attributes or {})
        assert attributes["messaging.system"] == "rocketmq"
        assert attributes["messaging.message.id"] == MESSAGE_ID
        assert attributes["messaging.destination.name"] == TOPIC
        assert attributes["messaging.consumer.group.name"] == GROUP.group_name
        assert attributes["rocketbox.dead_letter.topic"] == dlq_topic(GROUP.group_name)
        assert attributes["rocketbox.delivery_attempts"] == 1

    asyncio.run(run())


def test_a_message_a_consumer_forwards_is_dead_lettered_alike(
    store: DefaultMessageStore, tmp_path: Path, clock: Clock
) -> None:
    async def run() -> None:
        put_traced(store)
        pop = service(store, tmp_path)
        with recorded_spans() as spans:
            [first] = await pop.receive(GROUP, TOPIC, (0,), None, 8, INVISIBLE_MS, 0)
            await pop.forward_to_dead_letter(GROUP.group_name, TOPIC, first.receipt_handle)
            [span] = named(spans.get_finished_spans(), "rocketbox.dead_letter")
        assert span.context.trace_id == the_producer().trace_id
        assert (await dead_lettered(pop))["traceparent"] == TRACEPARENT

    asyncio.run(run())
