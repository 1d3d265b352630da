"""A real sidecar serving its RocketMQ front on a free port, and the official Python client's
producer and SimpleConsumer pointed at an endpoint, for the front's send and route tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import (
    Producer,
    TransactionChecker,
)
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from tests.broker.grpc_service import test_producer
from tests.sidecar.rocketmq_front.front_process import FrontSidecar, simple_consumer
from tests.sidecar.sidecar_process import CALL_DEADLINE_S

__all__ = ["FrontSidecar", "producer", "simple_consumer"]

# Longer than the sidecar's send timeout (--send-msg-timeout-ms, 3 s): a send the broker does
# not answer is answered SPOOLED, never given up on by the app first and sent again.
REQUEST_TIMEOUT_S = 10
INVISIBLE_S = 10
CONSUME_DEADLINE_S = 60.0


@contextmanager
def refused_endpoint() -> Iterator[str]:
    """An address that refuses connections: a port bound, and so nobody else's, not listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{s.getsockname()[1]}"


def producer(
    endpoint: str, topics: tuple[str, ...] = (), checker: TransactionChecker | None = None
) -> AbstractContextManager[Producer]:
    return test_producer.producer(endpoint, topics, checker, request_timeout_s=REQUEST_TIMEOUT_S)


def consume(endpoint: str, group: str, topic: str, ids: set[str]) -> dict[str, list[Any]]:
    """Every delivery (an official client's Message, untyped) of the messages ``ids`` to a new
    consumer group (acked), by id, once each has come at least once."""
    got: dict[str, list[Any]] = {}
    end = time.monotonic() + CONSUME_DEADLINE_S
    with simple_consumer(endpoint, group, topic, await_s=2) as c:
        while not ids <= got.keys():
            assert time.monotonic() < end, f"consumed {len(got)} of {len(ids)} from {topic}"
            for m in c.receive(32, INVISIBLE_S):
                got.setdefault(m.message_id, []).append(m)
                c.ack(m)
    return got


@contextmanager
def raw_stub(endpoint: str) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    """The protocol's own stub, for requests the official client cannot be made to send."""
    with grpc.insecure_channel(endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def raw_metadata(namespace: str = "") -> tuple[tuple[str, str], ...]:
    return (("x-mq-client-id", "front-test@1@0@raw"), ("x-mq-namespace", namespace))


def raw_message(
    topic: str,
    message_id: str,
    body: bytes = b"payload",
    user_properties: dict[str, str] | None = None,
    **system: Any,
) -> definition_pb2.Message:
    """A message as the protocol has it; ``system`` sets its system properties by name."""
    m = definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic), body=body, user_properties=user_properties
    )
    m.system_properties.message_id = message_id
    m.system_properties.body_encoding = definition_pb2.IDENTITY
    m.system_properties.message_type = definition_pb2.NORMAL
    for name, value in system.items():
        if isinstance(value, Timestamp):
            getattr(m.system_properties, name).CopyFrom(value)
        else:
            setattr(m.system_properties, name, value)
    return m


def raw_send(
    stub: service_pb2_grpc.MessagingServiceStub,
    *messages: definition_pb2.Message,
    namespace: str = "",
) -> service_pb2.SendMessageResponse:
    return stub.SendMessage(
        service_pb2.SendMessageRequest(messages=messages),
        timeout=CALL_DEADLINE_S,
        metadata=raw_metadata(namespace),
    )
