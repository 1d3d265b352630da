"""The protocol's own stub against an endpoint, for requests an official client cannot be made
to send, and the official Python client's producer and SimpleConsumer pointed at one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from rocketmq.v5.exception import InternalErrorException

CALL_DEADLINE_S = 10.0
CLIENT_ID = "standin-test@1@0@raw"
METADATA = (("x-mq-client-id", CLIENT_ID), ("x-mq-client-version", "5.1.2"))
# Longer than a sidecar's send timeout: the official producer gives up after the sidecar does.
REQUEST_TIMEOUT_S = 10
CONSUME_DEADLINE_S = 60.0
# A SimpleConsumer's Settings reach the proxy on a stream its startup does not wait for; the
# proxy fails a receive that comes first, so the first receive waits for that stream's reply.
SETTINGS_DEADLINE_S = 10.0


@contextmanager
def stub(endpoint: str) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def raw_message(topic: str, message_id: str, body: bytes = b"payload", **system: Any) -> Any:
    """A definition.proto Message; ``system`` sets its system properties by name."""
    m = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=body)
    m.system_properties.message_id = message_id
    m.system_properties.body_encoding = definition_pb2.IDENTITY
    m.system_properties.message_type = definition_pb2.NORMAL
    for name, value in system.items():
        if isinstance(value, int | str):
            setattr(m.system_properties, name, value)
        else:
            getattr(m.system_properties, name).CopyFrom(value)
    return m


def send(endpoint: str, *messages: Any) -> Any:
    with stub(endpoint) as s:
        return s.SendMessage(
            service_pb2.SendMessageRequest(messages=messages),
            timeout=CALL_DEADLINE_S,
            metadata=METADATA,
        )


def config(endpoint: str) -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(), request_timeout=REQUEST_TIMEOUT_S)


@contextmanager
def producer(endpoint: str, topics: tuple[str, ...]) -> Iterator[Producer]:
    p = Producer(config(endpoint), topics)
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()


@contextmanager
def simple_consumer(
    endpoint: str, group: str, topic: str, await_s: int = 5
) -> Iterator[SimpleConsumer]:
    c = SimpleConsumer(
        config(endpoint), group, {topic: FilterExpression("*")}, await_duration=await_s
    )
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()


def consume(c: SimpleConsumer, count: int, invisible_s: int = 30) -> list[Any]:
    """``count`` messages received and acked (the official client's Message objects)."""
    got: list[Any] = []
    started = time.monotonic()
    deadline = started + CONSUME_DEADLINE_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {count}"
        try:
            received = c.receive(32, invisible_s)
        except InternalErrorException:
            if time.monotonic() - started > SETTINGS_DEADLINE_S:
                raise
            continue  # the receive came before the client's Settings did
        for m in received:
            got.append(m)
            c.ack(m)
    return got


def consumer_settings(group: str, topic: str) -> Any:
    """A SimpleConsumer's Settings, as the Python client sends them."""
    settings = definition_pb2.Settings(client_type=definition_pb2.SIMPLE_CONSUMER)
    settings.request_timeout.seconds = 3
    settings.subscription.group.name = group
    entry = settings.subscription.subscriptions.add()
    entry.topic.name = topic
    entry.expression.type = definition_pb2.TAG
    entry.expression.expression = "*"
    return settings


@contextmanager
def telemetry(endpoint: str, settings: Any) -> Iterator[Any]:
    """A Telemetry stream of CLIENT_ID that has sent ``settings``; yields the proxy's reply.
    The stream stays open (and the proxy keeps the Settings) until the block ends."""
    done = threading.Event()

    def commands() -> Iterator[Any]:
        yield service_pb2.TelemetryCommand(settings=settings)
        done.wait(CONSUME_DEADLINE_S)

    with grpc.insecure_channel(endpoint) as channel:
        s = service_pb2_grpc.MessagingServiceStub(channel)
        replies = s.Telemetry(commands(), metadata=METADATA, timeout=CONSUME_DEADLINE_S)
        try:
            yield next(replies)
        finally:
            done.set()
            replies.cancel()


def receive(endpoint: str, request: Any, timeout_s: float = CALL_DEADLINE_S) -> list[Any]:
    """Every frame of one ReceiveMessage stream, in order."""
    with stub(endpoint) as s:
        return list(s.ReceiveMessage(request, timeout=timeout_s, metadata=METADATA))
