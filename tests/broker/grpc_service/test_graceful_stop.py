"""A graceful stop (SIGTERM) ends the broker's Telemetry streams at once, with OK.

A Telemetry stream lives as long as its client. Left open at a stop, it held the server's whole
grace period and then was cancelled: every stop with a client connected (an app, or the sidecar's
RocketMQ front relaying its producers) waited the full grace. Proves, on a real ``rocketbox
broker`` process: a producer's open stream, answered its Settings, ends with status OK when the
broker is stopped (a stream the grace ran out on ends CANCELLED or UNAVAILABLE instead), and the
broker stops cleanly.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.broker.broker_process import BrokerProcess

pytestmark = pytest.mark.slow

METADATA = (("x-mq-client-id", "graceful-stop-test"),)
# Long enough that only the broker ends the stream: the test's own deadline never does.
STREAM_DEADLINE_S = 120.0
PRODUCER = pb.Settings(
    client_type=pb.PRODUCER,
    publishing=pb.Publishing(topics=[pb.Resource(name="Orders")]),
)


def test_a_graceful_stop_ends_an_open_telemetry_stream_ok(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker")
    commands: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()

    def outbound() -> Iterator[spb.TelemetryCommand]:
        # The client's side stays open (as a client's does) until the test ends it.
        while (command := commands.get()) is not None:
            yield command

    stopped = False
    try:
        with grpc.insecure_channel(broker.endpoint) as channel:
            stream = service_pb2_grpc.MessagingServiceStub(channel).Telemetry(
                outbound(), metadata=METADATA, timeout=STREAM_DEADLINE_S
            )
            commands.put(spb.TelemetryCommand(settings=PRODUCER))
            reply = next(stream)
            assert reply.status.code == Code.OK, reply.status
            assert reply.HasField("settings")
            assert broker.stop() == 0
            stopped = True
            assert list(stream) == [], "nothing more after the Settings reply"
            assert stream.code() == grpc.StatusCode.OK, (stream.code(), stream.details())
            commands.put(None)
    finally:
        commands.put(None)
        if not stopped:
            broker.stop()
