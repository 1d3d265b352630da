"""HA state through the admin service, and a slave whose log is not its master's.

Proves: GetHAState answers a master's role, log end and each connected slave's acknowledged
offset, and a slave's role, master and lag; a slave whose log ends past its (new, shorter)
master's is refused by that master, which says why, and the slave's log stays exactly as it
was (nothing appended, nothing truncated).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from rocketbox_api.admin.v1 import broker_admin_pb2 as apb
from rocketbox_api.admin.v1 import broker_admin_pb2_grpc
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.grpc_service.test_producer import message, producer
from tests.broker.ha.ha_helpers import (
    DEADLINE_S,
    commitlog_bytes,
    ha_address,
    master,
    max_phy_offset,
    slave,
    wait_caught_up,
)
from tests.prometheus import sample, scrape

pytestmark = pytest.mark.slow

RPC_DEADLINE_S = 10.0


def ha_state(broker: BrokerProcess) -> apb.GetHAStateResponse:
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = broker_admin_pb2_grpc.BrokerAdminStub(channel)
        answer: apb.GetHAStateResponse = stub.GetHAState(
            apb.GetHAStateRequest(), timeout=RPC_DEADLINE_S
        )
        return answer


def test_the_admin_service_reports_each_side_of_replication(tmp_path: Path) -> None:
    m = master(tmp_path / "broker-a-0", "--topic=Work:2")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m))
        with producer(m.endpoint, ("Work",)) as p:
            for i in range(5):
                p.send(message("Work", f"job {i}".encode()))
        end = wait_caught_up(m, s)
        of_master = ha_state(m)
        assert (of_master.role, of_master.max_phy_offset) == ("ASYNC_MASTER", end)
        assert of_master.ha_address == ha_address(m)
        assert [(x.ack_offset, x.lag_bytes) for x in of_master.slaves] == [(end, 0)]
        of_slave = ha_state(s)
        assert (of_slave.role, of_slave.max_phy_offset) == ("SLAVE", end)
        assert of_slave.master_ha_address == ha_address(m)
        assert of_slave.master_connected
        assert of_slave.behind_master_bytes == 0
        assert not of_slave.slaves
        # The same, as metrics.
        [slave_address] = [x.address for x in of_master.slaves]
        at_master = scrape(m.metrics_port)
        assert sample(at_master, "rocketbox_broker_ha_connections") == 1
        assert sample(at_master, "rocketbox_broker_ha_slave_ack_offset", slave=slave_address) == end
        lag = "rocketbox_broker_ha_replication_lag_bytes"
        assert (lag, (("peer", slave_address),)) in at_master
        assert sample(at_master, lag, peer=slave_address) == 0
        at_slave = scrape(s.metrics_port)
        assert sample(at_slave, "rocketbox_broker_ha_connections") == 1
        assert (lag, (("peer", ha_address(m)),)) in at_slave
        assert sample(at_slave, lag, peer=ha_address(m)) == 0
    finally:
        if s is not None:
            s.stop()
        m.stop()


def test_a_slave_ahead_of_its_master_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    old = master(tmp_path / "old-master", "--topic=Work:2")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(old))
        with producer(old.endpoint, ("Work",)) as p:
            for i in range(20):
                p.send(message("Work", f"job {i}".encode()))
        held = wait_caught_up(old, s)
        s.stop()
    finally:
        old.stop()
    before = commitlog_bytes(tmp_path / "broker-a-1", held)
    # A master that lost its log (a new disk): shorter than what the slave holds.
    new = master(tmp_path / "new-master", "--topic=Work:2")
    s = None
    try:
        with producer(new.endpoint, ("Work",)) as p:
            p.send(message("Work", b"the new master's only message"))
        assert max_phy_offset(new) < held
        s = slave(tmp_path / "broker-a-1", ha_address(new))
        wait_until(
            lambda: f"its log ends at phy_offset {held}, past this master's end" in new.output(),
            DEADLINE_S,
            "the master refusing the slave that is ahead of it",
        )
        assert not ha_state(new).slaves
        assert max_phy_offset(s) == held
        s.stop()
        s = None
        assert commitlog_bytes(tmp_path / "broker-a-1", held) == before
    finally:
        if s is not None:
            s.stop()
        new.stop()
