"""``apache.rocketmq.v2.MessagingService``: the servicer, one method per RPC, each handing its
request to the activity of its family (the proxy's shape): client life cycle and telemetry in
client_activity.py, sends and transactions in send_activity.py, consumption in
consumer_activity.py and pull_activity.py, routes in route_activity.py. Every reply carries a
Status (docs/rocketmq-protocol.md §1). RecallMessage and SyncLiteSubscription (newer features the
broker lacks) are answered NOT_IMPLEMENTED in the Status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from broker.auth.acl import User
from broker.grpc_service.client_activity import ClientActivity
from broker.grpc_service.consumer_activity import ConsumerActivity
from broker.grpc_service.protocol import Code, status
from broker.grpc_service.pull_activity import PullActivity
from broker.grpc_service.route_activity import RouteActivity
from broker.grpc_service.send_activity import SendActivity

Context = grpc.aio.ServicerContext[Any, Any]


class MessagingService(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]  # untyped stubs
    def __init__(
        self,
        routes: RouteActivity,
        clients: ClientActivity,
        producers: SendActivity,
        consumers: ConsumerActivity,
        pulls: PullActivity,
        write_refusal: str | None = None,
    ) -> None:
        """``write_refusal``: why this broker (a SLAVE) writes nothing: dead-lettering is
        refused with it (FORBIDDEN), as sends are (send_activity.py)."""
        self._write_refusal = write_refusal
        self._routes = routes
        self._clients = clients
        self._producers = producers
        self._consumers = consumers
        self._pulls = pulls

    # -- routes and client life cycle ----------------------------------------------------
    async def QueryRoute(  # noqa: N802 - the protocol's name
        self, request: spb.QueryRouteRequest, context: Context
    ) -> spb.QueryRouteResponse:
        return await self._routes.query_route(request)

    async def Heartbeat(  # noqa: N802 - the protocol's method name
        self, request: spb.HeartbeatRequest, context: Context
    ) -> spb.HeartbeatResponse:
        return self._clients.heartbeat(context)

    async def NotifyClientTermination(  # noqa: N802 - the protocol's method name
        self, request: spb.NotifyClientTerminationRequest, context: Context
    ) -> spb.NotifyClientTerminationResponse:
        return self._clients.notify_client_termination(context)

    async def Telemetry(  # noqa: N802 - the protocol's method name
        self,
        request_iterator: AsyncIterator[spb.TelemetryCommand],
        context: Context,
        user: User | None = None,
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """``user``: who opened the stream, given by the access layer (access.py)."""
        async for command in self._clients.telemetry(request_iterator, context, user):
            yield command

    # -- sending and transactions: the send activity --------------------------------------
    async def SendMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.SendMessageRequest, context: Context
    ) -> spb.SendMessageResponse:
        return await self._producers.send_message(request, context)

    async def EndTransaction(  # noqa: N802 - the protocol's method name
        self, request: spb.EndTransactionRequest, context: Context
    ) -> spb.EndTransactionResponse:
        return await self._producers.end_transaction(request)

    # -- consuming: the consumer activity ----------------------------------------------------
    async def ReceiveMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        async for frame in self._consumers.receive_message(request, context):
            yield frame

    async def AckMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.AckMessageRequest, context: Context
    ) -> spb.AckMessageResponse:
        return await self._consumers.ack_message(request, context)

    async def ChangeInvisibleDuration(  # noqa: N802 - the protocol's method name
        self, request: spb.ChangeInvisibleDurationRequest, context: Context
    ) -> spb.ChangeInvisibleDurationResponse:
        return self._consumers.change_invisible_duration(request, context)

    async def ForwardMessageToDeadLetterQueue(  # noqa: N802 - the protocol's method name
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Context
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        if self._write_refusal is not None:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(Code.FORBIDDEN, self._write_refusal)
            )
        return await self._consumers.forward_to_dead_letter(request, context)

    async def QueryAssignment(  # noqa: N802 - the protocol's method name
        self, request: spb.QueryAssignmentRequest, context: Context
    ) -> spb.QueryAssignmentResponse:
        return await self._consumers.query_assignment(request)

    # -- offset-based consumption: the pull activity ---------------------------------------
    async def PullMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.PullMessageRequest, context: Context
    ) -> AsyncIterator[spb.PullMessageResponse]:
        async for frame in self._pulls.pull_message(request, context):
            yield frame

    async def UpdateOffset(  # noqa: N802 - the protocol's method name
        self, request: spb.UpdateOffsetRequest, context: Context
    ) -> spb.UpdateOffsetResponse:
        return self._pulls.update_offset(request)

    async def GetOffset(  # noqa: N802 - the protocol's method name
        self, request: spb.GetOffsetRequest, context: Context
    ) -> spb.GetOffsetResponse:
        return self._pulls.get_offset(request)

    async def QueryOffset(  # noqa: N802 - the protocol's method name
        self, request: spb.QueryOffsetRequest, context: Context
    ) -> spb.QueryOffsetResponse:
        return self._pulls.query_offset(request)

    # -- newer features the broker lacks ------------------------------------------------------
    async def RecallMessage(  # noqa: N802 - the protocol's method name
        self, request: spb.RecallMessageRequest, context: Context
    ) -> spb.RecallMessageResponse:
        return spb.RecallMessageResponse(
            status=status(Code.NOT_IMPLEMENTED, "RecallMessage: this broker cannot recall messages")
        )

    async def SyncLiteSubscription(  # noqa: N802 - the protocol's method name
        self, request: spb.SyncLiteSubscriptionRequest, context: Context
    ) -> spb.SyncLiteSubscriptionResponse:
        return spb.SyncLiteSubscriptionResponse(
            status=status(
                Code.NOT_IMPLEMENTED, "SyncLiteSubscription: this broker has no lite topics"
            )
        )
