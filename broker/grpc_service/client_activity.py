"""The client life-cycle RPCs of apache.rocketmq.v2: Heartbeat, NotifyClientTermination and the
Telemetry stream (the proxy's ClientActivity).

Telemetry carries a client's Settings, which the broker answers merged with its own
(docs/rocketmq-protocol.md §3.4), and the broker's RecoverOrphanedTransactionCommand, pushed to a
live producer of a topic that may still publish on it (client_registry.py) when a transaction
outlives its timeout. A stream the broker ends (its user deleted, or a right its Settings need
revoked: stream_access.py) is aborted with the gRPC status it was ended with.

Heartbeats and NotifyClientTermination also tell broadcast groups' members (broadcast_members.py)
that a client is alive, or has left and its member may be adopted at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.auth.acl import User
from broker.broadcast_members import BroadcastMembers
from broker.group_config import GroupConfigManager
from broker.grpc_service.client_registry import ClientRegistry
from broker.grpc_service.converter import to_duration, to_pb_message
from broker.grpc_service.protocol import OK_STATUS, Code, ProtocolError
from broker.grpc_service.validator import validate_group
from broker.store.codec.message import MessageExt

Context = grpc.aio.ServicerContext[Any, Any]
CLIENT_ID_HEADER = "x-mq-client-id"
NAMESPACE_HEADER = "x-mq-namespace"

# Proxy defaults (docs/rocketmq-protocol.md §3.4): producers retry 3 times, 10 ms growing to 1 s.
PRODUCER_MAX_ATTEMPTS = 3
RECEIVE_BATCH_SIZE = 32
# A client's Settings, which the reply echoes: about a thousand topics or subscriptions.
SETTINGS_BYTES_MAX = 64 * 1024
# RocketMQ's consumer retry schedule: 1s 5s 10s 30s 1m 2m ... 10m 20m 30m 1h 2h.
CONSUMER_BACKOFF_S = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)


def metadata_value(context: Context, name: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode()
    return ""


class ClientActivity:
    def __init__(
        self,
        clients: ClientRegistry,
        groups: GroupConfigManager,
        body_bytes_max: int,
        long_polling_timeout_ms: int,
        members: BroadcastMembers,
    ) -> None:
        self._members = members
        self._clients = clients
        self._groups = groups
        self._max_body_bytes = body_bytes_max
        self._long_polling_ms = long_polling_timeout_ms
        # Set at a graceful stop: every Telemetry stream then ends (OK), so the server's grace
        # is not spent waiting on streams that live as long as their clients.
        self._ending = asyncio.Event()

    def end_streams(self) -> None:
        """End every Telemetry stream, open or opened later, with OK: the clients reconnect
        (elsewhere, or here after a restart), as they do when a proxy goes away."""
        self._ending.set()

    def heartbeat(self, context: Context) -> spb.HeartbeatResponse:
        client_id = metadata_value(context, CLIENT_ID_HEADER)
        self._clients.touch(client_id)
        self._members.seen(client_id)
        return spb.HeartbeatResponse(status=OK_STATUS)

    def notify_client_termination(self, context: Context) -> spb.NotifyClientTerminationResponse:
        client_id = metadata_value(context, CLIENT_ID_HEADER)
        self._clients.forget(client_id)
        self._members.terminated(client_id)
        return spb.NotifyClientTerminationResponse(status=OK_STATUS)

    async def telemetry(
        self,
        request_iterator: AsyncIterator[spb.TelemetryCommand],
        context: Context,
        user: User | None = None,
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """``user``: who opened the stream, with authentication."""
        client_id = metadata_value(context, CLIENT_ID_HEADER)
        if not client_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{CLIENT_ID_HEADER} is required")
        session = self._clients.open(client_id, user)
        reader = asyncio.create_task(self._read_telemetry(request_iterator, session.client_id))
        ending = asyncio.create_task(self._ending.wait())
        ended = asyncio.create_task(session.ending.wait())
        getter: asyncio.Task[spb.TelemetryCommand] | None = None
        try:
            while True:
                getter = asyncio.create_task(session.outbound.get())
                done, _ = await asyncio.wait(
                    {getter, reader, ending, ended}, return_when=asyncio.FIRST_COMPLETED
                )
                if ended in done and session.end is not None:
                    # Before anything queued: a check-back queued for this session before it
                    # was ended is not delivered.
                    await context.abort(session.end.code, session.end.details)
                if getter in done:
                    yield getter.result()
                    continue
                if ending in done:
                    return  # the broker is stopping: the stream ends OK
                error = reader.exception()
                if isinstance(error, ProtocolError):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, error.message)
                if error is not None and not isinstance(error, grpc.aio.BaseError):
                    raise error  # a fault: the server's guard answers INTERNAL and logs it
                return  # the client closed its side (or gRPC ended the call)
        finally:
            for task in (getter, reader, ending, ended):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            self._clients.close(session)

    async def _read_telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], client_id: str
    ) -> None:
        async for command in request_iterator:
            session = self._clients.get(client_id)
            if session is None:
                return
            session.last_seen_monotonic = asyncio.get_running_loop().time()
            if command.HasField("settings"):
                settings = command.settings
                _validate_settings(settings)
                session.settings = settings
                session.push(
                    spb.TelemetryCommand(status=OK_STATUS, settings=self._settings_reply(settings))
                )
            # thread stack traces and verify results are answers nobody asked for: ignored

    def _settings_reply(self, client: pb.Settings) -> pb.Settings:
        """The client's Settings merged with the broker's (docs/rocketmq-protocol.md §3.4)."""
        reply = pb.Settings()
        reply.CopyFrom(client)
        if client.HasField("publishing"):
            reply.backoff_policy.CopyFrom(
                pb.RetryPolicy(
                    max_attempts=PRODUCER_MAX_ATTEMPTS,
                    exponential_backoff=pb.ExponentialBackoff(
                        initial=to_duration(10), max=to_duration(1000), multiplier=2.0
                    ),
                )
            )
            reply.publishing.max_body_size = self._max_body_bytes
            reply.publishing.validate_message_type = True
        else:
            group = self._groups.find_or_create(client.subscription.group.name)
            reply.subscription.fifo = group.consume_message_orderly
            reply.backoff_policy.CopyFrom(
                pb.RetryPolicy(
                    max_attempts=group.max_delivery_attempts,
                    customized_backoff=pb.CustomizedBackoff(
                        next=[to_duration(s * 1000) for s in CONSUMER_BACKOFF_S]
                    ),
                )
            )
            reply.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            reply.subscription.long_polling_timeout.CopyFrom(to_duration(self._long_polling_ms))
        reply.metric.Clear()
        reply.metric.on = False
        return reply

    def request_transaction_check(self, topic: str, half: MessageExt, transaction_id: str) -> bool:
        """Ask a live producer of ``topic`` to resolve a transaction (RecoverOrphaned...)."""
        for session in self._clients.producers_of(topic):
            command = spb.TelemetryCommand(
                recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                    message=to_pb_message(half, topic=topic, message_type=pb.TRANSACTION),
                    transaction_id=transaction_id,
                )
            )
            if session.push(command):
                return True
        return False


def _validate_settings(settings: pb.Settings) -> None:
    size = settings.ByteSize()
    if size > SETTINGS_BYTES_MAX:
        raise ProtocolError(
            Code.BAD_REQUEST, f"settings is {size} bytes (limit {SETTINGS_BYTES_MAX})"
        )
    if settings.HasField("subscription"):
        validate_group(settings.subscription.group.name)
    elif not settings.HasField("publishing"):
        raise ProtocolError(Code.BAD_REQUEST, "settings carry no publishing or subscription")
