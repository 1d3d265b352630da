"""Transactions through the sidecar's RocketMQ front: the official Python TransactionProducer
pointed at the front, a real broker behind it.

Proves: a committed transaction's message is consumed, a rolled back one never is; a half
message the app leaves unresolved is resolved by the broker asking the app's checker through the
front's Telemetry relay (the broker knows the app as a producer of the topic under its own
client id); and after the broker went away and came back on its port, the producer's stream to
the front still open all along, an orphan check reaches the app again (the front opened its
upstream again).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import Producer, TransactionResolution

from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_consumer import receive_all
from tests.broker.grpc_service.test_producer import Checker, producer
from tests.rocketbox_process import wait_until
from tests.sidecar.rocketmq_front.front_process import (
    BROKER_FRONT_ARGS,
    DEADLINE_S,
    INVISIBLE_S,
    FrontSidecar,
    broker_and_front,
    message,
    simple_consumer,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, FrontSidecar]]:
    with broker_and_front(
        tmp_path_factory.mktemp("front"), "--topic", "Payments:2", "--topic", "Orphans:2"
    ) as processes:
        yield processes


def test_commit_is_consumed_and_rollback_never_is(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    _, sidecar = front
    endpoint = sidecar.front_endpoint
    with (
        simple_consumer(endpoint, "Ledger", "Payments") as c,
        producer(endpoint, ("Payments",), Checker(TransactionResolution.ROLLBACK)) as p,
    ):
        committed = p.begin_transaction()
        committed_id = p.send(message("Payments", b"commit me"), committed).message_id
        committed.commit()
        rolled = p.begin_transaction()
        p.send(message("Payments", b"roll me back"), rolled)
        rolled.rollback()
        got = receive_all(c, 1)
        # sleep: a while for a rolled back message to show up, which it never may
        time.sleep(INVISIBLE_S)
        got += c.receive(32, INVISIBLE_S)
    assert [(m.message_id, m.body) for m in got] == [(committed_id, b"commit me")]


def test_an_orphan_is_resolved_by_the_app_checker_through_the_front(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    _, sidecar = front
    endpoint = sidecar.front_endpoint
    checker = Checker(TransactionResolution.COMMIT)
    with (
        simple_consumer(endpoint, "Auditors", "Orphans") as c,
        producer(endpoint, ("Orphans",), checker) as p,
    ):
        orphan = p.begin_transaction()
        orphan_id = p.send(message("Orphans", b"decided later"), orphan).message_id
        # Neither commit nor rollback: the broker must ask this app, through the front.
        assert checker.asked_event.wait(DEADLINE_S), "the broker never checked back"
        got = receive_all(c, 1)
    assert checker.asked[0] == orphan_id
    assert [(m.message_id, m.body) for m in got] == [(orphan_id, b"decided later")]


def send_once_the_broker_is_back(p: Producer) -> str:
    """A half message, sent as soon as the front reaches the broker again (the sidecar's
    channel reconnects with a back-off of its own); its message id."""
    sent: list[str] = []

    def half_sent() -> bool:
        try:
            sent.append(
                p.send(message("Payments", b"after the outage"), p.begin_transaction()).message_id
            )
        except Exception:  # the official client raises its own exceptions, and bare ones
            return False
        return True

    wait_until(half_sent, DEADLINE_S, "a half message stored after the broker came back")
    return sent[0]


def test_after_the_broker_comes_back_an_orphan_check_still_reaches_the_app(
    tmp_path: Path,
) -> None:
    """The broker is killed (its graceful stop would wait for the streams the front keeps open)
    and started again on its port over its store."""
    checker = Checker(TransactionResolution.COMMIT)
    args = (*BROKER_FRONT_ARGS, "--topic", "Payments:2")
    broker = BrokerProcess(tmp_path / "broker", *args)
    try:
        sidecar = FrontSidecar(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}")
        try:
            with producer(sidecar.front_endpoint, ("Payments",), checker) as p:
                broker.kill()
                # The app's Telemetry stream is the front's: it stays open while the broker is away.
                broker = BrokerProcess(
                    broker.data_dir, *args, "--listen", f"127.0.0.1:{broker.port}"
                )
                orphan_id = send_once_the_broker_is_back(p)
                assert checker.asked_event.wait(DEADLINE_S), "no check reached the app"
        finally:
            sidecar.stop()
    finally:
        broker.stop()
    assert checker.asked[0] == orphan_id
