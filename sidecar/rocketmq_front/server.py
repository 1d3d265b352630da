"""The RocketMQ front's own gRPC server, beside the sidecar's (``--rocketmq-listen``).

Its protection (sidecar/security.py, ``front_refusal``): the apps' signatures verified with
``--front-credentials-file`` (auth.py), and/or their client certificates required by the TLS it
shares with the sidecar's API (``--tls-client-ca``). A front with neither, chosen by name with
``--rocketmq-front-insecure``, says so at WARNING each time it starts.
"""

from __future__ import annotations

import logging

import grpc
from prometheus_client import Counter

from rocketbox_api.message_rules import BODY_BYTES_MAX
from sidecar.app_server import app_facing_server
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import Producer
from sidecar.rocketmq_front.auth import FrontAuth
from sidecar.rocketmq_front.forward import Forwarder
from sidecar.rocketmq_front.route import FrontRoutes
from sidecar.rocketmq_front.send import FrontSend
from sidecar.rocketmq_front.service import front_handler, spb, typed_unary
from sidecar.rocketmq_front.telemetry import TelemetryRelay
from sidecar.rocketmq_front.upstream import Upstream
from sidecar.server import SidecarService

LOG = logging.getLogger(__name__)


def front_server(
    config: SidecarConfig,
    producer: Producer,
    service: SidecarService,
    forwarded: Counter | None = None,
) -> grpc.aio.Server:
    """A server with the front's methods, not yet bound. ``forwarded``: the counter of
    forwarded calls (``rocketbox_sidecar_front_forwarded_total``)."""
    upstream = Upstream(producer.channels, config.producer.access_points)
    advertised = Endpoint.parse(config.rocketmq_advertised) if config.rocketmq_advertised else None
    routes = FrontRoutes(upstream, advertised)
    sends = FrontSend(service, upstream, config.producer.namespace)
    forwarder = Forwarder(upstream, advertised, forwarded)
    telemetry = TelemetryRelay(upstream, BODY_BYTES_MAX)
    own = {
        "QueryRoute": typed_unary(
            routes.query_route, spb.QueryRouteRequest, spb.QueryRouteResponse
        ),
        # Bytes in: a TRANSACTION request is forwarded to the broker as it came.
        "SendMessage": grpc.unary_unary_rpc_method_handler(sends.send_message),
        "Telemetry": grpc.stream_stream_rpc_method_handler(telemetry.telemetry),
        "Heartbeat": forwarder.lifecycle("Heartbeat"),
        "NotifyClientTermination": forwarder.lifecycle("NotifyClientTermination"),
        "EndTransaction": forwarder.unary("EndTransaction"),
    }
    auth = FrontAuth(config.front_credentials) if config.front_credentials else None
    if config.rocketmq_front_insecure:
        LOG.warning(
            "the RocketMQ front checks no credentials (--rocketmq-front-insecure): any client "
            "that reaches it sends as this sidecar; protect it with --front-credentials-file "
            "or --tls-client-ca"
        )
    server = app_facing_server(config)
    server.add_generic_rpc_handlers((front_handler(forwarder, own, auth),))
    return server
