"""SendMessage resolves its topic once, in one place (SendMessageService.resolve_topic, which
auto-creates it when the broker is told to), and checks its messages against what that one
resolution gave; the checks themselves never look a topic up or create one.

Proves, on a real broker over the raw protocol:
- auto-create off: a good message to a missing topic is TOPIC_NOT_FOUND and the topic stays
  missing; a bad one to it is answered with the message's own code (as the proxy, which checks
  messages before it routes them);
- auto-create on: the first send creates the topic with the broker's default queue count
  (BrokerConfig.default_topic_queue_nums) and is stored; a message whose queue_id is beyond that
  count is refused (BAD_REQUEST) in the very request that created the topic: it was checked
  against the created topic, not against a limit made up for a topic not there yet.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.config import BrokerConfig
from broker.store.config import MessageStoreConfig
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_edges import send, wire_message

pytestmark = pytest.mark.slow

CALL_DEADLINE_S = 15.0
DEFAULT_QUEUE_NUMS = BrokerConfig(
    store=MessageStoreConfig(store_path_root_dir=Path())
).default_topic_queue_nums


def route(endpoint: str, topic: str) -> spb.QueryRouteResponse:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply: spb.QueryRouteResponse = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=(("x-mq-client-id", "send-topic-test"),),
            timeout=CALL_DEADLINE_S,
        )
        return reply


def test_without_auto_create_a_missing_topic_is_not_found_after_the_message_checks(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path)
    try:
        reply = send(broker.endpoint, [wire_message("Nowhere", b"fine")])
        assert reply.status.code == Code.TOPIC_NOT_FOUND, reply.status
        assert [e.status.code for e in reply.entries] == [Code.TOPIC_NOT_FOUND]
        reply = send(broker.endpoint, [wire_message("Nowhere", b"")])
        assert reply.status.code == Code.MESSAGE_BODY_EMPTY, reply.status
        assert route(broker.endpoint, "Nowhere").status.code == Code.TOPIC_NOT_FOUND
    finally:
        broker.stop()


def test_with_auto_create_the_created_topic_is_the_one_its_messages_are_checked_against(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path, "--auto-create-topic")
    try:
        beyond = wire_message("Fresh", b"beyond", queue_id=DEFAULT_QUEUE_NUMS)
        reply = send(broker.endpoint, [beyond])
        assert reply.status.code == Code.BAD_REQUEST, reply.status
        assert f"0..{DEFAULT_QUEUE_NUMS - 1}" in reply.status.message
        reply = send(broker.endpoint, [wire_message("Other", b"first")])
        assert reply.status.code == Code.OK, reply.status
        routed = route(broker.endpoint, "Other")
        assert routed.status.code == Code.OK, routed.status
        assert len(routed.message_queues) == DEFAULT_QUEUE_NUMS
    finally:
        broker.stop()
