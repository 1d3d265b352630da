"""A v2 endpoint as a RocketMQ 5 proxy is one, and what the stand-in brokers hold from it: the
sidecar tests' ScriptedBroker (tests/sidecar/scripted_broker.py) serving apache.rocketmq.v2
alone, so that rocketbox's BrokerAdmin.GetMessage answers UNIMPLEMENTED there, and a message
source (standin.py) that lists every message it stored, in store order, each as often as stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from tests.rocketmq_remoting.standin import HeldMessage
from tests.sidecar.scripted_broker import BROKER_NAME, ScriptedBroker


@asynccontextmanager
async def proxy_like_broker() -> AsyncIterator[ScriptedBroker]:
    broker = ScriptedBroker()
    server = grpc.aio.server()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(broker, server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield broker
    finally:
        await server.stop(None)


class HeldByScripted:
    """The stand-in brokers' message source over a ScriptedBroker's store log (append-only)."""

    def __init__(self, broker: ScriptedBroker) -> None:
        self._broker = broker
        self._held: list[HeldMessage] = []

    def __call__(self) -> list[HeldMessage]:
        for message_id in self._broker.store_log[len(self._held) :]:
            stored = self._broker.stored[message_id]
            self._held.append(
                HeldMessage(
                    stored.topic, message_id, stored.queue_id, stored.queue_offset,
                    broker_name=BROKER_NAME,
                )
            )  # fmt: skip
        return self._held
