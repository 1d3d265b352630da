"""The RocketMQ front's own gRPC server, beside the sidecar's (``--rocketmq-listen``)."""

from __future__ import annotations

import grpc

from rocketbox_api.server_guard import ServerGuard
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import Producer
from sidecar.rocketmq_front.forward import Forwarder
from sidecar.rocketmq_front.route import FrontRoutes
from sidecar.rocketmq_front.service import front_handler, spb, typed_unary
from sidecar.rocketmq_front.upstream import Upstream


def front_server(config: SidecarConfig, producer: Producer) -> grpc.aio.Server:
    """A server with the front's methods, not yet bound."""
    upstream = Upstream(producer.channels, config.producer.access_points)
    advertised = Endpoint.parse(config.rocketmq_advertised) if config.rocketmq_advertised else None
    routes = FrontRoutes(upstream, advertised)
    own = {
        "QueryRoute": typed_unary(
            routes.query_route, spb.QueryRouteRequest, spb.QueryRouteResponse
        ),
    }
    server = grpc.aio.server(
        interceptors=[ServerGuard()],
        options=(
            ("grpc.max_receive_message_length", config.grpc_receive_bytes_max),
            ("grpc.so_reuseport", 0),
            ("grpc.server.max_pending_requests", config.pending_calls_max),
            ("grpc.server.max_pending_requests_hard_limit", config.pending_calls_max),
        ),
    )
    server.add_generic_rpc_handlers((front_handler(Forwarder(upstream), own),))
    return server
