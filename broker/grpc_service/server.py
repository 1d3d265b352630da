"""The broker's gRPC server, built and bound before anything else starts (broker_controller.py):
a taken port fails there, naming the address, before the store is recovered."""

from __future__ import annotations

import grpc

from broker.config import BrokerConfig
from broker.grpc_service.protocol import fault_reply
from rocketbox_api.listen import bind_grpc
from rocketbox_api.server_guard import ServerGuard


def bind_server(cfg: BrokerConfig) -> tuple[grpc.aio.Server, int]:
    """A server bound to the listen address (TLS when configured), not started; its port."""
    server = grpc.aio.server(
        # Malformed requests and handler faults: a protocol answer, a rate-limited line.
        interceptors=[ServerGuard(fault_reply)],
        options=[
            ("grpc.max_receive_message_length", cfg.grpc_receive_message_bytes_max),
            ("grpc.max_send_message_length", cfg.grpc_receive_message_bytes_max),
            # A second broker on the same port must fail, not share it silently
            # (docs/rocketmq-protocol.md §1).
            ("grpc.so_reuseport", 0),
        ],
    )
    address = f"{cfg.listen_host}:{cfg.listen_port}"
    if cfg.tls_cert_file is not None and cfg.tls_key_file is not None:
        credentials = grpc.ssl_server_credentials(
            [(cfg.tls_key_file.read_bytes(), cfg.tls_cert_file.read_bytes())]
        )
        return server, bind_grpc(server, address, credentials)
    return server, bind_grpc(server, address)
