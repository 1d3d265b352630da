"""The RocketMQ front in front of a broker with --auth, and verifying its apps' signatures itself
(--front-credentials-file): the official Python client signs with its own credentials, the
front's sends go out under the sidecar's, and everything the front forwards keeps the app's.

Proves: a Producer with an app user's credentials pointed at the front has its sends stored (the
front verifying the app, the sidecar signing as its own user, which may PUB); a SimpleConsumer
through the front receives them with the app user's credentials, which the front verifies and
the broker checks again (its SUB rights); a transaction through the front is committed and
consumed under the app's credentials (its half message and its commit forwarded with them, the
broker checking its PUB right); the same consumer with a wrong secret is refused UNAUTHORIZED by
the front before anything reaches the broker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rocketmq import TransactionResolution
from rocketmq.grpc_protocol import Code

from tests.broker.auth.auth_broker import Users, auth_broker
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import Checker, message, producer
from tests.sidecar.rocketmq_front.front_process import BROKER_FRONT_ARGS, FrontSidecar

pytestmark = pytest.mark.slow

SIDECAR = ("front-sidecar", "front-sidecar-secret")
APP = ("front-app", "front-app-secret")
PAYER = ("front-payer", "front-payer-secret")
USERS: Users = {
    SIDECAR[0]: (SIDECAR[1], [("Topic:Orders", "PUB")]),
    APP[0]: (APP[1], [("Topic:Orders", "SUB"), ("Group:readers", "SUB")]),
    # A transactional producer's half messages and commits are forwarded as its own.
    PAYER[0]: (
        PAYER[1],
        [("Topic:Payments", "PUB"), ("Topic:Payments", "SUB"), ("Group:ledger", "SUB")],
    ),
}


def test_the_front_verifies_the_app_signs_its_sends_as_the_sidecar_and_forwards_the_apps_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topics = ("--topic", "Orders:2", "--topic", "Payments:2")
    with auth_broker(tmp_path / "broker", USERS, *BROKER_FRONT_ARGS, *topics) as b:
        credentials = tmp_path / "sidecar.credentials"
        credentials.write_text(f"access_key={SIDECAR[0]}\nsecret_key={SIDECAR[1]}\n")
        apps = tmp_path / "front.credentials"
        apps.write_text("".join(f"access_key={k}\nsecret_key={s}\n" for k, s in (APP, PAYER)))
        args = (
            "--broker-credentials-file",
            str(credentials),
            "--front-credentials-file",
            str(apps),
        )
        outbox = f"rocksdb://{tmp_path / 'outbox'}"
        with FrontSidecar(b.endpoint, outbox, *args) as s:
            front = s.front_endpoint
            # The app's user may not PUB: its sends are the sidecar's, which may.
            with producer(front, ("Orders",), credentials=APP) as p:
                sent = {p.send(message("Orders", b"m%d" % i)).message_id for i in range(3)}
            with simple_consumer(front, "readers", "Orders", 2, credentials=APP) as c:
                assert {m.message_id for m in receive_all(c, len(sent))} == sent
            with (
                producer(front, ("Payments",), Checker(TransactionResolution.ROLLBACK),
                         credentials=PAYER) as p,
                simple_consumer(front, "ledger", "Payments", 2, credentials=PAYER) as c,
            ):  # fmt: skip
                transaction = p.begin_transaction()
                paid = p.send(message("Payments", b"paid"), transaction).message_id
                transaction.commit()
                assert [m.message_id for m in receive_all(c, 1)] == [paid]
            # Its first call, QueryRoute, is refused at the front; the Python client logs the
            # route's status and raises "failed to fetch".
            with (
                pytest.raises(Exception, match="route"),
                simple_consumer(front, "readers", "Orders", 2, credentials=(APP[0], "wrong")) as c,
            ):
                c.receive(32, 2)
            assert (
                f"{Code.UNAUTHORIZED}, the sidecar's RocketMQ front refused the call: the "
                f"signature of access key '{APP[0]}'"
            ) in caplog.text
