"""The RocketMQ front in front of a broker with --auth: the official Python client signs with its
own credentials, the front's sends go out under the sidecar's, and everything the front forwards
keeps the app's.

Proves: a Producer with an app user's credentials pointed at the front has its sends stored (the
sidecar signing as its own user, which may PUB); a SimpleConsumer through the front receives
them with the app user's credentials, which the broker checks (its SUB rights); the same
consumer with a wrong secret is refused UNAUTHORIZED by the broker, through the front.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rocketmq.grpc_protocol import Code

from tests.broker.auth.auth_broker import Users, auth_broker
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import message, producer
from tests.sidecar.rocketmq_front.front_process import BROKER_FRONT_ARGS, FrontSidecar

SIDECAR = ("front-sidecar", "front-sidecar-secret")
APP = ("front-app", "front-app-secret")
USERS: Users = {
    SIDECAR[0]: (SIDECAR[1], [("Topic:Orders", "PUB")]),
    APP[0]: (APP[1], [("Topic:Orders", "SUB"), ("Group:readers", "SUB")]),
}


def test_the_front_signs_its_sends_as_the_sidecar_and_forwards_the_apps_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with auth_broker(tmp_path / "broker", USERS, *BROKER_FRONT_ARGS, "--topic", "Orders:2") as b:
        credentials = tmp_path / "sidecar.credentials"
        credentials.write_text(f"access_key={SIDECAR[0]}\nsecret_key={SIDECAR[1]}\n")
        outbox = f"rocksdb://{tmp_path / 'outbox'}"
        with FrontSidecar(b.endpoint, outbox, "--broker-credentials-file", str(credentials)) as s:
            front = s.front_endpoint
            # The app's user may not PUB: its sends are the sidecar's, which may.
            with producer(front, ("Orders",), credentials=APP) as p:
                sent = {p.send(message("Orders", b"m%d" % i)).message_id for i in range(3)}
            with simple_consumer(front, "readers", "Orders", 2, credentials=APP) as c:
                assert {m.message_id for m in receive_all(c, len(sent))} == sent
            # Its first call, QueryRoute, goes to the broker with the app's metadata and is refused
            # there; the Python client logs the route's status and raises "failed to fetch".
            with (
                pytest.raises(Exception, match="route"),
                simple_consumer(front, "readers", "Orders", 2, credentials=(APP[0], "wrong")) as c,
            ):
                c.receive(32, 2)
            assert f"{Code.UNAUTHORIZED}, the signature of access key '{APP[0]}'" in caplog.text
