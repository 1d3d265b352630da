"""The client life-cycle at the sidecar's RocketMQ front, spoken through the protocol's own stubs
(what the official clients send, frame by frame).

Proves, with no broker reachable: a producer's Telemetry Settings are answered at once, status
OK, with a body limit above 0, RocketMQ's exponential back-off of 3 attempts and metric off, and
the stream stays open; a producer's Heartbeat and NotifyClientTermination are answered OK, a
consumer's Heartbeat is the broker's UNAVAILABLE, as is a receive (counted by method and code);
Settings with neither publishing nor subscription are refused INVALID_ARGUMENT.
With a broker: a consumer's Telemetry is the broker's (its Settings reply carries the broker's
receive batch size), and ends with a non-OK status when the broker goes away, so that the client
opens a new one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import sample, scrape
from tests.services import free_port
from tests.sidecar.rocketmq_front.front_process import (
    BROKER_FRONT_ARGS,
    DEADLINE_S,
    FrontSidecar,
)

pytestmark = pytest.mark.slow

CLIENT_ID = "app-host@4242@0@lifecycle"
METADATA = (("x-mq-client-id", CLIENT_ID), ("x-mq-language", "PYTHON"))
CALL_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def orphaned_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FrontSidecar]:
    """A front whose broker is nowhere (a port nothing listens on)."""
    sidecar = FrontSidecar(
        f"127.0.0.1:{free_port()}", f"rocksdb://{tmp_path_factory.mktemp('outbox')}"
    )
    yield sidecar
    sidecar.stop()


class TelemetryStream:
    """A Telemetry call: frames written by the test, frames read in a thread of its own."""

    def __init__(self, stub: service_pb2_grpc.MessagingServiceStub) -> None:
        self._out: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()
        self.call = stub.Telemetry(iter(self._out.get, None), metadata=METADATA)
        self.frames: queue.Queue[spb.TelemetryCommand | grpc.RpcError] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for frame in self.call:
                self.frames.put(frame)
        except grpc.RpcError as e:
            self.frames.put(e)

    def write(self, command: spb.TelemetryCommand) -> None:
        self._out.put(command)

    def next(self) -> spb.TelemetryCommand | grpc.RpcError:
        return self.frames.get(timeout=DEADLINE_S)

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()


@pytest.fixture
def stub(orphaned_front: FrontSidecar) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(orphaned_front.front_endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def producer_settings() -> spb.TelemetryCommand:
    return spb.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.PRODUCER,
            publishing=pb.Publishing(topics=[pb.Resource(name="Orders")], max_body_size=1 << 27),
            metric=pb.Metric(on=True),
        )
    )


def consumer_settings(group: str) -> spb.TelemetryCommand:
    subscription = pb.Subscription(
        group=pb.Resource(name=group),
        subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="Orders"))],
    )
    return spb.TelemetryCommand(
        settings=pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=subscription)
    )


def test_producer_settings_are_answered_while_the_broker_is_away(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    stream = TelemetryStream(stub)
    try:
        stream.write(producer_settings())
        reply = stream.next()
        assert isinstance(reply, spb.TelemetryCommand), reply
        assert reply.status.code == pb.OK
        settings = reply.settings
        assert settings.publishing.max_body_size == 4 * 1024 * 1024
        assert settings.publishing.validate_message_type
        assert [t.name for t in settings.publishing.topics] == ["Orders"]
        assert settings.backoff_policy.max_attempts == 3
        assert settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
        assert not settings.metric.on
        # A changed Settings is answered too: the stream is still open, the broker still away.
        stream.write(producer_settings())
        again = stream.next()
        assert isinstance(again, spb.TelemetryCommand), again
        assert again.status.code == pb.OK
    finally:
        stream.close()


def test_settings_without_publishing_or_subscription_are_refused(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    stream = TelemetryStream(stub)
    try:
        stream.write(spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER)))
        ended = stream.next()
        assert isinstance(ended, grpc.RpcError)
        assert ended.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "publishing or subscription" in (ended.details() or "")
    finally:
        stream.close()


def test_a_producer_life_cycle_is_answered_ok_and_a_consumer_sees_the_outage(
    stub: service_pb2_grpc.MessagingServiceStub, orphaned_front: FrontSidecar
) -> None:
    beat = stub.Heartbeat(
        spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=METADATA, timeout=CALL_TIMEOUT_S
    )
    assert beat.status.code == pb.OK
    bye = stub.NotifyClientTermination(
        spb.NotifyClientTerminationRequest(), metadata=METADATA, timeout=CALL_TIMEOUT_S
    )
    assert bye.status.code == pb.OK
    with pytest.raises(grpc.RpcError) as consumer_beat:
        stub.Heartbeat(
            spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=pb.Resource(name="G")),
            metadata=METADATA,
            timeout=CALL_TIMEOUT_S,
        )
    assert consumer_beat.value.code() == grpc.StatusCode.UNAVAILABLE
    receive = spb.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders")),
        batch_size=1,
    )
    with pytest.raises(grpc.RpcError) as received:
        list(stub.ReceiveMessage(receive, metadata=METADATA, timeout=CALL_TIMEOUT_S))
    assert received.value.code() == grpc.StatusCode.UNAVAILABLE
    name = "rocketbox_sidecar_front_forwarded_total"

    def counted() -> bool:
        # A stream's count is taken as its handler ends, which may come after the client saw
        # the stream's error.
        samples = scrape(orphaned_front.metrics_port)
        return sample(samples, name, method="ReceiveMessage", code="UNAVAILABLE") >= 1

    wait_until(counted, CALL_TIMEOUT_S, "the ReceiveMessage forward counted")
    samples = scrape(orphaned_front.metrics_port)
    assert sample(samples, name, method="ReceiveMessage", code="UNAVAILABLE") == 1
    assert sample(samples, name, method="Heartbeat", code="UNAVAILABLE") == 2


def test_a_consumer_telemetry_is_the_broker_s_and_ends_when_the_broker_goes(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "broker", *BROKER_FRONT_ARGS)
    try:
        sidecar = FrontSidecar(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}")
        try:
            with grpc.insecure_channel(sidecar.front_endpoint) as channel:
                stream = TelemetryStream(service_pb2_grpc.MessagingServiceStub(channel))
                try:
                    stream.write(consumer_settings("Watchers"))
                    reply = stream.next()
                    assert isinstance(reply, spb.TelemetryCommand), reply
                    assert reply.status.code == pb.OK
                    assert reply.settings.subscription.receive_batch_size == 32  # the broker's
                    broker.kill()
                    ended = stream.next()
                    assert isinstance(ended, grpc.RpcError), ended
                    assert ended.code() != grpc.StatusCode.OK
                finally:
                    stream.close()
        finally:
            sidecar.stop()
    finally:
        broker.kill()
