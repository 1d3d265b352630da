"""HA replication between real ``rocketbox broker`` processes: an ASYNC_MASTER and its SLAVE.

Proves: what the official client sends to the master reaches the slave, whose commitlog is
byte-identical to the master's up to the replicated offset, across a segment end (the master's
blank end marker included), and whose consume queues serve the messages to a consumer on the
slave; a slave restarted resumes from what it holds (the master transfers from there, not from
0), and what was written while it was down arrives after; a send to a slave is refused with
FORBIDDEN, naming the slave and its role; a slave silent past the housekeeping interval
(SIGSTOPped) is dropped by its master, and catches up once it resumes.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from tests.broker.broker_process import wait_until
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import message, producer
from tests.broker.ha.ha_helpers import (
    DEADLINE_S,
    commitlog_bytes,
    ha_address,
    master,
    slave,
    slave_acks,
    wait_caught_up,
)

pytestmark = pytest.mark.slow

SEGMENT_BYTES = 8 * 1024 * 1024
BIG_BODY_BYTES = 3 * 1024 * 1024
BIG_RECEIVE_TIMEOUT_S = 15


def test_the_slave_copies_the_master_byte_for_byte_and_serves_consumers(tmp_path: Path) -> None:
    m = master(tmp_path / "broker-a-0", "--topic=Work:2")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m))
        with producer(m.endpoint, ("Work",)) as p:
            sent = {p.send(message("Work", f"job {i}".encode())).message_id for i in range(20)}
            # Three 3 MiB bodies cross the 8 MiB segment: a blank end marker, a second segment.
            for i in range(3):
                sent.add(p.send(message("Work", bytes([i]) * BIG_BODY_BYTES)).message_id)
        end = wait_caught_up(m, s)
        assert end > SEGMENT_BYTES
        assert commitlog_bytes(tmp_path / "broker-a-1", end) == commitlog_bytes(
            tmp_path / "broker-a-0", end
        )
        # One receive carries the three big bodies (9 MiB) from the slave: on a loaded machine
        # that can take longer than the client's 3 s default.
        with simple_consumer(
            s.endpoint, "Workers", "Work", await_s=1, request_timeout_s=BIG_RECEIVE_TIMEOUT_S
        ) as c:
            got = receive_all(c, len(sent))
        assert {g.message_id for g in got} == sent
    finally:
        if s is not None:
            s.stop()
        m.stop()


def test_a_restarted_slave_resumes_from_what_it_holds(tmp_path: Path) -> None:
    m = master(tmp_path / "broker-a-0", "--topic=Work:2")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m))
        with producer(m.endpoint, ("Work",)) as p:
            for i in range(10):
                p.send(message("Work", f"before {i}".encode()))
            held = wait_caught_up(m, s)
            s.stop()
            for i in range(10):
                p.send(message("Work", f"while down {i}".encode()))
        s = slave(tmp_path / "broker-a-1", ha_address(m))  # the same store, started again
        # The master says where it transfers from: the slave's end, not 0.
        wait_until(
            lambda: f"transferring from phy_offset {held}" in m.output(),
            DEADLINE_S,
            f"the master transferring from {held}",
        )
        end = wait_caught_up(m, s)
        assert end > held
        transfers = re.findall(r"transferring from phy_offset (\d+)", m.output())
        assert transfers == ["0", str(held)]
        assert commitlog_bytes(tmp_path / "broker-a-1", end) == commitlog_bytes(
            tmp_path / "broker-a-0", end
        )
    finally:
        if s is not None:
            s.stop()
        m.stop()


def test_a_send_to_a_slave_is_refused_naming_its_master(tmp_path: Path) -> None:
    m = master(tmp_path / "broker-a-0", "--topic=Work:2")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m), "--topic=Work:2")
        p = Producer(ClientConfiguration(s.endpoint, Credentials()), ("Work",))
        p.startup()
        try:
            msg = Message()
            msg.topic = "Work"
            msg.body = b"to a slave"
            with pytest.raises(Exception, match="broker-a-1 is a SLAVE; send to its master") as e:
                p.send(msg)
            assert "40300" in str(e.value)  # FORBIDDEN: the sidecar tries another broker
        finally:
            p.shutdown()
    finally:
        if s is not None:
            s.stop()
        m.stop()


def test_a_silent_slave_is_dropped_and_catches_up_when_it_resumes(tmp_path: Path) -> None:
    m = master(tmp_path / "broker-a-0", "--topic=Work:2")
    s = slave(tmp_path / "broker-a-1", ha_address(m))
    try:
        wait_until(lambda: slave_acks(m), DEADLINE_S, "the slave connected")
        s.signal(signal.SIGSTOP)
        try:
            # ha_housekeeping_interval_ms (3 s here) without a report: the master closes it.
            wait_until(lambda: not slave_acks(m), DEADLINE_S, "the master dropping the slave")
            with producer(m.endpoint, ("Work",)) as p:
                p.send(message("Work", b"while the slave was silent"))
        finally:
            s.signal(signal.SIGCONT)
        end = wait_caught_up(m, s)
        assert commitlog_bytes(tmp_path / "broker-a-1", end) == commitlog_bytes(
            tmp_path / "broker-a-0", end
        )
    finally:
        s.stop()
        m.stop()
