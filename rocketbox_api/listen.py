"""Listeners' addresses, as a person starting a process sees them.

A second ``rocketbox`` on a taken port must say so in one line naming the
address, not end in grpc's ``RuntimeError: Failed to bind`` traceback. The broker
and the sidecar bind through ``bind_grpc`` and ``start_metrics_server``, which raise
``ListenError`` naming the listener and the address; the CLI maps the listener onto its option.
``address_in_use`` lets the CLI check its addresses before anything starts (so that no start-up
line comes before the refusal); the binds themselves still catch a port taken in between.
"""

from __future__ import annotations

import errno
import socket
from typing import TYPE_CHECKING

import grpc
from prometheus_client import CollectorRegistry, start_http_server

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

# The listeners a ListenError names: a server's gRPC port and its Prometheus endpoint.
GRPC = "grpc"
METRICS = "metrics"
HA = "ha"  # a master's HA listener (broker/ha)
ROCKETMQ = "rocketmq"  # the sidecar's RocketMQ front (sidecar/rocketmq_front)
HEALTH = "health"  # the sidecar's plaintext health-only listener (sidecar/app_server.py)


class ListenError(OSError):
    """``listener`` (GRPC, METRICS, HA, ROCKETMQ or HEALTH) could not bind ``address``: in use
    by another process, or not an address of this machine."""

    def __init__(self, listener: str, address: str, detail: str = "in use") -> None:
        super().__init__(errno.EADDRINUSE, f"cannot listen on {address}: {detail}")
        self.listener = listener
        self.address = address


def bind_grpc(
    server: grpc.aio.Server,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
    listener: str = GRPC,
) -> int:
    """Bind ``server`` to ``address``; the bound port (a free one for port 0). ``listener``:
    what a ListenError names, when a process serves gRPC on more than one port."""
    try:
        if credentials is None:
            return int(server.add_insecure_port(address))
        return int(server.add_secure_port(address, credentials))
    except RuntimeError as e:  # grpc's "Failed to bind to address": in use or not ours
        raise ListenError(listener, address) from e


def start_metrics_server(host: str, port: int, registry: CollectorRegistry) -> WSGIServer:
    """Serve ``registry`` at http://host:port/metrics from a thread; raises ListenError."""
    try:
        server, _ = start_http_server(port, host, registry=registry)
    except OSError as e:
        raise ListenError(METRICS, f"{host}:{port}", e.strerror or str(e)) from e
    return server


def address_in_use(host: str, port: int) -> bool:
    """Whether a listener holds ``host:port`` now. Port 0 is never in use. SO_REUSEADDR as the
    servers set it, so a port whose connections linger in TIME_WAIT counts as free."""
    if port == 0:
        return False
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False  # the bind itself reports an address that is not one
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False
