"""A real cluster: one ``rocketbox namesrv`` and broker groups of real ``rocketbox broker``
processes registered with it, driven by the unmodified official Python client.

Proves: any broker's QueryRoute answers the topic's queues across every group of the cluster,
each at its own broker, so a producer's sends land on both groups and a SimpleConsumer asking one
broker consumes every message, and QueryAssignment hands out both groups' queues; ``rocketbox
cluster list`` shows both brokers (``--json`` parses; an unreachable NameServer exits 3);
``rocketbox message get --namesrv`` finds a message whichever group holds it (and exits 1 when
none does); a broker killed with SIGKILL leaves the routes after the NameServer's expiry; a group
whose master is gone is routed READ only at its slave, which learned its master from its
registration's answer; a topic the cluster does not know is auto-created on the broker asked,
routed at once, and created on the cluster's other masters too.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from rocketbox.admin_client import AdminClient
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import message, producer
from tests.cluster.processes import Cluster, ClusterBroker, running_cluster
from tests.rocketbox_process import REPO_ROOT, wait_until

pytestmark = pytest.mark.slow

TOPIC = "ClusterTopic"
QUEUES = 4
MESSAGES = 40
# What the official client's receive asks (tests/broker/grpc_service/test_consumer.py): an
# invisible time of 2 s, under the broker's 10 s minimum unless lowered.
CONSUMER_ARGS = ("--invisible-duration-min-ms=1000", "--long-polling-timeout-ms=2000")
DEADLINE_S = 30.0
CLI_TIMEOUT_S = 60.0


def query_route(endpoint: str, topic: str = TOPIC) -> list[pb.MessageQueue]:
    with grpc.insecure_channel(endpoint) as channel:
        answer = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=5.0
        )
    assert answer.status.code == pb.OK, answer.status
    return list(answer.message_queues)


def groups_routed(endpoint: str) -> dict[str, tuple[int, int, int]]:
    """broker name → (queues, the port they are at, their permission), from QueryRoute."""
    seen: dict[str, tuple[int, int, int]] = {}
    for q in query_route(endpoint):
        count = seen.get(q.broker.name, (0, 0, 0))[0]
        seen[q.broker.name] = (count + 1, q.broker.endpoints.addresses[0].port, q.permission)
    return seen


def assigned_groups(endpoint: str) -> dict[str, int]:
    """broker name → how many of its queues QueryAssignment hands out."""
    with grpc.insecure_channel(endpoint) as channel:
        answer = service_pb2_grpc.MessagingServiceStub(channel).QueryAssignment(
            spb.QueryAssignmentRequest(
                topic=pb.Resource(name=TOPIC), group=pb.Resource(name="ClusterGroup")
            ),
            timeout=5.0,
        )
    assert answer.status.code == pb.OK, answer.status
    counts: dict[str, int] = {}
    for a in answer.assignments:
        counts[a.message_queue.broker.name] = counts.get(a.message_queue.broker.name, 0) + 1
    return counts


def namesrv_has_groups(cluster: Cluster, names: set[str]) -> bool:
    route = cluster.namesrv.route(TOPIC)
    return route is not None and {q.broker_name for q in route.queue_datas} == names


def stored_count(endpoint: str) -> int:
    with AdminClient(endpoint) as admin:
        queues = admin.describe_topic(TOPIC).queues
    return sum(q.max_queue_offset - q.min_queue_offset for q in queues)


def rocketbox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocketbox", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def test_sends_spread_over_both_groups_and_one_consumer_gets_every_message(
    tmp_path: Path,
) -> None:
    args = [f"--topic={TOPIC}:{QUEUES}", *CONSUMER_ARGS]
    with running_cluster(tmp_path, master_args=args) as cluster:
        a, b = cluster.broker("broker-a"), cluster.broker("broker-b")
        wait_until(
            lambda: namesrv_has_groups(cluster, {"broker-a", "broker-b"}),
            DEADLINE_S,
            "both groups in the topic's route",
        )
        # Asked of broker-a alone, the route names both groups, each at its own broker.
        assert groups_routed(a.endpoint) == {
            "broker-a": (QUEUES, a.process.port, pb.READ_WRITE),
            "broker-b": (QUEUES, b.process.port, pb.READ_WRITE),
        }
        assert assigned_groups(b.endpoint) == {"broker-a": QUEUES, "broker-b": QUEUES}
        with producer(a.endpoint, (TOPIC,)) as p:
            sent = {p.send(message(TOPIC, f"m{i}".encode())).message_id for i in range(MESSAGES)}
        assert len(sent) == MESSAGES
        on_a, on_b = stored_count(a.endpoint), stored_count(b.endpoint)
        assert on_a > 0, (on_a, on_b)
        assert on_b > 0, (on_a, on_b)
        assert on_a + on_b == MESSAGES
        with simple_consumer(a.endpoint, "ClusterGroup", TOPIC, await_s=1) as c:
            got = {m.message_id for m in receive_all(c, MESSAGES)}
        assert got == sent

        listed = rocketbox("cluster", "list", "--namesrv", cluster.namesrv.endpoint)
        assert listed.returncode == 0, listed.stderr
        for broker in (a, b):
            assert f"{broker.broker_name}  0   ASYNC_MASTER  {broker.endpoint}" in listed.stdout
        as_json = rocketbox("cluster", "list", "--namesrv", cluster.namesrv.endpoint, "--json")
        assert as_json.returncode == 0, as_json.stderr
        rows = json.loads(as_json.stdout)["brokers"]
        assert {(r["group"], r["broker_id"], r["address"]) for r in rows} == {
            ("broker-a", 0, a.endpoint),
            ("broker-b", 0, b.endpoint),
        }
        assert all(r["max_offset"] > 0 and r["replication_lag_bytes"] is None for r in rows)

        # A message only broker-b holds, found through the NameServer by a tool aimed at a.
        found = rocketbox(
            "message", "get", "--namesrv", cluster.namesrv.endpoint, "--json", _held_by(b, sent)
        )
        assert found.returncode == 0, found.stderr
        assert len(json.loads(found.stdout)["messages"]) == 1
        missing = rocketbox("message", "get", "--namesrv", cluster.namesrv.endpoint, "0" * 32)
        assert missing.returncode == 1, missing
        assert "is in none of the 2 broker groups" in missing.stderr


def test_cluster_list_exits_3_when_the_namesrv_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    done = rocketbox("cluster", "list", "--namesrv", f"127.0.0.1:{port}", "--deadline-s", "2")
    assert done.returncode == 3, done
    assert f"NameServer 127.0.0.1:{port} is unreachable: UNAVAILABLE" in done.stderr


def _held_by(broker: object, sent: set[str]) -> str:

    assert isinstance(broker, ClusterBroker)
    with AdminClient(broker.endpoint) as admin:
        for message_id in sorted(sent):
            try:
                admin.get_message(message_id)
            except Exception:
                continue
            return message_id
    raise AssertionError(f"{broker.broker_name} holds none of the messages")


def test_a_killed_broker_leaves_the_routes_after_the_expiry(tmp_path: Path) -> None:
    args = [f"--topic={TOPIC}:{QUEUES}", "--auto-create-topic"]
    with running_cluster(tmp_path, master_args=args) as cluster:
        a, b = cluster.broker("broker-a"), cluster.broker("broker-b")
        wait_until(
            lambda: set(groups_routed(a.endpoint)) == {"broker-a", "broker-b"},
            DEADLINE_S,
            "both groups in broker-a's QueryRoute",
        )
        # A topic the cluster does not know is created on the broker asked, which registers
        # it before it answers: the NameServer routes it at once. The broker also creates it
        # on the cluster's other masters (cluster_topics.py), which register it themselves.
        assert "broker-b" in {q.broker.name for q in query_route(b.endpoint, "AutoTopic")}
        wait_until(
            lambda: (
                {q.broker.name for q in query_route(b.endpoint, "AutoTopic")}
                == {"broker-a", "broker-b"}
            ),
            DEADLINE_S,
            "AutoTopic created on both masters",
        )
        b.process.signal(signal.SIGKILL)
        b.process.wait_exit(DEADLINE_S)
        wait_until(
            lambda: set(groups_routed(a.endpoint)) == {"broker-a"},
            DEADLINE_S,
            "broker-b gone from broker-a's QueryRoute",
        )
        assert cluster.namesrv.live_brokers() == {("broker-a", 0)}


def test_a_group_whose_master_is_gone_is_read_at_its_slave(tmp_path: Path) -> None:
    topic_arg = [f"--topic={TOPIC}:{QUEUES}"]
    with running_cluster(
        tmp_path, groups=1, slaves=1, master_args=topic_arg, slave_args=topic_arg
    ) as cluster:
        master, slave = cluster.broker("broker-a", 0), cluster.broker("broker-a", 1)
        wait_until(
            lambda: cluster.namesrv.live_brokers() == {("broker-a", 0), ("broker-a", 1)},
            DEADLINE_S,
            "master and slave registered",
        )
        wait_until(
            lambda: f"the group's master is now {master.endpoint}" in slave.process.output(),
            DEADLINE_S,
            "the slave told its master by its registration's answer",
        )
        assert groups_routed(slave.endpoint) == {
            "broker-a": (QUEUES, master.process.port, pb.READ_WRITE)
        }
        master.process.signal(signal.SIGKILL)
        master.process.wait_exit(DEADLINE_S)
        wait_until(
            lambda: (
                groups_routed(slave.endpoint) == {"broker-a": (QUEUES, slave.process.port, pb.READ)}
            ),
            DEADLINE_S,
            "broker-a routed READ only at its slave",
        )
        wait_until(
            lambda: "the group's master is now None" in slave.process.output(),
            DEADLINE_S,
            "the slave told its master is gone",
        )
