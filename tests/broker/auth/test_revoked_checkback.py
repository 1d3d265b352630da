"""A user whose rights are revoked, or who is deleted, is asked about no other user's
transaction: the unmodified official Python client (a transactional Producer with a
TransactionChecker) against a real ``rocketbox broker --auth`` whose users are made with
``rocketbox acl``.

Proves, for a revocation of tx1's PUB on the topic and for tx1's deletion: tx1's open Telemetry
stream is ended at once with a gRPC status the client reports (PERMISSION_DENIED after a
revocation, UNAUTHENTICATED after a deletion), counted by the broker; tx1's sends are refused
(FORBIDDEN, UNAUTHORIZED); tx2's transaction, left open, is checked back with tx2 alone, so its
body never reaches tx1, and tx2's commit stands: the message is delivered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import Message, TransactionChecker, TransactionResolution
from rocketmq.grpc_protocol import Code

from tests.broker.auth.auth_broker import Users, acl, auth_broker
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import DEADLINE_S, message, producer
from tests.prometheus import sample, scrape

pytestmark = pytest.mark.slow

TOPIC = "TT"
GROUP = "readers"
SECRET_BODY = b"tx2 SECRET half message body"
USERS: Users = {
    "tx1": ("tx1-secret-key", [(f"Topic:{TOPIC}", "PUB")]),
    "tx2": ("tx2-secret-key", [(f"Topic:{TOPIC}", "PUB")]),
    "reader": ("reader-secret-key", [(f"Topic:{TOPIC}", "SUB"), (f"Group:{GROUP}", "SUB")]),
}
# How the admin takes tx1's right away; the refusal its sends then get; the gRPC status that
# ends its Telemetry stream.
TAKEN_AWAY = {
    "revoked": (
        ("revoke", "tx1", f"Topic:{TOPIC}", "--action", "PUB"),
        Code.FORBIDDEN,
        "PERMISSION_DENIED",
    ),
    "deleted": (("user", "delete", "tx1"), Code.UNAUTHORIZED, "UNAUTHENTICATED"),
}
REFUSALS = "rocketbox_broker_access_refusals_total"
# The official client logs here, to its own file alone (it does not propagate).
CLIENT_LOGGER = "rocketmq-python-client"


class BodyChecker(TransactionChecker):  # type: ignore[misc]  # the official client ships no type information
    """Answers COMMIT, keeping the body of each message it is asked about."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.asked = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        self.bodies.append(bytes(message.body))
        self.asked.set()
        return TransactionResolution.COMMIT


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with auth_broker(
        tmp_path / "broker",
        USERS,
        "--topic", f"{TOPIC}:1",
        "--transaction-timeout-ms", "500",
        "--transaction-check-interval-ms", "300",
        "--invisible-duration-min-ms", "1000",
        metrics=True,
    ) as b:  # fmt: skip
        yield b


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def client_log() -> Iterator[Lines]:
    """What the official client logs at WARNING and above while the test runs."""
    lines = Lines()
    logger = logging.getLogger(CLIENT_LOGGER)
    logger.addHandler(lines)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)


def creds(user: str) -> tuple[str, str]:
    return user, USERS[user][0]


def telemetry_refusals(broker: BrokerProcess, code: str) -> float:
    return sample(scrape(broker.metrics_port), REFUSALS, method="Telemetry", code=code)


# The client logs a failed stream with Logger.warn, deprecated: as an error (the suite's
# warning filter), it would end the client's reading before it logs the status.
@pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning")
@pytest.mark.parametrize("how", sorted(TAKEN_AWAY))
def test_a_user_without_the_right_is_asked_about_no_transaction(
    broker: BrokerProcess, client_log: Lines, how: str
) -> None:
    command, send_refusal, stream_status = TAKEN_AWAY[how]
    tx1_checker, tx2_checker = BodyChecker(), BodyChecker()
    with producer(broker.endpoint, (TOPIC,), tx1_checker, credentials=creds("tx1")) as tx1:
        # tx1 is a working producer of the topic until the admin acts.
        tx1.send(message(TOPIC, b"tx1 before"))
        taken = acl(*command, "--broker", broker.endpoint)
        assert taken.exit_code == 0, taken.output
        with pytest.raises(Exception) as refused:  # noqa: PT011 - the client's own class
            tx1.send(message(TOPIC, b"tx1 after"))
        assert getattr(refused.value, "code", None) == send_refusal, refused.value
        # Its open stream is ended with a clear status, which the client logs.
        wait_until(
            lambda: telemetry_refusals(broker, stream_status) >= 1,
            DEADLINE_S,
            f"tx1's Telemetry stream ended {stream_status}",
        )
        wait_until(
            lambda: any(f"code: StatusCode.{stream_status}" in s for s in client_log.lines),
            DEADLINE_S,
            f"tx1's client told {stream_status}",
        )

        with producer(broker.endpoint, (TOPIC,), tx2_checker, credentials=creds("tx2")) as tx2:
            transaction = tx2.begin_transaction()
            half_id = tx2.send(message(TOPIC, SECRET_BODY), transaction).message_id
            # Neither commit nor rollback: the broker checks back, with tx2 alone.
            assert tx2_checker.asked.wait(DEADLINE_S), "the broker never checked back with tx2"
            with simple_consumer(
                broker.endpoint, GROUP, TOPIC, 2, credentials=creds("reader")
            ) as reader:
                got = receive_all(reader, 2)
    assert {(m.message_id, bytes(m.body)) for m in got} >= {(half_id, SECRET_BODY)}
    assert SECRET_BODY in tx2_checker.bodies
    assert tx1_checker.bodies == [], "tx1 was asked about a transaction after losing its right"
