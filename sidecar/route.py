"""Topic routes from the broker's QueryRoute, cached and refreshed like RocketMQ's clients do.

A route lists the topic's queues with their permission and broker; the producer may write to
queues with WRITE or READ_WRITE permission on a master (broker id 0). A route is kept
``route_refresh_interval_ms`` and then fetched again on next use; when the refresh fails the stale
route is used rather than nothing (the broker may be up while the access point flaps), and a send
failure drops it so the next send asks again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from outbox.entry import SpoolCause
from sidecar.channels import Channels, Endpoint
from sidecar.errors import SendFailedError, SendRejectedError
from sidecar.send_status import AUTH_CAUSES, classify_rpc_error

WRITABLE = (definition_pb2.WRITE, definition_pb2.READ_WRITE)
MASTER_BROKER_ID = 0
# After a route query failed, sends of that topic fail at once for this long instead of asking
# again: with the broker down, every send would otherwise queue behind a doomed query (they
# spool straight away; the resend pool finds the broker once it is back).
ROUTE_FAILURE_HOLD_MS = 500


@dataclass(frozen=True, slots=True)
class WritableQueue:
    topic: str
    queue_id: int
    broker_name: str
    endpoint: Endpoint
    accept_message_types: frozenset[int]


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    queues: tuple[WritableQueue, ...]
    fetched_s: float

    @property
    def broker_names(self) -> list[str]:
        return list(dict.fromkeys(q.broker_name for q in self.queues))


class TopicRouteCache:
    def __init__(self, channels: Channels, access_points: tuple[Endpoint, ...], namespace: str,
                 refresh_interval_ms: int, timeout_ms: int) -> None:  # fmt: skip
        self._channels = channels
        self._access_points = access_points
        self._namespace = namespace
        self._refresh_interval_s = refresh_interval_ms / 1000.0
        self._timeout_s = timeout_ms / 1000.0
        self._routes: dict[str, TopicRoute] = {}
        self._next_access_point = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._failed: dict[str, tuple[float, SendFailedError]] = {}

    async def get(self, topic: str, deadline_s: float) -> TopicRoute:
        """The route of ``topic``: cached while fresh, else queried (one query per topic at a
        time). Raises SendRejectedError when the topic does not exist, SendFailedError when no
        access point answers."""
        route = self._fresh(topic)
        if route is not None:
            return route
        lock = self._locks.setdefault(topic, asyncio.Lock())
        async with lock:
            # Checked again: the query another send made while this one waited may have
            # answered it.
            route = self._fresh(topic)
            if route is not None:
                return route
            try:
                route = await self._query(topic, deadline_s)
            except SendFailedError as e:
                self._failed[topic] = (time.monotonic() + ROUTE_FAILURE_HOLD_MS / 1000.0, e)
                stale = self._routes.get(topic)
                if stale is not None:
                    return stale
                raise
            self._failed.pop(topic, None)
            self._routes[topic] = route
            return route

    def _fresh(self, topic: str) -> TopicRoute | None:
        """The cached route while fresh; raises the held failure of a topic without a route;
        None when a query is due."""
        route = self._routes.get(topic)
        if route is not None and time.monotonic() - route.fetched_s < self._refresh_interval_s:
            return route
        failed = self._failed.get(topic)
        if failed is not None and route is None and time.monotonic() < failed[0]:
            raise _again(failed[1])
        return None

    def invalidate(self, topic: str) -> None:
        self._routes.pop(topic, None)

    async def _query(self, topic: str, deadline_s: float) -> TopicRoute:
        last: SendFailedError | None = None
        # Every access point once, starting after the last one that answered.
        for i in range(len(self._access_points)):
            index = (self._next_access_point + i) % len(self._access_points)
            access_point = self._access_points[index]
            timeout_s = min(self._timeout_s, deadline_s - time.monotonic())
            if timeout_s <= 0:
                break
            request = service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name=topic, resource_namespace=self._namespace),
                endpoints=access_point.to_proto(),
            )
            try:
                response = await self._channels.stub(access_point).QueryRoute(
                    request, timeout=timeout_s, metadata=self._channels.metadata()
                )
            except Exception as e:  # grpc.aio.AioRpcError and channel errors
                failure = classify_rpc_error(e)
                cause = failure.cause if failure.cause in AUTH_CAUSES.values() else None
                last = SendFailedError(
                    cause or SpoolCause.UNAVAILABLE, f"route of {topic!r}: {failure.detail}"
                )
                continue
            code = response.status.code
            if code == Code.TOPIC_NOT_FOUND:
                raise SendRejectedError(
                    "topic",
                    f"{topic!r} does not exist at the broker ({response.status.message})",
                    code=grpc.StatusCode.NOT_FOUND,
                )
            if code == Code.ILLEGAL_TOPIC:
                raise SendRejectedError("topic", response.status.message)
            if code != Code.OK:
                last = SendFailedError(
                    AUTH_CAUSES.get(code, SpoolCause.UNAVAILABLE),
                    f"route of {topic!r}: {Code.Name(code)} {response.status.message}",
                )
                continue
            self._next_access_point = index
            queues = tuple(
                WritableQueue(
                    topic=topic,
                    queue_id=q.id,
                    broker_name=q.broker.name,
                    endpoint=_endpoint_of(q, access_point),
                    accept_message_types=frozenset(q.accept_message_types),
                )
                for q in response.message_queues
                if q.permission in WRITABLE and q.broker.id == MASTER_BROKER_ID
            )
            if not queues:
                last = SendFailedError(SpoolCause.UNAVAILABLE, f"{topic!r} has no writable queue")
                continue
            return TopicRoute(topic, queues, time.monotonic())
        raise last or SendFailedError(SpoolCause.UNAVAILABLE, f"route of {topic!r}: no time left")


def _endpoint_of(q: definition_pb2.MessageQueue, access_point: Endpoint) -> Endpoint:
    addresses = q.broker.endpoints.addresses
    if not addresses:
        return access_point
    return Endpoint(addresses[0].host, addresses[0].port)


def _again(failure: SendFailedError) -> SendFailedError:
    """A fresh copy of a held failure: raising one exception object again and again would chain
    every raise's traceback onto it, and with them the frames (and messages) of every send."""
    return SendFailedError(failure.cause, failure.detail, failure.maybe_stored)
