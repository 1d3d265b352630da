"""A SYNC_MASTER between real ``rocketbox broker`` processes, sent to by the official client.

Proves: with its slave connected a send is answered OK (the slave acknowledged it); with no slave
(never started, or SIGKILLed) the answer is HA_NOT_AVAILABLE at once and the message is stored,
consumable from the master; with the slave SIGSTOPped the answer is SLAVE_PERSISTENCE_TIMEOUT
after the (short) sync-flush timeout, the message stored too.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.grpc_service.test_consumer import simple_consumer
from tests.broker.grpc_service.test_producer import message, producer
from tests.broker.ha.ha_helpers import (
    ha_address,
    master,
    receive_bodies,
    slave,
    slave_acks,
    wait_caught_up,
)

pytestmark = pytest.mark.slow

SYNC_FLUSH_TIMEOUT_MS = 500


def sync_master(data_dir: Path) -> BrokerProcess:
    return master(
        data_dir, "--topic=Work:2", f"--sync-flush-timeout-ms={SYNC_FLUSH_TIMEOUT_MS}",
        role="SYNC_MASTER",
    )  # fmt: skip


def test_with_its_slave_connected_a_send_is_answered_ok(tmp_path: Path) -> None:
    m = sync_master(tmp_path / "broker-a-0")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m))
        wait_until(lambda: slave_acks(m), 30.0, "the slave connected")
        with producer(m.endpoint, ("Work",)) as p:
            for i in range(5):
                receipt = p.send(message("Work", f"job {i}".encode()))
                assert receipt.message_id
        # Answered OK only once the slave held it: it holds everything now.
        wait_caught_up(m, s)
    finally:
        if s is not None:
            s.stop()
        m.stop()


def test_without_a_slave_a_send_is_stored_and_answered_ha_not_available(tmp_path: Path) -> None:
    m = sync_master(tmp_path / "broker-a-0")
    try:
        with producer(m.endpoint, ("Work",)) as p:
            with pytest.raises(Exception, match="no slave is connected") as e:
                p.send(message("Work", b"unreplicated"))
            assert "50002" in str(e.value)  # HA_NOT_AVAILABLE: stored, never resent
        # The official client resends on any code but OK (its retry policy; the sidecar never
        # resends a weakly stored message): each attempt was stored.
        with simple_consumer(m.endpoint, "Workers", "Work", await_s=1) as c:
            assert receive_bodies(c, {b"unreplicated"}) == {b"unreplicated"}
    finally:
        m.stop()


def test_a_killed_slave_makes_sends_ha_not_available(tmp_path: Path) -> None:
    m = sync_master(tmp_path / "broker-a-0")
    s = slave(tmp_path / "broker-a-1", ha_address(m))
    try:
        wait_until(lambda: slave_acks(m), 30.0, "the slave connected")
        s.kill()
        wait_until(lambda: not slave_acks(m), 30.0, "the master noticing its slave gone")
        with (
            producer(m.endpoint, ("Work",)) as p,
            pytest.raises(Exception, match="no slave is connected"),
        ):
            p.send(message("Work", b"after the slave died"))
    finally:
        m.stop()


def test_a_stopped_slave_makes_sends_slave_persistence_timeout(tmp_path: Path) -> None:
    m = sync_master(tmp_path / "broker-a-0")
    s = slave(tmp_path / "broker-a-1", ha_address(m))
    try:
        wait_until(lambda: slave_acks(m), 30.0, "the slave connected")
        with producer(m.endpoint, ("Work",)) as p:
            p.send(message("Work", b"replicated"))
            s.signal(signal.SIGSTOP)
            try:
                with pytest.raises(Exception, match="no slave acknowledged it") as e:
                    p.send(message("Work", b"not acknowledged"))
                assert "50402" in str(e.value)  # SLAVE_PERSISTENCE_TIMEOUT: stored
            finally:
                s.signal(signal.SIGCONT)
        with simple_consumer(m.endpoint, "Workers", "Work", await_s=1) as c:
            receive_bodies(c, {b"replicated", b"not acknowledged"})  # each attempt stored
    finally:
        s.stop()
        m.stop()
