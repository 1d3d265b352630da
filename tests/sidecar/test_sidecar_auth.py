"""The sidecar with its own credentials against a real ``rocketbox broker --auth``.

Proves: a sidecar whose user may PUB the topic has its sends STORED (its requests signed as the
official clients sign theirs); one whose user does not exist yet has them SPOOLED with cause
UNAUTHORIZED, and once an admin makes that user and grants it PUB, the resend pool delivers
every spooled message, each consumed exactly once; a topic the user may not PUB spools with
cause FORBIDDEN. Neither secret appears in the sidecar's output.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from rocketbox_api.v1 import sidecar_pb2 as api
from tests.broker.auth.auth_broker import ADMIN, auth_broker, make_user
from tests.broker.broker_process import BrokerProcess
from tests.sidecar.sidecar_process import SidecarProcess, message, outcome, send

pytestmark = pytest.mark.slow

SIDECAR_USER = ("sidecar-app", "sidecar-secret-key")
LATE_USER = ("late-app", "late-app-secret-key")
RECEIVE_DEADLINE_S = 60.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    args = ("--invisible-duration-min-ms", "1000", "--topic", "Orders:2", "--topic", "Private:2")
    with auth_broker(tmp_path / "broker", {}, *args) as b:
        yield b


def sidecar_as(broker: BrokerProcess, tmp_path: Path, user: tuple[str, str]) -> SidecarProcess:
    credentials = tmp_path / "broker.credentials"
    credentials.write_text(f"access_key={user[0]}\nsecret_key={user[1]}\n")
    outbox = f"rocksdb://{tmp_path / 'outbox'}"
    return SidecarProcess(broker.endpoint, outbox, "--broker-credentials-file", str(credentials))


def consumed_once(broker: BrokerProcess, ids: set[str]) -> None:
    """Every one of ``ids`` consumed, as the admin, and nothing more."""
    config = ClientConfiguration(broker.endpoint, Credentials(*ADMIN))
    c = SimpleConsumer(config, "auditors", {"Orders": FilterExpression("*")}, await_duration=2)
    c.startup()
    try:
        got: list[str] = []
        end = time.monotonic() + RECEIVE_DEADLINE_S
        while set(got) != ids and time.monotonic() < end:
            for m in c.receive(32, 30):
                got.append(m.message_id)
                c.ack(m)
        assert sorted(got) == sorted(ids)
        assert c.receive(32, 30) == []
    finally:
        c.shutdown()


def test_a_sidecar_with_the_right_to_pub_is_stored_and_without_it_spools_forbidden(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    make_user(broker, *SIDECAR_USER, [("Topic:Orders", "PUB")])
    with sidecar_as(broker, tmp_path, SIDECAR_USER) as sidecar, sidecar.client() as stub:
        stored = send(stub, message("Orders", b"allowed"))
        assert outcome(stored) == "stored", stored
        refused = send(stub, message("Private", b"not allowed"))
        assert outcome(refused) == "spooled", refused
        assert refused.spooled.cause == api.SPOOL_CAUSE_FORBIDDEN, refused
        output = sidecar.output()
    consumed_once(broker, {stored.message_id})
    assert SIDECAR_USER[1] not in output
    assert SIDECAR_USER[1] not in broker.output()


def test_a_refused_sidecar_spools_unauthorized_and_drains_once_its_user_exists(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    with sidecar_as(broker, tmp_path, LATE_USER) as sidecar, sidecar.client() as stub:
        results = [send(stub, message("Orders", b"early %d" % i)) for i in range(5)]
        assert [outcome(r) for r in results] == ["spooled"] * 5, results
        assert {r.spooled.cause for r in results} == {api.SPOOL_CAUSE_UNAUTHORIZED}
        # The credentials fixed (here: the user they name is made), the outbox drains itself.
        make_user(broker, *LATE_USER, [("Topic:Orders", "PUB")])
        consumed_once(broker, {r.message_id for r in results})
        output = sidecar.output()
    assert LATE_USER[1] not in output
