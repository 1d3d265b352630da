"""QueryRoute at the front: the broker's route, with this front as every queue's endpoint.

The official clients send every later call of a topic to the endpoints its route names, so the
route the app sees must name the sidecar; the broker names (and so the queues' identities) stay
the broker's. The endpoint is the access point the app's request names (the address it reached
the front on: the clients put their configured endpoints in every QueryRoute), unless
``--rocketmq-advertise`` names another.
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2
from rocketmq.grpc_protocol import service_pb2 as spb

from sidecar.channels import Endpoint
from sidecar.rocketmq_front.upstream import Upstream, forwarded_metadata, remaining_s

Context = grpc.aio.ServicerContext[Any, Any]


def front_endpoints(
    request: spb.QueryRouteRequest, advertised: Endpoint | None
) -> definition_pb2.Endpoints:
    """Where the app reaches this front."""
    if advertised is not None:
        return advertised.to_proto()
    return request.endpoints


class FrontRoutes:
    def __init__(self, upstream: Upstream, advertised: Endpoint | None) -> None:
        self._upstream = upstream
        self._advertised = advertised

    async def query_route(self, request: spb.QueryRouteRequest, context: Context) -> Any:
        raw = await self._upstream.unary("QueryRoute")(
            request.SerializeToString(),
            timeout=remaining_s(context),
            metadata=forwarded_metadata(context),
        )
        response = spb.QueryRouteResponse.FromString(raw)
        endpoints = front_endpoints(request, self._advertised)
        for queue in response.message_queues:
            queue.broker.endpoints.CopyFrom(endpoints)
        return response
