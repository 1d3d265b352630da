"""The brokers a front call is forwarded to, and what of the app's call goes with it.

The front shares the producer's channels (one per broker endpoint), so a forwarded call costs no
connection of its own. Forwarded calls carry the app's metadata unchanged (its credentials,
namespace and client id: the broker must see the app, not the sidecar), minus what belongs to
the hop itself (HTTP/2 pseudo-headers, gRPC's own headers, the user agent).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from sidecar.channels import Channels, Endpoint
from sidecar.rocketmq_front.brokers import BrokerDirectory

SERVICE = "apache.rocketmq.v2.MessagingService"
# A route the front looks up itself (a queue's broker it has not seen routed yet).
ROUTE_LOOKUP_TIMEOUT_S = 3.0
# Headers of the hop, never forwarded: gRPC sets its own on the next one.
HOP_HEADERS = frozenset({":authority", "user-agent", "content-type", "te", "accept-encoding"})

Metadata = tuple[tuple[str, str | bytes], ...]


def forwarded_metadata(context: grpc.aio.ServicerContext[Any, Any]) -> Metadata:
    """The app's metadata as the broker must see it."""
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata() or ()
        if key not in HOP_HEADERS and not key.startswith("grpc-")
    )


def remaining_s(context: grpc.aio.ServicerContext[Any, Any]) -> float | None:
    """The app's own deadline, left for the forwarded call (None: the app set none)."""
    return context.time_remaining()


class Upstream:
    """Raw (bytes in, bytes out) callables of the broker's methods, per endpoint."""

    def __init__(self, channels: Channels, access_points: Sequence[Endpoint]) -> None:
        if not access_points:
            raise ValueError("the RocketMQ front needs at least one broker access point")
        self._channels = channels
        self.access_points = tuple(access_points)
        # The broker groups behind the home access point, learned from the routes relayed.
        self.directory = BrokerDirectory(self.home)
        self.directory.set_lookup(self.route_queues)
        self._unary: dict[tuple[Endpoint, str], grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = {}
        self._streams: dict[
            tuple[Endpoint, str], grpc.aio.UnaryStreamMultiCallable[bytes, bytes]
        ] = {}
        self._bidi: dict[
            tuple[Endpoint, str], grpc.aio.StreamStreamMultiCallable[bytes, bytes]
        ] = {}

    @property
    def home(self) -> Endpoint:
        """The broker calls go to when nothing in them names another."""
        return self.access_points[0]

    def unary(
        self, method: str, endpoint: Endpoint | None = None
    ) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
        key = (endpoint or self.home, method)
        call = self._unary.get(key)
        if call is None:
            call = self._unary[key] = self._channels.channel(key[0]).unary_unary(
                f"/{SERVICE}/{method}"
            )
        return call

    def unary_stream(
        self, method: str, endpoint: Endpoint | None = None
    ) -> grpc.aio.UnaryStreamMultiCallable[bytes, bytes]:
        key = (endpoint or self.home, method)
        call = self._streams.get(key)
        if call is None:
            call = self._streams[key] = self._channels.channel(key[0]).unary_stream(
                f"/{SERVICE}/{method}"
            )
        return call

    def stream_stream(
        self, method: str, endpoint: Endpoint | None = None
    ) -> grpc.aio.StreamStreamMultiCallable[bytes, bytes]:
        key = (endpoint or self.home, method)
        call = self._bidi.get(key)
        if call is None:
            call = self._bidi[key] = self._channels.channel(key[0]).stream_stream(
                f"/{SERVICE}/{method}"
            )
        return call

    def channel(self, endpoint: Endpoint | None = None) -> grpc.aio.Channel:
        return self._channels.channel(endpoint or self.home)

    async def route_queues(self, topic: pb.Resource) -> list[pb.MessageQueue]:
        """``topic``'s queues as the home broker routes them, asked as the sidecar (empty when
        the broker answers an error: the caller then goes home)."""
        raw = await self.unary("QueryRoute")(
            spb.QueryRouteRequest(topic=topic).SerializeToString(),
            timeout=ROUTE_LOOKUP_TIMEOUT_S,
            metadata=self._channels.metadata(),
        )
        response = spb.QueryRouteResponse.FromString(raw)
        if response.status.code != pb.OK:
            return []
        return list(response.message_queues)
