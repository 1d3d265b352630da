"""``rocketbox.namesrv.v1.NameServerService``: the thin gRPC edge over the route table —
validate and convert (converter.py), call the table, answer. Refusals are gRPC status codes whose
details name the field and the limit (INVALID_ARGUMENT), or the table's limit
(RESOURCE_EXHAUSTED); an unknown topic is NOT_FOUND."""

from __future__ import annotations

import logging
from typing import Any

import grpc

from namesrv.converter import (
    broker_info_to_pb,
    check_address,
    check_broker_id,
    check_name,
    check_topic,
    registration_of,
    route_to_pb,
)
from namesrv.errors import BrokersFullError, RegistrationRefusedError
from namesrv.metrics import NamesrvMetrics
from namesrv.route_info import RouteInfoManager
from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb
from rocketbox_api.namesrv.v1 import namesrv_pb2_grpc

LOG = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
NAMESRV_SERVICE_NAME = "rocketbox.namesrv.v1.NameServerService"


class NameServerService(namesrv_pb2_grpc.NameServerServiceServicer):  # type: ignore[misc]  # untyped stubs
    def __init__(self, routes: RouteInfoManager, metrics: NamesrvMetrics) -> None:
        self._routes = routes
        self._metrics = metrics

    async def RegisterBroker(  # noqa: N802 - the protocol's method name
        self, request: npb.RegisterBrokerRequest, context: Context
    ) -> npb.RegisterBrokerResponse:
        try:
            reg = registration_of(request)
            result = self._routes.register_broker(reg)
        except RegistrationRefusedError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except BrokersFullError as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        self._metrics.registrations.labels(reg.cluster_name, reg.broker_name).inc()
        LOG.debug(
            "registered %s/%s/%s at %s (%s topics)",
            reg.cluster_name,
            reg.broker_name,
            reg.broker_id,
            reg.broker_addr,
            len(reg.topics),
        )
        return npb.RegisterBrokerResponse(
            master_addr=result.master_addr or "", ha_server_addr=result.ha_server_addr or ""
        )

    async def UnregisterBroker(  # noqa: N802 - the protocol's method name
        self, request: npb.UnregisterBrokerRequest, context: Context
    ) -> npb.UnregisterBrokerResponse:
        try:
            check_name(request.cluster_name, "cluster_name")
            name = check_name(request.broker_name, "broker_name")
            broker_id = check_broker_id(request.broker_id)
            address = check_address(request.broker_addr, "broker_addr")
        except RegistrationRefusedError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        assert address is not None
        if self._routes.unregister_broker(name, broker_id, address):
            LOG.info("broker %s/%s at %s unregistered", name, broker_id, address)
        return npb.UnregisterBrokerResponse()

    async def GetRouteInfoByTopic(  # noqa: N802 - the protocol's method name
        self, request: npb.GetRouteInfoByTopicRequest, context: Context
    ) -> npb.GetRouteInfoByTopicResponse:
        try:
            topic = check_topic(request.topic)
        except RegistrationRefusedError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        route = self._routes.topic_route(topic)
        if route is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"topic {topic!r}: no live broker group holds it"
            )
        return route_to_pb(route)

    async def GetBrokerClusterInfo(  # noqa: N802 - the protocol's method name
        self, request: npb.GetBrokerClusterInfoRequest, context: Context
    ) -> npb.GetBrokerClusterInfoResponse:
        return npb.GetBrokerClusterInfoResponse(
            brokers=[broker_info_to_pb(live) for live in self._routes.cluster_info()],
            now_ms=self._routes.now_ms(),
        )
