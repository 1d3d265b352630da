"""The sidecar's gRPC servers for apps, built but not bound: rocketbox.v1 with the outbox admin
service, health and reflection (v1 and v1alpha, sidecar/reflection.py); and, with
``--health-listen``, health alone in plaintext.

Security (sidecar/security.py): the listeners' TLS is read here, once, at start; with a token,
SidecarService and OutboxAdminService are registered token-guarded (each handler wrapped once),
health and reflection are not.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rocketbox_api.server_guard import ServerGuard
from rocketbox_api.v1 import outbox_admin_pb2, outbox_admin_pb2_grpc, sidecar_pb2, sidecar_pb2_grpc
from sidecar.config import SidecarConfig
from sidecar.outbox_admin_service import OutboxAdminService
from sidecar.reflection import enable_server_reflection
from sidecar.security import ServerTls, TokenGuard
from sidecar.server import SidecarService

SIDECAR_SERVICE = sidecar_pb2.DESCRIPTOR.services_by_name["SidecarService"]
ADMIN_SERVICE = outbox_admin_pb2.DESCRIPTOR.services_by_name["OutboxAdminService"]
HEALTH_SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


def server_tls(config: SidecarConfig) -> grpc.ServerCredentials | None:
    """The app-facing listeners' TLS credentials (None: plaintext); reads the files now and
    raises SecurityConfigError naming the option of one that cannot be used."""
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    tls = ServerTls.read(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file)
    return tls.credentials()


def app_facing_server(config: SidecarConfig) -> grpc.aio.Server:
    """An empty server for apps' calls (rocketbox.v1's, the RocketMQ front's): the guard, the
    message size limit and the pending-calls bound both listeners share."""
    return grpc.aio.server(
        # Malformed requests and handler faults: INVALID_ARGUMENT / INTERNAL and a
        # rate-limited line, never UNKNOWN with a traceback per call.
        interceptors=[ServerGuard()],
        options=(
            ("grpc.max_receive_message_length", config.grpc_receive_bytes_max),
            ("grpc.so_reuseport", 0),
            ("grpc.server.max_pending_requests", config.pending_calls_max),
            ("grpc.server.max_pending_requests_hard_limit", config.pending_calls_max),
        ),
    )


def app_server(
    config: SidecarConfig,
    service: SidecarService,
    admin: OutboxAdminService,
    health_servicer: health.aio.HealthServicer,
) -> grpc.aio.Server:
    """SidecarService, OutboxAdminService, health and reflection on a server not yet bound."""
    server = app_facing_server(config)
    guarded_service, guarded_admin = service, admin
    if config.api_token is not None:
        guard = TokenGuard(config.api_token)
        guarded_service = guard.guarded(service, SIDECAR_SERVICE)
        guarded_admin = guard.guarded(admin, ADMIN_SERVICE)
    sidecar_pb2_grpc.add_SidecarServiceServicer_to_server(guarded_service, server)
    outbox_admin_pb2_grpc.add_OutboxAdminServiceServicer_to_server(guarded_admin, server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_server_reflection(
        (SIDECAR_SERVICE.full_name, ADMIN_SERVICE.full_name, HEALTH_SERVICE_NAME), server
    )
    return server


def health_server(health_servicer: health.aio.HealthServicer) -> grpc.aio.Server:
    """grpc.health.v1 alone (the same statuses as the app port's), for probes that cannot speak
    TLS or present a client certificate: it says whether the sidecar is ready, nothing more."""
    server = grpc.aio.server(interceptors=[ServerGuard()], options=(("grpc.so_reuseport", 0),))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    return server
