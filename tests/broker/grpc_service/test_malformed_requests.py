"""Requests that cannot be decoded, sent raw to every RPC a real ``rocketbox broker`` process
serves: apache.rocketmq.v2.MessagingService, rocketbox.admin.v1.BrokerAdmin and
grpc.health.v1.Health, unary and streaming alike.

Proves: bytes that are not protobuf, and a string field holding invalid UTF-8, are answered
INVALID_ARGUMENT with "could not be decoded as <the request type>" (never UNKNOWN); the broker
writes no traceback for them, only the guard's rate-limited line (one per interval, however many
calls); and it goes on serving. A handler fault (none of these requests causes one) is answered
as the proxy answers an unclassified exception: INTERNAL_SERVER_ERROR in the response's Status,
on every MessagingService RPC but the Telemetry stream, which ends with gRPC INTERNAL as the
other services' calls do (the guard's part is proved in tests/rocketbox_api).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any, cast

import grpc
import pytest
from google.protobuf.descriptor import (
    Descriptor,
    FieldDescriptor,
    MethodDescriptor,
    ServiceDescriptor,
)
from grpc_health.v1 import health_pb2
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.grpc_service.protocol import fault_reply
from rocketbox_api.admin.v1 import broker_admin_pb2
from rocketbox_api.rate_limited_log import LOG_INTERVAL_S_DEFAULT
from tests.broker.broker_process import BrokerProcess

pytestmark = pytest.mark.slow

CALL_DEADLINE_S = 10.0
METADATA = (("x-mq-client-id", "malformed-test"),)
NOT_PROTOBUF = b"\x0a\x05\x0a"  # a length-delimited field running past the end
GUARD_LINE = "refused an undecodable request"
# Each RPC's bad requests this many times: far more calls than the guard may write lines.
ROUNDS = 3
BROKER_SERVICES: tuple[ServiceDescriptor, ServiceDescriptor, ServiceDescriptor] = (
    spb.DESCRIPTOR.services_by_name["MessagingService"],
    broker_admin_pb2.DESCRIPTOR.services_by_name["BrokerAdmin"],
    # types-protobuf types grpc_health's descriptors as upb's classes; at run time they are
    # the same classes as the generated modules' (google.protobuf.descriptor under upb).
    cast(ServiceDescriptor, health_pb2.DESCRIPTOR.services_by_name["Health"]),
)


def identity(raw: bytes) -> bytes:
    return raw


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def bad_utf8(message: Descriptor, depth: int = 3) -> bytes:
    """Wire bytes of ``message`` whose first string field, top-level or nested, is not UTF-8."""
    for field in message.fields:
        key = _varint(field.number << 3 | 2)
        if field.type == FieldDescriptor.TYPE_STRING:
            return key + b"\x02\xff\xfe"
    for field in message.fields:
        nested = field.message_type
        if field.type == FieldDescriptor.TYPE_MESSAGE and nested is not None and depth > 0:
            inner = bad_utf8(nested, depth - 1)
            if inner:
                return _varint(field.number << 3 | 2) + _varint(len(inner)) + inner
    return b""


def raw_call(channel: grpc.Channel, method: MethodDescriptor, raw: bytes) -> None:
    """One call of ``method`` with ``raw`` as its request (or its stream's one frame)."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    kind = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, False): channel.stream_unary,
        (True, True): channel.stream_stream,
    }[(method.client_streaming, method.server_streaming)]
    stub: Any = kind(path, request_serializer=identity, response_deserializer=identity)
    request: Any = iter([raw]) if method.client_streaming else raw
    answer = stub(request, metadata=METADATA, timeout=CALL_DEADLINE_S)
    if method.server_streaming:
        list(answer)


@pytest.fixture
def broker(tmp_path: Any) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path, "--topic", "Malformed:2")
    yield b
    b.kill()


def test_every_rpc_answers_undecodable_requests_invalid_argument_without_tracebacks(
    broker: BrokerProcess,
) -> None:
    started_s = time.monotonic()
    calls = 0
    details: set[str] = set()
    with grpc.insecure_channel(broker.endpoint) as channel:
        for _ in range(ROUNDS):
            for method in (m for service in BROKER_SERVICES for m in service.methods):
                # Requests without a string field (ListTopicsRequest) get the first only.
                samples = [NOT_PROTOBUF, bad_utf8(method.input_type)]
                for raw in filter(None, samples):
                    with pytest.raises(grpc.RpcError) as refused:
                        raw_call(channel, method, raw)
                    calls += 1
                    error: Any = refused.value
                    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (method.name, raw)
                    details.add(error.details())
                    assert f"could not be decoded as {method.input_type.full_name}" in (
                        error.details()
                    )
        assert any("UTF-8" in d for d in details), details
        routes = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="Malformed")),
            metadata=METADATA,
            timeout=CALL_DEADLINE_S,
        )
        assert routes.status.code == Code.OK, "still serving"
    elapsed_s = time.monotonic() - started_s
    broker.stop()
    output = broker.output()
    assert calls > 100
    assert "Traceback" not in output, output
    assert "UNKNOWN" not in output
    lines = output.count(GUARD_LINE)
    assert 1 <= lines <= 1 + math.floor(elapsed_s / LOG_INTERVAL_S_DEFAULT), output


def test_faults_are_internal_server_error_in_the_status_but_on_telemetry() -> None:
    messaging, admin, health = BROKER_SERVICES
    for method in messaging.methods:
        reply: Any = fault_reply(method, "internal error while handling it")
        if method.name == "Telemetry":
            assert reply is None, "the stream ends with gRPC INTERNAL"
            continue
        assert reply is not None, method.name
        assert reply.DESCRIPTOR is method.output_type
        assert reply.status.code == Code.INTERNAL_SERVER_ERROR
        assert reply.status.message == "internal error while handling it"
    for method in (*admin.methods, *health.methods):
        assert fault_reply(method, "why") is None, "gRPC INTERNAL: they carry no Status"
