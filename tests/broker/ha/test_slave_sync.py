"""A slave's configs and consume progress follow its master's (SlaveSynchronize), and a slave
serves consumers when its master is gone; real ``rocketbox broker`` processes throughout.

Proves: a topic created on the master appears on the slave after a sync interval, and a topic
write on the slave is refused (FAILED_PRECONDITION, naming its role); consume progress acked on
the master is on the slave after a sync, so that once the master is SIGKILLed a consumer on the
slave receives the rest and none of the acked ones; a pull offset committed on the master is on
the slave after a sync, and the slave serves PullMessage from there once the master is gone;
with authentication, a user made on the master authenticates on the slave.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import Code
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.broker.auth.auth_broker import ADMIN, acl, make_user
from tests.broker.broker_process import wait_until
from tests.broker.grpc_service.test_admin import cli, cli_json, refused
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import message, producer
from tests.broker.grpc_service.test_pull import committed, pull, queue, stub_call
from tests.broker.ha.ha_helpers import DEADLINE_S, ha_address, master, slave, wait_caught_up

pytestmark = pytest.mark.slow


def test_a_topic_created_on_the_master_appears_on_the_slave(tmp_path: Path) -> None:
    m = master(tmp_path / "broker-a-0")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m))
        cli_json(m, "topic", "create", "Payments", "--queues", "3", "--type", "fifo")

        def on_the_slave() -> bool:
            return any(t["name"] == "Payments" for t in cli_json(s, "topic", "list")["topics"])

        wait_until(on_the_slave, DEADLINE_S, "the topic synced to the slave")
        assert cli_json(s, "topic", "describe", "Payments")["message_type"] == "FIFO"
        refused(
            cli(s, "topic", "create", "Other"),
            "FAILED_PRECONDITION",
            "broker-a-1 is a SLAVE; send to its master",
        )
    finally:
        if s is not None:
            s.stop()
        m.stop()


def acked_on(data_dir: Path, group: str, topic: str) -> int:
    """The messages the broker's saved pop progress counts as done."""
    path = data_dir / "config" / "consumer_offsets.json"
    if not path.exists():
        return 0
    queues = json.loads(path.read_text()).get(group, {}).get(topic, {})
    return sum(q["ack"] + len(q["done"]) for q in queues.values())


def test_after_the_master_dies_the_slave_serves_the_rest_not_the_acked(tmp_path: Path) -> None:
    m = master(tmp_path / "broker-a-0", "--topic=Work:2", "--group=Workers")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m))
        with producer(m.endpoint, ("Work",)) as p:
            first = {p.send(message("Work", f"first {i}".encode())).message_id for i in range(10)}
            with simple_consumer(m.endpoint, "Workers", "Work", await_s=1) as c:
                assert {g.message_id for g in receive_all(c, 10)} == first
            rest = {p.send(message("Work", f"rest {i}".encode())).message_id for i in range(10)}
        wait_caught_up(m, s)
        # The master's progress (ten acked) reaches the slave's own saved progress.
        wait_until(
            lambda: acked_on(tmp_path / "broker-a-1", "Workers", "Work") >= 10,
            DEADLINE_S,
            "the master's progress synced to the slave",
        )
        m.kill()
        with simple_consumer(s.endpoint, "Workers", "Work", await_s=1) as c:
            got = {g.message_id for g in receive_all(c, 10)}
            assert got == rest
            assert c.receive(32, 2) == []
    finally:
        if s is not None:
            s.stop()
        if m.running():
            m.stop()


def test_pull_offsets_sync_and_the_slave_serves_pulls(tmp_path: Path) -> None:
    m = master(tmp_path / "broker-a-0", "--topic=Log:1")
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m))
        with producer(m.endpoint, ("Log",)) as p:
            sent = [p.send(message("Log", f"line {i}".encode())).message_id for i in range(5)]
        reply = stub_call(
            m.endpoint,
            "UpdateOffset",
            spb.UpdateOffsetRequest(
                group=pb.Resource(name="Readers"), message_queue=queue("Log"), offset=3
            ),
        )
        assert isinstance(reply, spb.UpdateOffsetResponse)
        assert reply.status.code == Code.OK
        wait_caught_up(m, s)

        def synced() -> bool:
            got = committed(s.endpoint, "Readers")
            return bool(got.status.code == Code.OK and got.offset == 3)

        wait_until(synced, DEADLINE_S, "the master's pull offset synced to the slave")
        m.kill()
        code, messages, next_offset = pull(s.endpoint, "Log", 3)
        assert code == Code.OK
        assert [x.system_properties.message_id for x in messages] == sent[3:]
        assert next_offset == 5
    finally:
        if s is not None:
            s.stop()
        if m.running():
            m.stop()


def test_with_auth_the_slave_takes_its_masters_users(tmp_path: Path) -> None:
    """A user made on the master authenticates on the slave after a sync (they share the ACL
    key, as the chart's brokers do), so consumers can read the slave while the master is away."""
    admin_file = tmp_path / "admin.credentials"
    admin_file.write_text(f"access_key={ADMIN[0]}\nsecret_key={ADMIN[1]}\n")
    auth = ("--auth", f"--auth-admin-file={admin_file}", f"--auth-key-file={tmp_path / 'acl.key'}")
    m = master(tmp_path / "broker-a-0", *auth)
    s = None
    try:
        s = slave(tmp_path / "broker-a-1", ha_address(m), *auth)
        make_user(m, "app", "app-secret-key", [("Topic:Orders", "PUB")])
        slave_endpoint = s.endpoint
        wait_until(
            lambda: "app  1 rule" in acl("user", "list", "--broker", slave_endpoint).output,
            DEADLINE_S,
            "the master's user on the slave",
        )
        # Known there: authenticated, and refused only as no admin.
        as_app = acl("user", "list", "--broker", slave_endpoint, admin=("app", "app-secret-key"))
        assert "PERMISSION_DENIED" in as_app.output, as_app.output
    finally:
        if s is not None:
            s.stop()
        m.stop()
