"""Telemetry streams held to the ACL (broker/grpc_service/stream_access.py), over the broker's
own table, access layer and client registry.

Proves: a transaction's check-back candidates are the producers whose user may PUB on its topic
at the time of the check, so a right revoked, a DENY granted, a user deleted or changed (new
secret) takes a producer out at once, even before any stream is ended, while an admin and
streams opened without authentication stay in; ``end_refused`` ends exactly the streams the
table would now refuse, UNAUTHENTICATED for a user deleted or changed, PERMISSION_DENIED for a
right a producer's or a consumer's Settings need, naming the user and the right, and counts
each; the registry then forgets them, and an unchanged user's stream stays open.
"""

from __future__ import annotations

import grpc
from prometheus_client import CollectorRegistry, Counter
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.auth.acl import Acl, Action, Decision, ResourcePattern, User
from broker.grpc_service.access import Access
from broker.grpc_service.client_registry import ClientRegistry, ClientSession
from broker.grpc_service.stream_access import StreamAccess

TOPIC = "TT"
PUB = frozenset({Action.PUB})
SUB = frozenset({Action.SUB})


def publishing(topic: str) -> pb.Settings:
    return pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)])
    )


def subscribing(group: str, topic: str) -> pb.Settings:
    return pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=topic))],
        ),
    )


class World:
    """Users tx1, tx2 (PUB on TT), reader (SUB on TT and group readers), root (an admin), each
    with an open stream; a stream opened without authentication."""

    def __init__(self) -> None:
        self.users = {
            name: User(name, f"{name}-secret-key".encode(), admin=name == "root")
            for name in ("tx1", "tx2", "reader", "root")
        }
        self.acl = Acl(self.users)
        for name in ("tx1", "tx2"):
            self.acl.grant(name, ResourcePattern.parse(f"Topic:{TOPIC}"), PUB, Decision.ALLOW)
        for resource in (f"Topic:{TOPIC}", "Group:readers"):
            self.acl.grant("reader", ResourcePattern.parse(resource), SUB, Decision.ALLOW)
        self.metrics = CollectorRegistry()
        self.refusals = Counter("refusals", "", ["method", "code"], registry=self.metrics)
        self.clients = ClientRegistry(outbound_max=8)
        self.streams = StreamAccess(self.acl, Access(self.acl, None, self.refusals), self.clients)
        self.streams.install()
        self.sessions = {
            name: self.open(name, self.users[name], publishing(TOPIC))
            for name in ("tx1", "tx2", "root")
        }
        self.sessions["reader"] = self.open(
            "reader", self.users["reader"], subscribing("readers", TOPIC)
        )
        self.sessions["anonymous"] = self.open("anonymous", None, publishing(TOPIC))

    def open(self, client_id: str, user: User | None, settings: pb.Settings) -> ClientSession:
        session = self.clients.open(client_id, user)
        session.settings = settings
        return session

    def asked(self) -> set[str]:
        return {s.client_id for s in self.clients.producers_of(TOPIC)}

    def end_of(self, name: str) -> tuple[grpc.StatusCode, str]:
        end = self.sessions[name].end
        assert end is not None, f"{name}'s stream was not ended"
        return end.code, end.details

    def refused(self, code: str) -> float:
        value = self.metrics.get_sample_value(
            "refusals_total", {"method": "Telemetry", "code": code}
        )
        return value or 0.0


def test_check_backs_go_to_producers_allowed_at_the_time_of_the_check() -> None:
    world = World()
    assert world.asked() == {"tx1", "tx2", "root", "anonymous"}
    world.acl.revoke("tx1", ResourcePattern.parse(f"Topic:{TOPIC}"), PUB)
    assert world.asked() == {"tx2", "root", "anonymous"}
    world.acl.grant("tx2", ResourcePattern.parse("Topic:T*"), PUB, Decision.ALLOW)
    world.acl.grant("tx2", ResourcePattern.parse(f"Topic:{TOPIC}"), PUB, Decision.DENY)
    assert world.asked() == {"root", "anonymous"}
    world.acl.grant("tx2", ResourcePattern.parse(f"Topic:{TOPIC}"), PUB, Decision.ALLOW)
    assert world.asked() == {"tx2", "root", "anonymous"}
    world.acl.put_user(User("tx2", b"a-new-secret-key"))  # the stream's secret is no longer
    world.acl.delete_user("root")
    assert world.asked() == {"anonymous"}


def test_end_refused_ends_the_streams_the_table_now_refuses_and_no_other() -> None:
    world = World()
    assert world.streams.end_refused() == 0
    world.acl.revoke("tx1", ResourcePattern.parse(f"Topic:{TOPIC}"), PUB)
    world.acl.revoke("reader", ResourcePattern.parse("Group:readers"), SUB)
    world.acl.delete_user("tx2")
    assert world.streams.end_refused() == 3
    ended = {name for name, s in world.sessions.items() if s.ending.is_set()}
    assert ended == {"tx1", "tx2", "reader"}
    assert world.end_of("tx1") == (
        grpc.StatusCode.PERMISSION_DENIED,
        "the ACL changed: user 'tx1' has no PUB right on Topic:TT",
    )
    assert world.end_of("reader") == (
        grpc.StatusCode.PERMISSION_DENIED,
        "the ACL changed: user 'reader' has no SUB right on Group:readers",
    )
    assert world.end_of("tx2") == (
        grpc.StatusCode.UNAUTHENTICATED,
        "the ACL changed: user 'tx2' was deleted",
    )
    assert world.refused("PERMISSION_DENIED") == 2
    assert world.refused("UNAUTHENTICATED") == 1
    assert {s.client_id for s in world.clients.sessions()} == {"root", "anonymous"}
    # A user replaced with another secret: its stream was authenticated with the old one.
    world.acl.put_user(User("root", b"another-root-secret", admin=True))
    assert world.streams.end_refused() == 1
    code, details = world.end_of("root")
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "user 'root' changed (its secret key or admin flag)" in details
    assert world.streams.end_refused() == 0
