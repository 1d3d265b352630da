"""QueryRoute at the front: the broker's route, with this front as every queue's endpoint.

The official clients send every later call of a topic to the endpoints its route names, so the
route the app sees must name the sidecar; the broker names (and so the queues' identities) stay
the broker's. The endpoint is the access point the app's request names (the address it reached
the front on: the clients put their configured endpoints in every QueryRoute), unless
``--rocketmq-advertise`` names another.

The broker's access points are asked in order; one that cannot be reached (UNAVAILABLE,
DEADLINE_EXCEEDED: connection refused, broker down) passes the question to the next, each given
an equal share of the app's deadline. The broker's own answers (OK, TOPIC_NOT_FOUND, …) are
passed on as they are. When none can be reached, the front still answers, because an app whose
route lookup fails cannot send at all, and sending through an outage is what the sidecar is for:

- the last good answer for the topic (per namespace and topic, at most ``routes_max`` of them,
  the least recently used forgotten first);
- with none, a route it makes up: one writable queue (id 0: the Node client uses queue 0 only,
  docs/rocketmq-protocol.md §6) of a broker named ``rocketbox-sidecar`` (id 0, the master the
  clients look for) at this front, accepting NORMAL, FIFO and DELAY messages. WRITE only, so a
  consumer finds nothing to read there. An app started during an outage can then send: its messages
  are spooled and delivered once the broker returns. If the topic does not exist on the broker (and
  it does not create topics), that delivery is refused for good: the entries end DEAD in the outbox
  with the broker's TOPIC_NOT_FOUND as their last error (``rocketbox outbox`` lists them, the
  reconciliation counts them), although the app was told OK. The sidecar cannot know better
  while the broker is away; an app that must know sends once while the broker is up.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

import grpc
from rocketmq.grpc_protocol import Code, definition_pb2
from rocketmq.grpc_protocol import service_pb2 as spb

from sidecar.channels import Endpoint
from sidecar.rocketmq_front.upstream import Upstream, forwarded_metadata

LOG = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
# Topics whose last good route is kept, over all namespaces (~1 KiB each).
FRONT_ROUTES_MAX = 10_000
# What the broker's failures leave of the app's deadline to answer from the cache.
ANSWER_MARGIN_S = 0.2
# The whole lookup's time when the app set no deadline.
ROUTE_TIMEOUT_S_DEFAULT = 3.0
UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
SYNTHESIZED_BROKER_NAME = "rocketbox-sidecar"
SYNTHESIZED_TYPES = (definition_pb2.NORMAL, definition_pb2.FIFO, definition_pb2.DELAY)
NAMESPACE_HEADER = "x-mq-namespace"


def front_endpoints(
    request: spb.QueryRouteRequest, advertised: Endpoint | None
) -> definition_pb2.Endpoints:
    """Where the app reaches this front."""
    if advertised is not None:
        return advertised.to_proto()
    return request.endpoints


def synthesized_route(
    topic: definition_pb2.Resource, endpoints: definition_pb2.Endpoints
) -> spb.QueryRouteResponse:
    """A writable route at this front, for a topic whose broker cannot be reached."""
    queue = definition_pb2.MessageQueue(
        topic=topic,
        id=0,
        permission=definition_pb2.WRITE,
        broker=definition_pb2.Broker(name=SYNTHESIZED_BROKER_NAME, id=0, endpoints=endpoints),
        accept_message_types=SYNTHESIZED_TYPES,
    )
    return spb.QueryRouteResponse(
        status=definition_pb2.Status(
            code=Code.OK, message="the broker cannot be reached: the sidecar spools sends"
        ),
        message_queues=[queue],
    )


class FrontRoutes:
    def __init__(
        self, upstream: Upstream, advertised: Endpoint | None, routes_max: int = FRONT_ROUTES_MAX
    ) -> None:
        if routes_max < 1:
            raise ValueError(f"routes_max must be >= 1, got {routes_max}")
        self._upstream = upstream
        self._advertised = advertised
        self._routes_max = routes_max
        # (namespace, topic) → the broker's last OK answer, least recently used first.
        self._last_good: collections.OrderedDict[tuple[str, str], bytes] = collections.OrderedDict()

    async def query_route(self, request: spb.QueryRouteRequest, context: Context) -> Any:
        key = (_namespace(request, context), request.topic.name)
        raw = await self._ask_broker(request, context)
        if raw is None:
            return self._fallback(key, request)
        response = spb.QueryRouteResponse.FromString(raw)
        if response.status.code == Code.OK:
            self._remember(key, raw)
            # Before the rewrite: the forwarded calls route by the brokers' real endpoints.
            self._upstream.directory.learn_queues(response.message_queues)
            self._rewrite(response, request)
        return response

    async def _ask_broker(self, request: spb.QueryRouteRequest, context: Context) -> bytes | None:
        """The first answer of an access point that can be reached; None when none can. Other
        gRPC failures are the app's answer (aborted with the broker's status)."""
        raw_request = request.SerializeToString()
        metadata = forwarded_metadata(context)
        remaining = context.time_remaining()
        budget_s = ROUTE_TIMEOUT_S_DEFAULT if remaining is None else remaining - ANSWER_MARGIN_S
        deadline_s = time.monotonic() + budget_s
        points = self._upstream.access_points
        for i, endpoint in enumerate(points):
            share_s = (deadline_s - time.monotonic()) / (len(points) - i)
            if share_s <= 0:
                break
            try:
                return await self._upstream.unary("QueryRoute", endpoint)(
                    raw_request, timeout=share_s, metadata=metadata
                )
            except grpc.aio.AioRpcError as e:
                if e.code() not in UNREACHABLE:
                    await context.abort(e.code(), e.details() or "")
                LOG.debug("QueryRoute of %s at %s: %s", request.topic.name, endpoint, e.code())
        return None

    def _fallback(self, key: tuple[str, str], request: spb.QueryRouteRequest) -> Any:
        raw = self._last_good.get(key)
        if raw is None:
            LOG.info(
                "no broker reached for the route of %s: answered a writable route at the "
                "sidecar (its sends are spooled)", request.topic.name,
            )  # fmt: skip
            return synthesized_route(request.topic, front_endpoints(request, self._advertised))
        self._last_good.move_to_end(key)
        response = spb.QueryRouteResponse.FromString(raw)
        self._rewrite(response, request)
        return response

    def _remember(self, key: tuple[str, str], raw: bytes) -> None:
        self._last_good[key] = raw
        self._last_good.move_to_end(key)
        while len(self._last_good) > self._routes_max:
            self._last_good.popitem(last=False)

    def _rewrite(self, response: spb.QueryRouteResponse, request: spb.QueryRouteRequest) -> None:
        endpoints = front_endpoints(request, self._advertised)
        for queue in response.message_queues:
            queue.broker.endpoints.CopyFrom(endpoints)


def _namespace(request: spb.QueryRouteRequest, context: Context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == NAMESPACE_HEADER:
            return value if isinstance(value, str) else value.decode()
    return str(request.topic.resource_namespace)
