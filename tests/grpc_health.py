"""The standard gRPC health check (grpc.health.v1) as the tests call it, typed.

grpcio-health-checking's stubs (types-grpcio-health-checking) declare ``HealthStub`` without its
methods, so mypy cannot see ``Check``; this stub is the same call on the channel, with its types.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2

CHECK_METHOD = "/grpc.health.v1.Health/Check"


class HealthStub:
    """``grpc_health.v1.health_pb2_grpc.HealthStub``, its unary ``Check`` only."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.Check: grpc.UnaryUnaryMultiCallable[
            health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse
        ] = channel.unary_unary(
            CHECK_METHOD,
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
