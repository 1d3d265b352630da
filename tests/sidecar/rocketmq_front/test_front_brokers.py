"""The front's broker directory (sidecar/rocketmq_front/brokers.py), on routes as a cluster's
broker answers them.

Proves: masters' endpoints are learned by broker name (slaves' are not: calls go to masters);
with one group known nothing is routed anywhere but home and no handle is touched; a handle of
another group leaves with its group's name and comes back to that group without it; a handle
naming no known group, or none, goes home unchanged; a name not known yet is looked up once in
the topic's route; a group served at a new endpoint is learned there; the directory keeps at
most BROKERS_MAX names.
"""

from __future__ import annotations

import asyncio

from rocketmq.grpc_protocol import definition_pb2 as pb

from sidecar.channels import Endpoint
from sidecar.rocketmq_front.brokers import BROKERS_MAX, BrokerDirectory

HOME = Endpoint("127.0.0.1", 8081)
OTHER = Endpoint("127.0.0.1", 8082)


def queue(broker_name: str, endpoint: Endpoint, broker_id: int = 0) -> pb.MessageQueue:
    return pb.MessageQueue(
        topic=pb.Resource(name="Orders"),
        broker=pb.Broker(name=broker_name, id=broker_id, endpoints=endpoint.to_proto()),
    )


def test_one_group_known_routes_home_and_leaves_handles_alone() -> None:
    directory = BrokerDirectory(HOME)
    directory.learn_queues([queue("broker-a", HOME), queue("broker-a", HOME)])
    assert not directory.several
    assert directory.handle_out(HOME, "0.7.abc") == "0.7.abc"
    assert directory.handle_in("0.7.abc") == (HOME, "0.7.abc")


def test_a_handle_of_another_group_goes_back_to_it() -> None:
    directory = BrokerDirectory(HOME)
    directory.learn_queues([queue("broker-a", HOME), queue("broker-b", OTHER)])
    assert directory.several
    assert directory.endpoints() == [HOME, OTHER]
    out = directory.handle_out(OTHER, "1.3.def")
    assert out == "broker-b|1.3.def"
    assert directory.handle_in(out) == (OTHER, "1.3.def")
    assert directory.handle_out(HOME, "1.3.def") == "1.3.def"
    assert directory.handle_in("broker-z|1.3.def") == (HOME, "broker-z|1.3.def")
    assert directory.handle_in("1.3.def") == (HOME, "1.3.def")


def test_a_group_served_elsewhere_is_learned_again() -> None:
    moved = Endpoint("127.0.0.1", 8083)
    directory = BrokerDirectory(HOME)
    directory.learn_queues([queue("broker-a", HOME), queue("broker-b", OTHER)])
    directory.learn_queues([queue("broker-b", moved)])
    assert directory.known("broker-b") == moved
    assert directory.endpoints() == [HOME, moved]
    assert directory.handle_in(directory.handle_out(moved, "h")) == (moved, "h")


def test_slaves_are_not_learned() -> None:
    directory = BrokerDirectory(HOME)
    directory.learn_queues([queue("broker-b", OTHER, broker_id=1)])
    assert directory.known("broker-b") is None


def test_an_unknown_name_is_looked_up_once_in_the_topic_route() -> None:
    asked: list[str] = []

    async def lookup(topic: pb.Resource) -> list[pb.MessageQueue]:
        asked.append(topic.name)
        return [queue("broker-a", HOME), queue("broker-b", OTHER)]

    async def resolve() -> tuple[Endpoint, Endpoint, Endpoint]:
        directory = BrokerDirectory(HOME)
        directory.set_lookup(lookup)
        topic = pb.Resource(name="Orders")
        return (
            await directory.resolve("broker-b", topic),
            await directory.resolve("broker-b", topic),
            await directory.resolve("", topic),
        )

    assert asyncio.run(resolve()) == (OTHER, OTHER, HOME)
    assert asked == ["Orders"]


def test_the_directory_keeps_at_most_its_limit_of_names() -> None:
    directory = BrokerDirectory(HOME)
    directory.learn_queues(
        queue(f"broker-{i}", Endpoint("127.0.0.1", 10_000 + i)) for i in range(BROKERS_MAX + 5)
    )
    assert len(directory.endpoints()) == BROKERS_MAX + 1  # home first, then the names kept
    assert directory.known("broker-0") is None
    assert directory.known(f"broker-{BROKERS_MAX + 4}") is not None
