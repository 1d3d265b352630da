"""The producer's rules, as RocketMQ's DefaultMQProducer has them:

- message ids in the V1 format, unique, stamped once;
- a failed send is retried on another broker (retry_times_when_send_failed), and latency fault
  avoidance then prefers the broker that answered; with every broker failing, the send ends as
  one SendFailedError after 1 + retry_times_when_send_failed attempts within the one timeout;
- a FIFO message is always sent to the same queue; a receipt is what the broker answered, so
  it names no queue (the broker picks it), and no broker when the endpoint fronts several;
- the broker's answers are classified as docs/design.md §4.2 says (stored, weak, throttled,
  terminal, ambiguous), and back-off waits grow and stay within their bounds.

The two-broker cases use a real broker behind a route that also names a broker that is down:
the route is served by a small apache.rocketmq.v2 QueryRoute server, the sends go to the real
broker process (and to a closed port).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from outbox.entry import OutboxMessage, SpoolCause
from sidecar.backoff import Backoff
from sidecar.channels import Channels, Endpoint
from sidecar.errors import SendFailedError, SendRejectedError
from sidecar.latency_fault import LatencyFaultTolerance, not_available_duration_ms
from sidecar.message_id import MessageIdGenerator
from sidecar.producer import (
    BROKER_NAME_UNKNOWN,
    QUEUE_ID_UNKNOWN,
    Producer,
    ProducerConfig,
    SendReceipt,
)
from sidecar.route import TopicRouteCache
from sidecar.send_status import check_send_status
from tests.broker.broker_process import BrokerProcess
from tests.services import free_port
from tests.sidecar.scripted_broker import ScriptedBroker, scripted_broker
from tests.sidecar.sidecar_process import wait_stored


def test_message_ids_are_v1_and_unique() -> None:
    ids = MessageIdGenerator()
    made = [ids.next_id() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert all(re.fullmatch(r"01[0-9A-F]{32}", i) for i in made)


def test_latency_table_and_avoidance_order() -> None:
    assert not_available_duration_ms(10) == 0
    assert not_available_duration_ms(600) == 30_000
    assert not_available_duration_ms(20_000) == 600_000
    fault = LatencyFaultTolerance()
    fault.update("a", 5, failed=True)
    fault.update("b", 5, failed=False)
    assert fault.order(["a", "b"]) == ["b", "a"]
    assert not fault.available("a")
    assert fault.order(["a"]) == ["a"], "an avoided broker is still used when it is the only one"
    assert LatencyFaultTolerance(enabled=False).order(["a", "b"]) == ["a", "b"]


def test_backoff_grows_within_bounds() -> None:
    backoff = Backoff(initial_ms=100, max_ms=2_000)
    for attempt in range(1, 30):
        assert 100 <= backoff.delay_ms(attempt) <= 2_000
    assert max(backoff.delay_ms(12) for _ in range(50)) > 1_000, "it grows toward the max"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (Code.OK, "durable"),
        (Code.MASTER_PERSISTENCE_TIMEOUT, "weak"),
        (Code.SLAVE_PERSISTENCE_TIMEOUT, "weak"),
        (Code.TOO_MANY_REQUESTS, SpoolCause.THROTTLED),
        (Code.PROXY_TIMEOUT, SpoolCause.AMBIGUOUS),
        (Code.INTERNAL_SERVER_ERROR, SpoolCause.UNAVAILABLE),
        (Code.UNAUTHORIZED, SpoolCause.UNAUTHORIZED),
        (Code.FORBIDDEN, SpoolCause.FORBIDDEN),
        (Code.MESSAGE_BODY_TOO_LARGE, "body"),
        (Code.TOPIC_NOT_FOUND, "topic"),
        (Code.ILLEGAL_MESSAGE_TAG, "tag"),
    ],
)
def test_broker_answers_are_classified(code: int, expected: object) -> None:
    if expected in ("durable", "weak"):
        assert check_send_status(code, "") is (expected == "durable")
        return
    if isinstance(expected, SpoolCause):
        with pytest.raises(SendFailedError) as failed:
            check_send_status(code, "x")
        assert failed.value.cause is expected
        assert failed.value.maybe_stored is (expected is SpoolCause.AMBIGUOUS)
        return
    with pytest.raises(SendRejectedError) as rejected:
        check_send_status(code, "x")
    assert rejected.value.field == expected


class RouteServer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    """QueryRoute only: the topic's queues on the brokers given, 4 queues each."""

    def __init__(self, brokers: dict[str, int]) -> None:
        self.brokers = brokers

    async def QueryRoute(self, request: Any, context: Any) -> Any:  # noqa: N802 - the protocol's method name
        queues = [
            definition_pb2.MessageQueue(
                topic=request.topic,
                id=queue_id,
                permission=definition_pb2.READ_WRITE,
                broker=definition_pb2.Broker(
                    name=name,
                    id=0,
                    endpoints=Endpoint("127.0.0.1", port).to_proto(),
                ),
                accept_message_types=[definition_pb2.NORMAL, definition_pb2.FIFO],
            )
            for name, port in self.brokers.items()
            for queue_id in range(4)
        ]
        return service_pb2.QueryRouteResponse(
            status=definition_pb2.Status(code=Code.OK), message_queues=queues
        )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", "--auto-create-topic")
    yield b
    b.stop()


def outbox_message(i: int, group: str | None = None) -> OutboxMessage:
    return OutboxMessage(topic="Orders", body=b"x", message_id=f"TEST{i:030d}", message_group=group)


async def with_route(
    brokers: dict[str, int], retry_times: int = 2
) -> tuple[grpc.aio.Server, Producer]:
    server = grpc.aio.server()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(RouteServer(brokers), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    producer = Producer(
        ProducerConfig(
            access_points=(Endpoint("127.0.0.1", port),),
            retry_times_when_send_failed=retry_times,
            send_msg_timeout_ms=5_000,
        )
    )
    return server, producer


@pytest.mark.slow
def test_a_failed_send_is_retried_on_another_broker_then_avoided(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        # dict order: the dead broker comes first in the route, so the first try goes there.
        server, producer = await with_route({"dead": free_port(), "live": broker.port})
        try:
            first = await producer.send(outbox_message(1))
            assert first.broker_name == "live"
            assert first.attempts == 2, "one failure on the dead broker, then the live one"
            # Fault avoidance: the dead broker is skipped from now on.
            for i in range(2, 10):
                receipt = await producer.send(outbox_message(i))
                assert (receipt.broker_name, receipt.attempts) == ("live", 1)
        finally:
            await producer.close()
            await server.stop(None)

    asyncio.run(scenario())
    assert len(wait_stored(broker.endpoint, outbox_message(1).message_id)) == 1


def test_every_broker_down_ends_as_one_unavailable_failure() -> None:
    async def scenario() -> None:
        server, producer = await with_route({"a": free_port(), "b": free_port()})
        try:
            with pytest.raises(SendFailedError) as failed:
                await producer.send(outbox_message(1))
            assert failed.value.cause is SpoolCause.UNAVAILABLE
            assert not failed.value.maybe_stored, "connections refused: it never left"
        finally:
            await producer.close()
            await server.stop(None)

    asyncio.run(scenario())


def test_a_fifo_group_is_always_addressed_to_the_same_queue() -> None:
    """Where the producer sends (the scripted broker stores in the queue addressed); its
    receipts name no queue, as a broker's answer names none."""

    async def scenario() -> tuple[ScriptedBroker, list[SendReceipt], list[SendReceipt]]:
        async with scripted_broker() as broker:
            producer = Producer(ProducerConfig(access_points=(broker.endpoint,)))
            try:
                fifo = [await producer.send(outbox_message(i, "g-7")) for i in range(8)]
                plain = [await producer.send(outbox_message(100 + i)) for i in range(8)]
            finally:
                await producer.close()
            return broker, fifo, plain

    broker, fifo, plain = asyncio.run(scenario())
    assert len({broker.stored[r.message_id].queue_id for r in fifo}) == 1
    spread = {broker.stored[r.message_id].queue_id for r in plain}
    assert len(spread) > 1, "round robin for messages without a group"
    assert {r.queue_id for r in fifo + plain} == {QUEUE_ID_UNKNOWN}
    assert [r.queue_offset for r in fifo] == [
        broker.stored[r.message_id].queue_offset for r in fifo
    ], "the broker's offsets"


@pytest.mark.slow
def test_a_receipt_names_no_broker_when_its_endpoint_fronts_several(
    broker: BrokerProcess,
) -> None:
    """One endpoint serving two brokers' queues (a RocketMQ proxy) picks the broker itself."""

    async def scenario() -> SendReceipt:
        server, producer = await with_route({"a": broker.port, "b": broker.port})
        try:
            return await producer.send(outbox_message(1))
        finally:
            await producer.close()
            await server.stop(None)

    receipt = asyncio.run(scenario())
    assert (receipt.broker_name, receipt.queue_id) == (BROKER_NAME_UNKNOWN, QUEUE_ID_UNKNOWN)
    [copy] = wait_stored(broker.endpoint, receipt.message_id)
    assert copy.queue_offset == receipt.queue_offset, "the broker's answer"


def test_a_held_route_failure_is_raised_fresh_each_time() -> None:
    """With the broker down every send meets the held route failure. Raising one exception
    object again and again chained each raise's traceback onto it, keeping every send's frames
    and message alive: the sidecar's memory grew with every spooled message."""

    async def scenario() -> None:
        channels = Channels()
        routes = TopicRouteCache(channels, (Endpoint("127.0.0.1", free_port()),), "", 30_000, 2_000)
        raised: list[SendFailedError] = []
        try:
            for _ in range(50):
                with pytest.raises(SendFailedError) as failed:
                    await routes.get("Orders", time.monotonic() + 2)
                raised.append(failed.value)
        finally:
            await channels.close()
        assert len({id(e) for e in raised}) == len(raised)
        depth = 0
        tb = raised[-1].__traceback__
        while tb is not None:
            depth += 1
            tb = tb.tb_next
        assert depth < 10, f"a traceback {depth} frames deep"

    asyncio.run(scenario())
