"""A stand-in for an Apache RocketMQ 5 proxy: the public ``apache.rocketmq.v2.MessagingService``
and nothing else, answering as the proxy does.

Served: QueryRoute, Heartbeat, Telemetry, SendMessage (send.py), ReceiveMessage, AckMessage,
ChangeInvisibleDuration (receive.py) and NotifyClientTermination. Every other RPC of the
service (EndTransaction, QueryAssignment, PullMessage, the offset RPCs ...) is the generated
base servicer's UNIMPLEMENTED, and no other service is registered: no admin service (so no
message lookup by id), no server reflection, no health service. What rocketbox's own broker
offers beyond the protocol is absent, as it is from a real cluster.

Every call must carry ``x-mq-client-id`` (CLIENT_ID_REQUIRED otherwise). The route is two
logical brokers, broker-a and broker-b, each with the topic's queues 0..N-1, READ_WRITE, broker
id 0, every broker at the stand-in's own address (the proxy's cluster mode: the hosts the client
asked, the proxy's port). Telemetry keeps the client's Settings while its stream is open and
answers each Settings frame with the proxy's merge (settings.py).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from tests.rocketmq_proxy.config import ProxyConfig
from tests.rocketmq_proxy.groups import ConsumerGroups
from tests.rocketmq_proxy.receive import ReceiveService, group_name
from tests.rocketmq_proxy.send import ProxyError, SendService, ok_status, topic_name
from tests.rocketmq_proxy.settings import consumer_settings, producer_settings
from tests.rocketmq_proxy.store import ProxyStore

LOG = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[object, object]
CONSUMER_TYPES = (
    definition_pb2.PUSH_CONSUMER,
    definition_pb2.SIMPLE_CONSUMER,
    definition_pb2.LITE_PUSH_CONSUMER,
)
NO_SETTINGS = "cannot find client settings for this client"


def _metadata(context: Context) -> dict[str, str]:
    return {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}


class StandinProxy(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    def __init__(self, config: ProxyConfig, data_dir: Path, port: int) -> None:
        self.config = config
        self.port = port
        self.store = ProxyStore(data_dir)
        self.groups = ConsumerGroups(config, self.store)
        self._send = SendService(config, self.store, data_dir, self.groups.notify)
        self._receive = ReceiveService(config, self.groups)
        # The Settings each client sent on its open Telemetry stream, by client id.
        self.settings: dict[str, definition_pb2.Settings] = {}

    # -- the call's context -------------------------------------------------------------------
    @staticmethod
    def _client(context: Context) -> tuple[str, str, str]:
        """(client id, namespace, client version); ProxyError without a client id."""
        metadata = _metadata(context)
        client_id = metadata.get("x-mq-client-id", "")
        if not client_id.strip():
            raise ProxyError(Code.CLIENT_ID_REQUIRED, "client id cannot be empty")
        return (
            client_id,
            metadata.get("x-mq-namespace", ""),
            metadata.get("x-mq-client-version", ""),
        )

    def _merged(self, settings: definition_pb2.Settings) -> definition_pb2.Settings:
        if settings.HasField("publishing"):
            return producer_settings(settings)
        # A group the stand-in does not know is answered with the defaults (the proxy's merge
        # finds no group config); only a receive finds out that it does not exist.
        return consumer_settings(settings, False, self.config.long_polling_max_ms)

    # -- route --------------------------------------------------------------------------------
    async def QueryRoute(  # noqa: N802 - the protocol's method name
        self, request: service_pb2.QueryRouteRequest, context: Context
    ) -> service_pb2.QueryRouteResponse:
        try:
            _, namespace, _ = self._client(context)
            name = topic_name(request.topic, namespace)
            topic = self.config.topic(name)
            if topic is None:
                raise ProxyError(Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        except ProxyError as e:
            return service_pb2.QueryRouteResponse(status=e.status())
        endpoints = self._endpoints(request.endpoints)
        queues = [
            definition_pb2.MessageQueue(
                topic=request.topic,
                id=queue_id,
                permission=definition_pb2.READ_WRITE,
                broker=definition_pb2.Broker(name=broker, id=0, endpoints=endpoints),
                accept_message_types=topic.message_type.accepted(),
            )
            for broker in self.config.brokers
            for queue_id in range(topic.queues)
        ]
        return service_pb2.QueryRouteResponse(status=ok_status(), message_queues=queues)

    def _endpoints(self, asked: definition_pb2.Endpoints) -> definition_pb2.Endpoints:
        hosts = [a.host for a in asked.addresses] or ["127.0.0.1"]
        scheme = asked.scheme or definition_pb2.IPv4
        return definition_pb2.Endpoints(
            scheme=scheme,
            addresses=[definition_pb2.Address(host=h, port=self.port) for h in hosts],
        )

    # -- clients ------------------------------------------------------------------------------
    async def Heartbeat(  # noqa: N802 - the protocol's method name
        self, request: service_pb2.HeartbeatRequest, context: Context
    ) -> service_pb2.HeartbeatResponse:
        try:
            client_id, namespace, _ = self._client(context)
            settings = self.settings.get(client_id)
            if settings is None:
                raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, NO_SETTINGS)
            if settings.client_type in CONSUMER_TYPES:
                group_name(request.group, namespace)
            elif settings.client_type != definition_pb2.PRODUCER:
                raise ProxyError(
                    Code.UNRECOGNIZED_CLIENT_TYPE,
                    definition_pb2.ClientType.Name(settings.client_type),
                )
        except ProxyError as e:
            return service_pb2.HeartbeatResponse(status=e.status())
        return service_pb2.HeartbeatResponse(status=ok_status())

    async def NotifyClientTermination(  # noqa: N802 - the protocol's method name
        self, request: service_pb2.NotifyClientTerminationRequest, context: Context
    ) -> service_pb2.NotifyClientTerminationResponse:
        try:
            client_id, namespace, _ = self._client(context)
            settings = self.settings.pop(client_id, None)
            if settings is None:
                raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, NO_SETTINGS)
            if settings.client_type in CONSUMER_TYPES:
                group_name(request.group, namespace)
        except ProxyError as e:
            return service_pb2.NotifyClientTerminationResponse(status=e.status())
        return service_pb2.NotifyClientTerminationResponse(status=ok_status())

    async def Telemetry(  # noqa: N802 - the protocol's method name
        self, request_iterator: AsyncIterator[service_pb2.TelemetryCommand], context: Context
    ) -> AsyncIterator[service_pb2.TelemetryCommand]:
        try:
            client_id, namespace, _ = self._client(context)
        except ProxyError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)
        try:
            async for command in request_iterator:
                if command.WhichOneof("command") != "settings":
                    continue  # stack traces and verify results answer commands never sent
                settings = command.settings
                try:
                    self._check_settings(settings, namespace)
                except ProxyError as e:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"process client telemetryCommand failed. {e.message}",
                    )
                self.settings[client_id] = settings
                yield service_pb2.TelemetryCommand(
                    status=ok_status(), settings=self._merged(settings)
                )
        finally:
            # The proxy forgets a client's Settings when its stream ends.
            self.settings.pop(client_id, None)

    @staticmethod
    def _check_settings(settings: definition_pb2.Settings, namespace: str) -> None:
        kind = settings.WhichOneof("pub_sub")
        if kind is None:
            raise ProxyError(
                Code.BAD_REQUEST, "there is no publishing or subscription data in settings"
            )
        if kind == "publishing":
            if settings.client_type != definition_pb2.PRODUCER:
                raise ProxyError(
                    Code.BAD_REQUEST, "publishing settings require PRODUCER client type"
                )
            for topic in settings.publishing.topics:
                topic_name(topic, namespace)
            return
        if settings.client_type not in CONSUMER_TYPES:
            raise ProxyError(Code.BAD_REQUEST, "subscription settings require consumer client type")
        group_name(settings.subscription.group, namespace)

    # -- messages -----------------------------------------------------------------------------
    async def SendMessage(  # noqa: N802 - the protocol's method name
        self, request: service_pb2.SendMessageRequest, context: Context
    ) -> service_pb2.SendMessageResponse:
        try:
            _, namespace, _ = self._client(context)
        except ProxyError as e:
            return service_pb2.SendMessageResponse(status=e.status())
        return self._send.send(request, namespace)

    async def ReceiveMessage(  # noqa: N802 - the protocol's method name
        self, request: service_pb2.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
        try:
            client_id, namespace, version = self._client(context)
        except ProxyError as e:
            yield service_pb2.ReceiveMessageResponse(status=e.status())
            return
        settings = self.settings.get(client_id)
        async for response in self._receive.receive(request, context, settings, namespace, version):
            yield response

    async def AckMessage(  # noqa: N802 - the protocol's method name
        self, request: service_pb2.AckMessageRequest, context: Context
    ) -> service_pb2.AckMessageResponse:
        try:
            _, namespace, _ = self._client(context)
        except ProxyError as e:
            return service_pb2.AckMessageResponse(status=e.status())
        return self._receive.ack(request, namespace)

    async def ChangeInvisibleDuration(  # noqa: N802 - the protocol's method name
        self, request: service_pb2.ChangeInvisibleDurationRequest, context: Context
    ) -> service_pb2.ChangeInvisibleDurationResponse:
        try:
            _, namespace, _ = self._client(context)
        except ProxyError as e:
            return service_pb2.ChangeInvisibleDurationResponse(
                status=e.status(), receipt_handle=request.receipt_handle
            )
        return self._receive.change_invisible_duration(request, namespace)
