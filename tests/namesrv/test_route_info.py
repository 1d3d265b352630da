"""The route table (namesrv/route_info.py, RocketMQ's RouteInfoManager) on its own, its clock
in the test's hand.

Proves: registrations of masters of two groups route a topic across both, each group with its
brokers by id; a slave's answer names its group's master and that master's HA address (none
while the group has no master); a broker silent past the expiry is dropped, a master leaving its
slave and its group's queues in place, the group's last broker taking the queues with it; a
topic a master no longer lists leaves its group's routes, while a slave only fills in what its
group lacks; a broker restarted on a new address replaces its old entry; the table refuses a
broker beyond its limit; an emptied table (a restarted NameServer) is filled again by the next
registrations.
"""

from __future__ import annotations

import pytest

from namesrv.errors import BrokersFullError
from namesrv.route_info import (
    BrokerRegistration,
    Permission,
    QueueData,
    RouteInfoManager,
)

EXPIRY_MS = 120_000


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def registration(
    broker_name: str,
    broker_id: int = 0,
    port: int = 10911,
    topics: tuple[str, ...] = ("T",),
    ha: str | None = None,
) -> BrokerRegistration:
    role = "ASYNC_MASTER" if broker_id == 0 else "SLAVE"
    perm = Permission.READ_WRITE if broker_id == 0 else Permission.READ
    return BrokerRegistration(
        cluster_name="DefaultCluster",
        broker_name=broker_name,
        broker_id=broker_id,
        broker_addr=f"127.0.0.1:{port}",
        ha_server_addr=ha,
        role=role,
        topics=tuple(QueueData(t, broker_name, 4, perm, "MIXED") for t in topics),
        max_phy_offset=0,
        data_version=(0, 0),
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def routes(clock: Clock) -> RouteInfoManager:
    return RouteInfoManager(brokers_max=8, clock_ms=clock)


def addrs(routes: RouteInfoManager, topic: str = "T") -> dict[str, dict[int, str]]:
    route = routes.topic_route(topic)
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == [b.broker_name for b in route.broker_datas]
    return {b.broker_name: b.broker_addrs for b in route.broker_datas}


def test_masters_of_two_groups_route_a_topic_across_both(routes: RouteInfoManager) -> None:
    routes.register_broker(registration("broker-a", port=1))
    routes.register_broker(registration("broker-b", port=2, topics=("T", "U")))
    assert addrs(routes) == {"broker-a": {0: "127.0.0.1:1"}, "broker-b": {0: "127.0.0.1:2"}}
    assert addrs(routes, "U") == {"broker-b": {0: "127.0.0.1:2"}}
    assert routes.topic_route("Unknown") is None
    assert routes.cluster_addr_table == {"DefaultCluster": {"broker-a", "broker-b"}}


def test_a_slaves_answer_names_its_master_and_its_ha_address(routes: RouteInfoManager) -> None:
    alone = routes.register_broker(registration("broker-a", 1, port=2))
    assert (alone.master_addr, alone.ha_server_addr) == (None, None)
    master = routes.register_broker(registration("broker-a", 0, port=1, ha="127.0.0.1:9"))
    assert (master.master_addr, master.ha_server_addr) == (None, None)
    slave = routes.register_broker(registration("broker-a", 1, port=2))
    assert (slave.master_addr, slave.ha_server_addr) == ("127.0.0.1:1", "127.0.0.1:9")
    assert addrs(routes) == {"broker-a": {0: "127.0.0.1:1", 1: "127.0.0.1:2"}}


def test_a_silent_master_is_dropped_and_leaves_its_slave_and_the_queues(
    routes: RouteInfoManager, clock: Clock
) -> None:
    routes.register_broker(registration("broker-a", 0, port=1))
    routes.register_broker(registration("broker-a", 1, port=2))
    clock.now_ms += EXPIRY_MS  # at the expiry, not past it: both stay
    assert routes.scan_not_active_broker(EXPIRY_MS) == []
    routes.register_broker(registration("broker-a", 1, port=2))  # the slave alone keeps on
    clock.now_ms += 1
    dropped = routes.scan_not_active_broker(EXPIRY_MS)
    assert [d.registration.broker_addr for d in dropped] == ["127.0.0.1:1"]
    assert addrs(routes) == {"broker-a": {1: "127.0.0.1:2"}}
    clock.now_ms += EXPIRY_MS + 1
    assert len(routes.scan_not_active_broker(EXPIRY_MS)) == 1
    assert routes.topic_route("T") is None  # the group's last broker took its queues
    assert routes.broker_addr_table == {}
    assert routes.cluster_addr_table == {}
    assert routes.live_broker_count() == 0


def test_a_master_is_the_truth_of_its_groups_topics_a_slave_only_fills_in(
    routes: RouteInfoManager,
) -> None:
    routes.register_broker(registration("broker-a", 0, port=1, topics=("T", "U")))
    routes.register_broker(registration("broker-a", 0, port=1, topics=("T",)))
    assert routes.topic_route("U") is None  # deleted on the master: gone from the routes
    routes.register_broker(registration("broker-a", 1, port=2, topics=("T", "V")))
    t = routes.topic_route("T")
    assert t is not None
    assert t.queue_datas[0].perm is Permission.READ_WRITE  # the master's, not the slave's READ
    assert addrs(routes, "V") == {"broker-a": {0: "127.0.0.1:1", 1: "127.0.0.1:2"}}


def test_unregister_and_a_restart_on_a_new_address(routes: RouteInfoManager) -> None:
    routes.register_broker(registration("broker-a", port=1))
    routes.register_broker(registration("broker-a", port=3))  # restarted elsewhere
    assert addrs(routes) == {"broker-a": {0: "127.0.0.1:3"}}
    assert routes.live_broker_count() == 1
    assert not routes.unregister_broker("broker-a", 0, "127.0.0.1:1")  # the old address
    assert not routes.unregister_broker("broker-b", 0, "127.0.0.1:3")  # not this broker
    assert routes.unregister_broker("broker-a", 0, "127.0.0.1:3")
    assert routes.topic_route("T") is None


def test_a_broker_beyond_the_limit_is_refused(clock: Clock) -> None:
    routes = RouteInfoManager(brokers_max=1, clock_ms=clock)
    routes.register_broker(registration("broker-a", port=1))
    routes.register_broker(registration("broker-a", port=1))  # known: refreshed, not refused
    with pytest.raises(BrokersFullError, match=r"brokers_max"):
        routes.register_broker(registration("broker-b", port=2))


def test_an_emptied_table_is_filled_again_by_the_next_registrations(clock: Clock) -> None:
    first = RouteInfoManager(brokers_max=8, clock_ms=clock)
    regs = [registration("broker-a", port=1), registration("broker-b", port=2)]
    for reg in regs:
        first.register_broker(reg)
    restarted = RouteInfoManager(brokers_max=8, clock_ms=clock)  # soft state: nothing kept
    assert restarted.topic_route("T") is None
    for reg in regs:
        restarted.register_broker(reg)
    assert addrs(restarted) == addrs(first)
