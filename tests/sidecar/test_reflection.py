"""gRPC server reflection on the sidecar's app port, under both names clients ask for:

- ``grpc.reflection.v1`` (current grpcurl, Postman, the grpc-go and grpc-java clients) lists the
  services and describes each one it lists, the reflection services included (``grpcurl
  describe`` asks for every service it lists, and fails on one it cannot describe);
- ``grpc.reflection.v1alpha`` (older tools) gives the same answers.

The calls are made on each version's own method path, as its clients make them. v1 renamed
v1alpha's package and kept every field and number, so a v1 client's messages are the very bytes
the v1alpha classes write: those classes encode the requests of both here.
"""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection_pb2 as wire

from tests.broker.broker_process import BrokerProcess
from tests.sidecar.sidecar_process import CALL_DEADLINE_S, SidecarProcess

pytestmark = pytest.mark.slow

V1_SERVICE = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE = "grpc.reflection.v1alpha.ServerReflection"
SERVICES = {
    "rocketbox.v1.SidecarService",
    "rocketbox.v1.OutboxAdminService",
    "grpc.health.v1.Health",
    V1_SERVICE,
    V1ALPHA_SERVICE,
}


def ask(
    channel: grpc.Channel, reflection_service: str, request: wire.ServerReflectionRequest
) -> wire.ServerReflectionResponse:
    """One request on one ServerReflectionInfo stream of ``reflection_service``."""
    call = channel.stream_stream(
        f"/{reflection_service}/ServerReflectionInfo",
        request_serializer=wire.ServerReflectionRequest.SerializeToString,
        response_deserializer=wire.ServerReflectionResponse.FromString,
    )
    [response] = list(call(iter([request]), timeout=CALL_DEADLINE_S))
    return response


def described(
    channel: grpc.Channel, reflection_service: str, symbol: str
) -> descriptor_pool.DescriptorPool:
    """A pool of the files reflection answers for ``symbol`` (with their dependencies)."""
    response = ask(channel, reflection_service, wire.ServerReflectionRequest(
        file_containing_symbol=symbol
    ))  # fmt: skip
    kind = response.WhichOneof("message_response")
    assert kind == "file_descriptor_response", f"{symbol}: {response.error_response}"
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in response.file_descriptor_response.file_descriptor_proto
    ]
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    while len(added) < len(files):  # each file after its dependencies
        ready = [f for f in files if f.name not in added and set(f.dependency) <= added]
        assert ready, f"{symbol}: dependencies missing from {[f.name for f in files]}"
        for f in ready:
            pool.Add(f)
            added.add(f.name)
    return pool


def test_reflection_v1_and_v1alpha_list_and_describe_every_service(
    broker: BrokerProcess,
) -> None:
    sidecar = SidecarProcess(broker.endpoint, "memory://")
    try:
        with grpc.insecure_channel(sidecar.endpoint) as channel:
            for reflection_service in (V1_SERVICE, V1ALPHA_SERVICE):
                listed = ask(channel, reflection_service, wire.ServerReflectionRequest(
                    list_services=""
                ))  # fmt: skip
                names = {s.name for s in listed.list_services_response.service}
                assert names == SERVICES, reflection_service
                for name in names:
                    pool = described(channel, reflection_service, name)
                    service = pool.FindServiceByName(name)
                    assert service.methods, f"{name} described without its methods"
                sidecar_service = described(
                    channel, reflection_service, "rocketbox.v1.SidecarService"
                ).FindServiceByName("rocketbox.v1.SidecarService")
                assert {m.name for m in sidecar_service.methods} == {
                    "Send", "SendBatch", "SendStream",
                }  # fmt: skip
            [info] = (
                described(channel, V1_SERVICE, V1_SERVICE).FindServiceByName(V1_SERVICE).methods
            )
            assert (info.input_type.full_name, info.output_type.full_name) == (
                "grpc.reflection.v1.ServerReflectionRequest",
                "grpc.reflection.v1.ServerReflectionResponse",
            )
    finally:
        sidecar.stop()
