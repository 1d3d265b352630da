"""Groups, configs and retries across a real cluster: a NameServer and two broker groups, each a
SYNC_MASTER and its slave, all real processes, started once for the module; the official Python
clients send and consume.

Proves, in the module's order:

- routes interleave the groups' queues, so the official Producer's retry on the next queue
  leaves the group that failed it;
- ``rocketbox group create --broadcast --namesrv`` creates the group on every master (again:
  each says it exists; with other settings: refused, exit 1), the slaves take it with its
  consume model, and two official PushConsumers each consume every message of both groups;
  ``group delete --namesrv`` deletes it everywhere, slaves included; ``group delete --broker``
  deletes on one broker, refuses while a consumer of the group is connected, and an unknown
  group is NOT_FOUND;
- a topic created on broker-a a moment before its master is SIGKILLed, with 12 messages
  acknowledged by the SYNC_MASTER, is known to the slave as soon as the sends return (its master
  sends configs ahead of the bytes that need them; the periodic sync is 10 s), and all 12 are
  consumed through the cluster from the slave; meanwhile 24 sends of a Producer that had the
  route before the kill all succeed, none failing on the dead group.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    PushConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.grpc_service.route_activity import interleaved
from rocketbox.admin_client import AdminCallError, AdminClient
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import message, producer
from tests.cluster.processes import Cluster, ClusterBroker, running_cluster
from tests.cluster.test_cluster import CONSUMER_ARGS, query_route, rocketbox
from tests.cluster.test_failover import slaves_connected
from tests.rocketbox_process import wait_until

pytestmark = pytest.mark.slow

SPREAD = "Spread"  # on both groups, from the start
QUEUES = 4
FRESH = "Fresh"  # created on broker-a alone, just before its master dies
FRESH_MESSAGES = 12
SENDS_WHILE_DOWN = 24
BROADCAST_MESSAGES = 20
MASTER_ARGS = (
    "--ha-listen=127.0.0.1:0", "--broker-role=SYNC_MASTER", "--sync-flush-timeout-ms=3000",
    f"--topic={SPREAD}:{QUEUES}:NORMAL", *CONSUMER_ARGS,
)  # fmt: skip
DEADLINE_S = 30.0
LOG = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    with running_cluster(
        root, groups=2, slaves=1, master_args=MASTER_ARGS, slave_args=CONSUMER_ARGS
    ) as c:
        wait_until(lambda: slaves_connected(c), DEADLINE_S, "every master's slave")
        wait_until(
            lambda: (
                {q.broker.name for q in query_route(c.broker("broker-b").endpoint, SPREAD)}
                == {"broker-a", "broker-b"}
            ),
            DEADLINE_S,
            f"both groups in {SPREAD}'s route",
        )
        yield c


def test_interleaved_alternates_groups_while_each_has_queues() -> None:
    a = [pb.MessageQueue(id=i, broker=pb.Broker(name="a")) for i in range(3)]
    b = [pb.MessageQueue(id=i, broker=pb.Broker(name="b")) for i in range(1)]
    order = [(q.broker.name, q.id) for q in interleaved([a, b])]
    assert order == [("a", 0), ("b", 0), ("a", 1), ("a", 2)]
    assert interleaved([]) == []


def test_a_routes_neighbouring_queues_are_on_different_groups(cluster: Cluster) -> None:
    names = [q.broker.name for q in query_route(cluster.broker("broker-a").endpoint, SPREAD)]
    assert len(names) == 2 * QUEUES
    assert all(x != y for x, y in itertools.pairwise(names)), names


class Counter(MessageListener):  # type: ignore[misc]  # the official client ships no type information
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[str] = []

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.ids.append(message.message_id)
        return ConsumeResult.SUCCESS

    def seen(self) -> list[str]:
        with self.lock:
            return list(self.ids)


def group_models(endpoint: str) -> dict[str, bool]:
    """group name → broadcast, as the broker's group table has it."""
    with AdminClient(endpoint) as admin:
        return {g.name: g.broadcast for g in admin.list_groups().groups}


def broadcasting(endpoint: str) -> bool:
    return group_models(endpoint).get("Fans") is True


def on_each(brokers: list[ClusterBroker], check: Callable[[str], bool], what: str) -> None:
    """Wait until ``check(endpoint)`` holds for each of ``brokers``."""
    for b in brokers:
        where = f"{what} on {b.broker_name}-{b.broker_id}"
        wait_until(functools.partial(check, b.endpoint), DEADLINE_S, where)


def connected_members(endpoint: str, group: str) -> int:
    with AdminClient(endpoint) as admin:
        try:
            return len(admin.describe_group(group).members)
        except AdminCallError:
            return 0


def test_a_broadcast_group_created_through_the_namesrv_reaches_every_consumer(
    cluster: Cluster,
) -> None:
    ns = cluster.namesrv.endpoint
    created = rocketbox("group", "create", "Fans", "--broadcast", "--namesrv", ns, "--json")
    assert created.returncode == 0, created.stderr
    answer = json.loads(created.stdout)
    assert answer["cluster"] == "DefaultCluster"
    assert answer["group"]["broadcast"] is True
    assert [(b["broker_name"], b["outcome"]) for b in answer["brokers"]] == [
        ("broker-a", "created"),
        ("broker-b", "created"),
    ]
    again = rocketbox("group", "create", "Fans", "--broadcast", "--namesrv", ns)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("exists: with the same settings") == 2, again.stdout
    other = rocketbox("group", "create", "Fans", "--namesrv", ns)
    assert other.returncode == 1, other
    assert "exists with other settings: concurrent, retry_max_times 16, broadcasting" in (
        other.stdout
    )
    assert "not created on 2 of 2 masters of cluster DefaultCluster" in other.stderr
    # Each master hands the group, consume model included, to its slave.
    on_each(cluster.brokers, broadcasting, "Fans broadcasting")

    counters = [Counter(), Counter()]
    started: list[PushConsumer] = []
    endpoint = cluster.broker("broker-a").endpoint
    try:
        for counter in counters:
            c = PushConsumer(
                ClientConfiguration(endpoint, Credentials()),
                "Fans",
                counter,
                {SPREAD: FilterExpression("*")},
            )
            c.startup()
            started.append(c)
        with producer(endpoint, (SPREAD,)) as p:
            sent = {
                p.send(message(SPREAD, f"fan {i}".encode())).message_id
                for i in range(BROADCAST_MESSAGES)
            }
        wait_until(
            lambda: all(set(c.seen()) >= sent for c in counters),
            DEADLINE_S,
            f"each push consumer consumed all {BROADCAST_MESSAGES}",
        )
    finally:
        for c in started:
            c.shutdown()
    for counter in counters:
        assert sorted(counter.seen()) == sorted(sent), "each member: every message, once"
    on_each(cluster.masters, lambda e: connected_members(e, "Fans") == 0, "no Fans consumer")

    deleted = rocketbox("group", "delete", "Fans", "--namesrv", ns)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.count("  deleted") == 2, deleted.stdout
    on_each(cluster.brokers, lambda e: "Fans" not in group_models(e), "Fans deleted")
    gone = rocketbox("group", "delete", "Fans", "--namesrv", ns)
    assert gone.returncode == 1, gone
    assert "is on none of the 2 masters" in gone.stderr


def test_group_delete_on_one_broker_and_its_refusals(cluster: Cluster) -> None:
    a = cluster.broker("broker-a").endpoint
    created = rocketbox("group", "create", "Solo", "--broker", a)
    assert created.returncode == 0, created.stderr
    with simple_consumer(a, "Solo", SPREAD, await_s=1):
        wait_until(lambda: connected_members(a, "Solo") == 1, DEADLINE_S, "Solo's consumer")
        refused = rocketbox("group", "delete", "Solo", "--broker", a)
        assert refused.returncode == 1, refused
        assert "FAILED_PRECONDITION" in refused.stderr
        assert "has consumers connected (1)" in refused.stderr
    wait_until(lambda: connected_members(a, "Solo") == 0, DEADLINE_S, "Solo's consumer gone")
    deleted = rocketbox("group", "delete", "Solo", "--broker", a, "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["name"] == "Solo"
    unknown = rocketbox("group", "delete", "Solo", "--broker", a)
    assert unknown.returncode == 1, unknown
    assert "NOT_FOUND" in unknown.stderr
    slave = cluster.broker("broker-a", 1).endpoint
    on_slave = rocketbox("group", "delete", "Anything", "--broker", slave)
    assert on_slave.returncode == 1, on_slave
    assert "FAILED_PRECONDITION" in on_slave.stderr


def topics_of(endpoint: str) -> set[str]:
    with AdminClient(endpoint) as admin:
        return {t.name for t in admin.list_topics().topics}


def stored(endpoint: str, topic: str) -> int:
    with AdminClient(endpoint) as admin:
        queues = admin.describe_topic(topic).queues
    return sum(q.max_queue_offset - q.min_queue_offset for q in queues)


def routed_at(endpoint: str, topic: str, port: int) -> bool:
    return {q.broker.endpoints.addresses[0].port for q in query_route(endpoint, topic)} == {port}


def test_a_topic_made_just_before_its_master_died_is_read_at_the_slave_and_sends_go_on(
    cluster: Cluster,
) -> None:
    a0, a1, b0 = (
        cluster.broker("broker-a"), cluster.broker("broker-a", 1), cluster.broker("broker-b")
    )  # fmt: skip
    with AdminClient(a0.endpoint) as admin:
        admin.create_topic(FRESH, 2, "NORMAL")  # on broker-a alone
    wait_until(lambda: cluster.namesrv.route(FRESH) is not None, DEADLINE_S, f"{FRESH} routed")
    with producer(a0.endpoint, (FRESH,)) as p:
        fresh = {
            p.send(message(FRESH, f"fresh {i}".encode())).message_id for i in range(FRESH_MESSAGES)
        }
    # SYNC_MASTER: each send was answered once the slave held it, and the topic came first.
    assert FRESH in topics_of(a1.endpoint)
    failures: list[str] = []
    with producer(b0.endpoint, (SPREAD,)) as p:
        p.send(message(SPREAD, b"warm-up"))  # the route, both masters in it, is the client's
        on_b_before = stored(b0.endpoint, SPREAD)
        a0.process.kill()
        killed_s = time.monotonic()
        for i in range(SENDS_WHILE_DOWN):
            try:
                p.send(message(SPREAD, f"while down {i}".encode()))
            except Exception as e:  # the official client raises its own kinds
                failures.append(f"{type(e).__name__}: {e}")
    assert not failures, f"{len(failures)} of {SENDS_WHILE_DOWN} sends failed: {failures[:3]}"
    assert stored(b0.endpoint, SPREAD) == on_b_before + SENDS_WHILE_DOWN

    wait_until(
        lambda: routed_at(b0.endpoint, FRESH, a1.process.port),
        DEADLINE_S,
        f"{FRESH} routed READ at broker-a's slave",
    )
    with simple_consumer(b0.endpoint, "FreshReaders", FRESH, await_s=1) as c:
        got = {m.message_id for m in receive_all(c, FRESH_MESSAGES)}
    read_after_s = time.monotonic() - killed_s
    assert got == fresh
    LOG.info("all %s read at the slave %.1f s after the kill", FRESH_MESSAGES, read_after_s)
