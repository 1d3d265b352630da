"""QueryRoute at the sidecar's RocketMQ front, against real broker and sidecar processes. Proves:

- the route is the broker's (its brokers, queues, permissions and message types) with the front
  as every queue's endpoint: the address the app's request names, or ``--rocketmq-advertise``;
- the broker's own answers (TOPIC_NOT_FOUND) are passed on as they are, to a route lookup and
  to a send (which is refused, not spooled);
- an access point that refuses connections is passed over for the next one;
- with the broker down, a topic seen before is answered its last route, and a topic never seen
  a writable route at the front (queue 0 of ``rocketbox-sidecar``), through which an official
  producer started during the outage sends OK; the message is stored once the broker returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import Message
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from sidecar.channels import Endpoint
from tests.broker.broker_process import BrokerProcess
from tests.sidecar.rocketmq_front.front_send_process import (
    FrontSidecar,
    producer,
    raw_message,
    raw_metadata,
    raw_send,
    raw_stub,
    refused_endpoint,
)
from tests.sidecar.sidecar_process import BROKER_ARGS, CALL_DEADLINE_S, restart, wait_stored

pytestmark = pytest.mark.slow

ADVERTISED = "front.example:18081"
# What a queue is, apart from where it is reached.
Queue = tuple[str, int, int, int, tuple[int, ...]]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that creates no topic on use: it has ``Routed`` only."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker"), "--topic", "Routed:3")
    try:
        yield b
    finally:
        b.stop()


def query_route(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, endpoint: str
) -> service_pb2.QueryRouteResponse:
    request = service_pb2.QueryRouteRequest(
        topic=definition_pb2.Resource(name=topic), endpoints=Endpoint.parse(endpoint).to_proto()
    )
    return stub.QueryRoute(request, timeout=CALL_DEADLINE_S, metadata=raw_metadata())


def route_at(endpoint: str, topic: str, named: str | None = None) -> service_pb2.QueryRouteResponse:
    with raw_stub(endpoint) as stub:
        return query_route(stub, topic, named or endpoint)


def queues(response: service_pb2.QueryRouteResponse) -> list[Queue]:
    return [
        (q.broker.name, q.broker.id, q.id, q.permission, tuple(q.accept_message_types))
        for q in response.message_queues
    ]


def endpoints_of(response: service_pb2.QueryRouteResponse) -> set[str]:
    return {
        f"{a.host}:{a.port}" for q in response.message_queues for a in q.broker.endpoints.addresses
    }


def test_the_route_is_the_brokers_with_the_front_as_endpoint(broker: BrokerProcess) -> None:
    sidecar = FrontSidecar(broker.endpoint, "memory://")
    try:
        direct = route_at(broker.endpoint, "Routed")
        fronted = route_at(sidecar.front_endpoint, "Routed")
        missing = route_at(sidecar.front_endpoint, "NotThere")
        with raw_stub(sidecar.front_endpoint) as stub:
            sent_to_missing = raw_send(stub, raw_message("NotThere", "to-a-missing-topic"))
    finally:
        sidecar.stop()
    assert fronted.status.code == Code.OK
    assert queues(fronted) == queues(direct)
    assert len(queues(fronted)) == 3
    assert endpoints_of(fronted) == {sidecar.front_endpoint}
    assert missing.status.code == Code.TOPIC_NOT_FOUND, "the broker's answer, passed on"
    assert missing.status == route_at(broker.endpoint, "NotThere").status
    assert sent_to_missing.status.code == Code.TOPIC_NOT_FOUND, "not spooled: refused for good"
    assert "topic" in sent_to_missing.status.message


def test_advertised_endpoint_and_access_points_tried_in_order(broker: BrokerProcess) -> None:
    with refused_endpoint() as nowhere:
        # The refusing access point is the first: the route must come from the second.
        sidecar = FrontSidecar(
            nowhere, "memory://", "--broker", broker.endpoint, f"--rocketmq-advertise={ADVERTISED}"
        )
        try:
            fronted = route_at(sidecar.front_endpoint, "Routed")
        finally:
            sidecar.stop()
    assert fronted.status.code == Code.OK
    assert queues(fronted) == queues(route_at(broker.endpoint, "Routed"))
    assert endpoints_of(fronted) == {ADVERTISED}
    assert {q.broker.endpoints.scheme for q in fronted.message_queues} == {
        definition_pb2.DOMAIN_NAME
    }


def test_broker_down_cached_route_then_a_made_up_one_that_takes_sends(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", *BROKER_ARGS)
    sidecar = FrontSidecar(broker.endpoint, "memory://")
    back: BrokerProcess | None = None
    try:
        seen = route_at(sidecar.front_endpoint, "Fifo")
        assert seen.status.code == Code.OK
        broker.kill()
        cached = route_at(sidecar.front_endpoint, "Fifo")
        never_seen = route_at(sidecar.front_endpoint, "FrontNew")
        with producer(sidecar.front_endpoint, ("FrontNew",)) as p:
            m = Message()
            m.topic = "FrontNew"
            m.body = b"sent during the outage"
            receipt = p.send(m)
        assert receipt.offset == -1, "spooled"
        back = restart(broker)
        [copy] = wait_stored(back.endpoint, receipt.message_id)
        assert copy.topic == "FrontNew"
        assert copy.body == b"sent during the outage"
        sidecar.stop()
    finally:
        if sidecar.running():
            sidecar.kill()
        if back is not None:
            back.stop()
    assert cached.status.code == Code.OK
    assert queues(cached) == queues(seen)
    assert endpoints_of(cached) == {sidecar.front_endpoint}
    assert never_seen.status.code == Code.OK
    assert queues(never_seen) == [
        ("rocketbox-sidecar", 0, 0, definition_pb2.WRITE,
         (definition_pb2.NORMAL, definition_pb2.FIFO, definition_pb2.DELAY)),
    ]  # fmt: skip
    assert endpoints_of(never_seen) == {sidecar.front_endpoint}
    assert [q.topic.name for q in never_seen.message_queues] == ["FrontNew"]
