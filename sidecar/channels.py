"""gRPC channels to the broker's endpoints, one per endpoint, and the request metadata RocketMQ 5
servers expect (docs/rocketmq-protocol.md §7: ``x-mq-client-id`` is the one a proxy requires).

With credentials, every request is signed as the official clients sign theirs (rocketbox_api/
signing.py): the signature covers only ``x-mq-date-time``, so it is computed when the date
changes, once a second, with it, and a call pays nothing for it.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import socket
import uuid
from dataclasses import dataclass

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2_grpc

from rocketbox_api.credentials import Credentials, Signer

CLIENT_VERSION = "rocketbox-0.1.0"
# Options of every channel: keepalive finds a dead broker between sends; the message size limit
# covers the largest message (4 MiB body, 16 KiB properties) with room.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.max_send_message_length", 8 * 1024 * 1024),
    ("grpc.max_receive_message_length", 8 * 1024 * 1024),
    # Reconnect quickly once a broker is back: the default back-off grows to two minutes.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str, port_min: int = 1) -> Endpoint:
        """HOST:PORT or [IPv6]:PORT; ``port_min=0`` for a listen address (0: a free port)."""
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not port_min <= int(port) < 65536:
            raise ValueError(f"endpoint {text!r}: expected HOST:PORT, port {port_min}..65535")
        return cls(host.strip("[]"), int(port))

    def to_proto(self) -> definition_pb2.Endpoints:
        try:
            scheme = (
                definition_pb2.IPv6
                if ipaddress.ip_address(self.host).version == 6
                else definition_pb2.IPv4
            )
        except ValueError:
            scheme = definition_pb2.DOMAIN_NAME
        return definition_pb2.Endpoints(
            scheme=scheme, addresses=[definition_pb2.Address(host=self.host, port=self.port)]
        )

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class Channels:
    """Owns the channels; ``close`` closes them all."""

    def __init__(
        self,
        namespace: str = "",
        tls: grpc.ChannelCredentials | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``tls``: the channels' TLS credentials (None: plaintext); ``credentials``: the access
        key the requests are signed with (None: unsigned)."""
        self._namespace = namespace
        self._tls = tls
        self._signer = Signer(credentials)
        self._stubs: dict[Endpoint, service_pb2_grpc.MessagingServiceStub] = {}
        self._channels: dict[Endpoint, grpc.aio.Channel] = {}
        self.client_id = f"{socket.gethostname()}@{os.getpid()}@0@{uuid.uuid4().hex[:12]}"
        self._fixed_metadata = (
            ("x-mq-client-id", self.client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
            ("x-mq-client-version", CLIENT_VERSION),
            ("x-mq-namespace", namespace),
        )
        self._request_prefix = f"{uuid.uuid4().hex[:16]}-"
        self._request_ids = itertools.count()

    def channel(self, endpoint: Endpoint) -> grpc.aio.Channel:
        channel = self._channels.get(endpoint)
        if channel is None:
            target = str(endpoint)
            if self._tls is not None:
                channel = grpc.aio.secure_channel(target, self._tls, options=CHANNEL_OPTIONS)
            else:
                channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
            self._channels[endpoint] = channel
        return channel

    def stub(self, endpoint: Endpoint) -> service_pb2_grpc.MessagingServiceStub:
        stub = self._stubs.get(endpoint)
        if stub is None:
            stub = service_pb2_grpc.MessagingServiceStub(self.channel(endpoint))
            self._stubs[endpoint] = stub
        return stub

    def metadata(self) -> tuple[tuple[str, str], ...]:
        # Built per call but cheaply: the date (and its signature) changes once a second, and a
        # request id need only be unique per client (it is for logs), so a counter does.
        return (
            *self._fixed_metadata,
            *self._signer.metadata(),
            ("x-mq-request-id", f"{self._request_prefix}{next(self._request_ids)}"),
        )

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._stubs.clear()
