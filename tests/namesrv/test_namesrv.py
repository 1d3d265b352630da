"""A real ``rocketbox namesrv`` process: its gRPC API, its expiry, and its command line.

Proves: registrations of two masters and a slave give routes across both groups, the slave's
answer naming its master and HA address, and the cluster's brokers with their figures;
UnregisterBroker takes a broker out at once; bad registrations are refused INVALID_ARGUMENT
naming the field and the limit, an unknown topic NOT_FOUND; a broker that stops registering is
dropped after the (short) expiry and counted in the metrics; a real broker whose NameServer is
down starts all the same, says so, and registers once the NameServer is up; a restarted
NameServer (soft state) is filled again by the broker's next registrations; a broker stopped
cleanly leaves at once (it unregisters); a taken port exits 2 with one line; --help names the
options.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb
from rocketbox_api.namesrv.v1 import namesrv_pb2_grpc
from tests.cluster.processes import NamesrvProcess, cluster_broker
from tests.prometheus import sample, scrape
from tests.rocketbox_process import REPO_ROOT, wait_until

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
CALL_DEADLINE_S = 5.0


@pytest.fixture
def namesrv() -> Iterator[NamesrvProcess]:
    # Long enough an expiry that registrations made by hand stay within it.
    process = NamesrvProcess(expiry_ms=120_000).start()
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.output()  # SIGTERM: a clean stop
    assert "rocketbox namesrv stopped cleanly" in process.output()


@pytest.fixture
def stub(namesrv: NamesrvProcess) -> Iterator[namesrv_pb2_grpc.NameServerServiceStub]:
    with grpc.insecure_channel(namesrv.endpoint) as channel:
        yield namesrv_pb2_grpc.NameServerServiceStub(channel)


def request(
    broker_name: str, broker_id: int = 0, port: int = 10911, ha: str = ""
) -> npb.RegisterBrokerRequest:
    role = npb.BROKER_ROLE_ASYNC_MASTER if broker_id == 0 else npb.BROKER_ROLE_SLAVE
    return npb.RegisterBrokerRequest(
        cluster_name="DefaultCluster",
        broker_name=broker_name,
        broker_id=broker_id,
        broker_addr=f"127.0.0.1:{port}",
        ha_server_addr=ha,
        role=role,
        topics=[
            npb.TopicConfig(
                topic_name="T",
                queue_nums=4,
                perm=npb.PERMISSION_READ_WRITE,
                message_type=npb.MESSAGE_TYPE_NORMAL,
            )
        ],
        max_phy_offset=1000 if broker_id == 0 else 400,
    )


def test_registrations_route_across_groups_and_a_slave_learns_its_master(
    stub: namesrv_pb2_grpc.NameServerServiceStub,
) -> None:
    stub.RegisterBroker(request("broker-a", 0, 1, ha="127.0.0.1:9"), timeout=CALL_DEADLINE_S)
    stub.RegisterBroker(request("broker-b", 0, 2), timeout=CALL_DEADLINE_S)
    answer = stub.RegisterBroker(request("broker-a", 1, 3), timeout=CALL_DEADLINE_S)
    assert (answer.master_addr, answer.ha_server_addr) == ("127.0.0.1:1", "127.0.0.1:9")

    route = stub.GetRouteInfoByTopic(
        npb.GetRouteInfoByTopicRequest(topic="T"), timeout=CALL_DEADLINE_S
    )
    assert [(q.broker_name, q.queue_nums) for q in route.queue_datas] == [
        ("broker-a", 4),
        ("broker-b", 4),
    ]
    assert {b.broker_name: dict(b.broker_addrs) for b in route.broker_datas} == {
        "broker-a": {0: "127.0.0.1:1", 1: "127.0.0.1:3"},
        "broker-b": {0: "127.0.0.1:2"},
    }
    info = stub.GetBrokerClusterInfo(npb.GetBrokerClusterInfoRequest(), timeout=CALL_DEADLINE_S)
    assert [(b.broker_name, b.broker_id, b.max_phy_offset) for b in info.brokers] == [
        ("broker-a", 0, 1000),
        ("broker-a", 1, 400),
        ("broker-b", 0, 1000),
    ]
    assert all(0 <= info.now_ms - b.last_update_timestamp_ms < 60_000 for b in info.brokers)

    stub.UnregisterBroker(
        npb.UnregisterBrokerRequest(
            cluster_name="DefaultCluster",
            broker_name="broker-b",
            broker_id=0,
            broker_addr="127.0.0.1:2",
        ),
        timeout=CALL_DEADLINE_S,
    )
    route = stub.GetRouteInfoByTopic(
        npb.GetRouteInfoByTopicRequest(topic="T"), timeout=CALL_DEADLINE_S
    )
    assert [q.broker_name for q in route.queue_datas] == ["broker-a"]


def _bad(**fields: object) -> npb.RegisterBrokerRequest:
    r = request("broker-a")
    for name, value in fields.items():
        if name == "queue_nums":
            r.topics[0].queue_nums = int(str(value))
        else:
            setattr(r, name, value)
    return r


@pytest.mark.parametrize(
    ("bad", "details"),
    [
        (_bad(broker_name=""), r"broker_name: '' is not 1\.\.127 characters"),
        (_bad(cluster_name="a b"), r"cluster_name: 'a b' is not 1\.\.127 characters"),
        (_bad(broker_addr="nowhere"), r"broker_addr: 'nowhere' is not HOST:PORT"),
        (_bad(broker_id=1), r"role: ASYNC_MASTER with broker_id 1"),
        (_bad(role=npb.BROKER_ROLE_UNSPECIFIED), r"role: ASYNC_MASTER, SYNC_MASTER or SLAVE"),
        (_bad(queue_nums=0), r"topics\[0\]\.queue_nums: 0 is outside 1\.\.1024"),
        (_bad(max_phy_offset=-1), r"max_phy_offset: -1 is negative"),
    ],
)
def test_a_bad_registration_is_refused_naming_the_field(
    stub: namesrv_pb2_grpc.NameServerServiceStub, bad: npb.RegisterBrokerRequest, details: str
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        stub.RegisterBroker(bad, timeout=CALL_DEADLINE_S)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert re.search(details, refused.value.details() or ""), refused.value.details()


def test_an_unknown_topic_is_not_found(stub: namesrv_pb2_grpc.NameServerServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        stub.GetRouteInfoByTopic(
            npb.GetRouteInfoByTopicRequest(topic="Nobody"), timeout=CALL_DEADLINE_S
        )
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND


def test_a_broker_that_stops_registering_is_dropped_after_the_expiry() -> None:
    with NamesrvProcess(expiry_ms=300, scan_interval_ms=50, metrics=True) as namesrv:
        with grpc.insecure_channel(namesrv.endpoint) as channel:
            stub = namesrv_pb2_grpc.NameServerServiceStub(channel)
            stub.RegisterBroker(request("broker-a"), timeout=CALL_DEADLINE_S)
        assert namesrv.live_brokers() == {("broker-a", 0)}
        wait_until(lambda: not namesrv.live_brokers(), DEADLINE_S, "broker-a dropped")
        assert namesrv.route("T") is None
        samples = scrape(namesrv.metrics_port)
        assert sample(samples, "rocketbox_namesrv_brokers_evicted_total") == 1
        assert sample(samples, "rocketbox_namesrv_live_brokers") == 0
        registered = sample(
            samples, "rocketbox_namesrv_registrations_total", cluster="DefaultCluster",
            broker="broker-a",
        )  # fmt: skip
        assert registered == 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_broker_outlives_its_namesrv_and_fills_a_restarted_one(tmp_path: Path) -> None:
    namesrv = NamesrvProcess(expiry_ms=120_000)  # a broker leaves by unregistering alone
    namesrv.port = free_port()  # known before it starts: the broker is told it while it is down
    broker = cluster_broker(tmp_path, namesrv, "broker-a", 0, ["--topic=T:2"])
    with broker.process:
        wait_until(
            lambda: (
                f"registering with NameServer {namesrv.endpoint} failed" in broker.process.output()
            ),
            DEADLINE_S,
            "the broker saying its NameServer is down",
        )
        assert broker.process.running()
        with namesrv:
            wait_until(lambda: namesrv.route("T") is not None, DEADLINE_S, "the broker's route")
            namesrv.restart()  # the same port, nothing kept
            wait_until(
                lambda: namesrv.live_brokers() == {("broker-a", 0)},
                DEADLINE_S,
                "the restarted NameServer filled again",
            )
            assert namesrv.route("T") is not None
            broker.process.stop()  # SIGTERM: a clean shutdown unregisters
            assert namesrv.live_brokers() == set()
            assert namesrv.route("T") is None


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocketbox", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_taken_port_exits_2_with_one_line(squatter: int) -> None:
    done = run_cli("namesrv", "--listen", f"127.0.0.1:{squatter}")
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        f"Error: --listen 127.0.0.1:{squatter} is in use (another rocketbox?); stop it or "
        "choose another port"
    ]


def test_help_names_the_options() -> None:
    done = run_cli("namesrv", "--help")
    assert done.returncode == 0, done.stderr
    for option in (
        "--listen",
        "--metrics-listen",
        "--scan-not-active-broker-interval-ms",
        "--broker-channel-expired-time-ms",
    ):
        assert option in done.stdout
    assert "127.0.0.1:9876" in done.stdout
