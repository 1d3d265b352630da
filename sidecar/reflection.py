"""gRPC server reflection under both of its names: ``grpc.reflection.v1``, which current tools ask
for (grpcurl, Postman, the grpc-go and grpc-java clients), and ``grpc.reflection.v1alpha``, which
older ones do.

grpcio-reflection serves v1alpha alone. The two versions differ in the package's name only:
their messages have the same fields under the same numbers, so they are the same bytes on the
wire. v1 is therefore served by grpcio-reflection's own servicer under v1's method path, its
requests read and its answers written with the v1alpha message classes. So that reflection can
describe v1 as well as list it (``grpcurl describe`` asks for every service it lists), v1's file
is added to the default descriptor pool once, made from v1alpha's with the package renamed,
unless the pool holds a v1 file already.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection as v1alpha
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2

V1_PACKAGE = "grpc.reflection.v1"
V1_FILE = "grpc/reflection/v1/reflection.proto"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
V1ALPHA_SERVICE_NAME: str = v1alpha.SERVICE_NAME
REFLECTION_SERVICE_NAMES = (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)


def enable_server_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Reflection over ``service_names`` and the reflection services themselves, as v1 and as
    v1alpha, on ``server`` (not yet started)."""
    _add_v1_file()
    names = (*service_names, *REFLECTION_SERVICE_NAMES)
    v1alpha.enable_server_reflection(names, server)
    servicer = v1alpha.aio.ReflectionServicer(names)
    info = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
        response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": info}),)
    )


def _add_v1_file() -> None:
    """v1's file in the default pool: v1alpha's, renamed (module docstring)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(V1_FILE)
        return
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(file)
    old_prefix = f".{file.package}."

    def renamed(type_name: str) -> str:
        return f".{V1_PACKAGE}.{type_name.removeprefix(old_prefix)}"

    file.name = V1_FILE
    file.package = V1_PACKAGE
    # v1alpha's options name its Java and Go packages and mark it deprecated: none is v1's.
    file.ClearField("options")
    for message in file.message_type:
        for field in message.field:
            if field.type_name.startswith(old_prefix):  # a scalar field has no type name
                field.type_name = renamed(field.type_name)
    for service in file.service:
        for method in service.method:
            method.input_type = renamed(method.input_type)
            method.output_type = renamed(method.output_type)
    pool.Add(file)
