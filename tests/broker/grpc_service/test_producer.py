"""The broker's producer side, driven by the unmodified official Python client (5.1.2) against a
real ``rocketbox broker`` process.

Proves: normal and FIFO sends are stored with their properties (a FIFO group on one queue, in
send order); delayed messages (delivery timestamp and RocketMQ's DELAY levels) are delivered to
their topic not before their time and not much after, across a broker restart; transactions are
committed, rolled back, and resolved by check-back (commit) or rolled back after the maximum
number of unanswered checks; a SYNC_FLUSH broker killed with SIGKILL loses no acknowledged send;
bad input is refused with the protocol's code and nothing is stored; an overloaded send queue
answers TOO_MANY_REQUESTS, which the client does not retry.

The broker is read back after it stopped, by opening its store: what the client was told is
compared with what is on disk.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import Code

from broker.store.codec.message import MessageExt
from broker.store.message_store import DefaultMessageStore
from tests.broker.broker_process import BrokerProcess, small_store_config, wait_until

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0


@contextmanager
def producer(
    endpoint: str,
    topics: tuple[str, ...],
    checker: TransactionChecker | None = None,
    namespace: str = "",
    request_timeout_s: int = 3,
    credentials: tuple[str, str] = ("", ""),
) -> Iterator[Producer]:
    """The official Producer, started; ``request_timeout_s``: the client's own (3 s default);
    ``credentials``: the access key and secret key it signs with (none by default)."""
    config = ClientConfiguration(endpoint, Credentials(*credentials), namespace, request_timeout_s)
    p = Producer(config, topics, checker)
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()


@contextmanager
def stored(data_dir: Path) -> Iterator[DefaultMessageStore]:
    """The stopped broker's store, opened to read what it holds."""
    store = DefaultMessageStore(small_store_config(data_dir))
    store.start()
    try:
        yield store
    finally:
        store.shutdown()


def message(topic: str, body: bytes, tag: str | None = None, key: str | None = None) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    if key:
        m.keys = key
    return m


def one_copy(store: DefaultMessageStore, msg_id: str, topic: str) -> MessageExt:
    copies = store.query_message_by_id(msg_id, topic)
    assert len(copies) == 1, f"{msg_id} stored {len(copies)} times in {topic}"
    return copies[0]


def progress(data_dir: Path, name: str) -> dict[str, object]:
    path = data_dir / "config" / name
    return dict(json.loads(path.read_text())) if path.exists() else {}


def test_normal_and_fifo_sends_are_stored_with_their_properties(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Orders:4", "--topic", "Steps:4:FIFO")
    try:
        with producer(broker.endpoint, ("Orders", "Steps")) as p:
            m = message("Orders", b"order-1 created", tag="created", key="order-1")
            m.add_property("region", "eu-west")
            normal = p.send(m)
            fifo_ids = []
            for step in ("created", "paid", "shipped", "received", "reviewed"):
                f = message("Steps", f"order-7 {step}".encode(), tag=step)
                f.message_group = "order-7"
                fifo_ids.append(p.send(f).message_id)
    finally:
        broker.stop()
    with stored(tmp_path) as store:
        got = one_copy(store, normal.message_id, "Orders")
        assert got.body == b"order-1 created"
        assert got.tags == "created"
        assert got.keys == ["order-1"]
        assert got.user_properties == {"region": "eu-west"}
        assert got.born_host[0] == "127.0.0.1"
        assert got.store_host == ("127.0.0.1", broker.port), "the port actually bound"
        steps = [one_copy(store, i, "Steps") for i in fifo_ids]
        assert len({s.queue_id for s in steps}) == 1, "a message group stays on one queue"
        assert [s.queue_offset for s in steps] == sorted(s.queue_offset for s in steps)
        assert [s.body.split()[1] for s in steps] == [
            b"created",
            b"paid",
            b"shipped",
            b"received",
            b"reviewed",
        ]
        assert all(s.properties["__SHARDINGKEY"] == "order-7" for s in steps)


def test_delayed_messages_arrive_on_time_across_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Later:2")
    try:
        with producer(broker.endpoint, ("Later",)) as p:
            # The Python client's delivery_timestamp is epoch seconds on the wire
            # (docs/rocketmq-protocol.md §5.5).
            deliver_s = int(time.time()) + 4
            timed = message("Later", b"at a time")
            timed.delivery_timestamp = deliver_s
            timed_id = p.send(timed).message_id
            leveled = message("Later", b"delay level 2 (5 s)")
            leveled.add_property("DELAY", "2")
            level_sent_ms = time.time_ns() // 1_000_000
            leveled_id = p.send(leveled).message_id
    finally:
        broker.stop()  # before either is due: the timer must survive the restart
    with stored(tmp_path) as store:
        assert not store.query_message_by_id(timed_id, "Later"), "not before its time"
    broker = BrokerProcess(tmp_path)
    try:
        wait_until(
            lambda: progress(tmp_path, "timer_progress.json").get("watermark") == 2,
            DEADLINE_S,
            "both delayed messages delivered",
        )
    finally:
        broker.stop()
    with stored(tmp_path) as store:
        got = one_copy(store, timed_id, "Later")
        deliver_ms = deliver_s * 1000
        assert deliver_ms <= got.store_timestamp_ms <= deliver_ms + 1500
        leveled_got = one_copy(store, leveled_id, "Later")
        due_ms = level_sent_ms + 5000
        assert due_ms - 50 <= leveled_got.store_timestamp_ms <= due_ms + 1500


class Checker(TransactionChecker):  # type: ignore[misc]  # the official client ships no type information
    def __init__(self, answer: TransactionResolution) -> None:
        self.answer = answer
        self.asked: list[str] = []
        self.asked_event = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        self.asked.append(message.message_id)
        self.asked_event.set()
        return self.answer


def test_transactions_commit_and_roll_back(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Payments:2")
    try:
        with producer(broker.endpoint, ("Payments",), Checker(TransactionResolution.ROLLBACK)) as p:
            committed = p.begin_transaction()
            committed_id = p.send(message("Payments", b"commit me"), committed).message_id
            committed.commit()
            rolled = p.begin_transaction()
            rolled_id = p.send(message("Payments", b"roll me back"), rolled).message_id
            rolled.rollback()
    finally:
        broker.stop()
    with stored(tmp_path) as store:
        assert one_copy(store, committed_id, "Payments").body == b"commit me"
        assert store.query_message_by_id(rolled_id, "Payments") == []
        # Both half messages stay in the half topic: the log is append-only.
        assert len(store.query_message_by_id(rolled_id)) == 1


@pytest.mark.slow
def test_an_orphan_transaction_is_resolved_by_check_back(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path,
        "--topic",
        "Payments:2",
        "--transaction-timeout-ms",
        "500",
        "--transaction-check-interval-ms",
        "300",
    )
    checker = Checker(TransactionResolution.COMMIT)
    try:
        with producer(broker.endpoint, ("Payments",), checker) as p:
            orphan = p.begin_transaction()
            orphan_id = p.send(message("Payments", b"decided later"), orphan).message_id
            # Neither commit nor rollback: the broker must ask this producer.
            assert checker.asked_event.wait(DEADLINE_S), "the broker never checked back"
            wait_until(
                lambda: progress(tmp_path, "transaction_progress.json").get("watermark") == 1,
                DEADLINE_S,
                "the check-back commit",
            )
    finally:
        broker.stop()
    assert checker.asked[0] == orphan_id
    with stored(tmp_path) as store:
        assert one_copy(store, orphan_id, "Payments").body == b"decided later"


@pytest.mark.slow
def test_an_unanswered_transaction_is_rolled_back_after_the_maximum_checks(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(
        tmp_path,
        "--topic",
        "Payments:2",
        "--transaction-timeout-ms",
        "200",
        "--transaction-check-interval-ms",
        "200",
        "--transaction-check-max",
        "2",
    )
    checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    try:
        with producer(broker.endpoint, ("Payments",), checker) as p:
            orphan = p.begin_transaction()
            orphan_id = p.send(message("Payments", b"never decided"), orphan).message_id
            wait_until(
                lambda: progress(tmp_path, "transaction_progress.json").get("watermark") == 1,
                DEADLINE_S,
                "the rollback after two unanswered checks",
            )
    finally:
        broker.stop()
    assert checker.asked.count(orphan_id) == 2
    with stored(tmp_path) as store:
        assert store.query_message_by_id(orphan_id, "Payments") == []


@pytest.mark.slow
def test_sync_flush_broker_killed_with_sigkill_loses_no_acknowledged_send(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path, "--flush", "SYNC_FLUSH", "--topic", "Ledger:4")
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    try:
        with producer(broker.endpoint, ("Ledger",)) as p:

            def send_until_stopped(worker: int) -> None:
                n = 0
                while not stop.is_set():
                    try:
                        receipt = p.send(message("Ledger", f"w{worker}-{n}".encode() * 50))
                    except Exception:  # the broker died under this send: not acknowledged
                        return
                    with lock:
                        acknowledged.append(receipt.message_id)
                    n += 1

            with ThreadPoolExecutor(4) as pool:
                for w in range(4):
                    pool.submit(send_until_stopped, w)
                wait_until(lambda: len(acknowledged) >= 300, DEADLINE_S, "300 acknowledged sends")
                broker.kill()
                stop.set()
    finally:
        broker.kill()
    assert broker.proc.returncode == -9
    restarted = BrokerProcess(tmp_path)
    restarted.stop()
    assert any("abnormal recovery" in line for line in restarted.lines)
    with stored(tmp_path) as store:
        for msg_id in acknowledged:
            one_copy(store, msg_id, "Ledger")


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda m: setattr(m, "keys", "bad\x01key"), Code.ILLEGAL_MESSAGE_KEY),
        (lambda m: setattr(m, "tag", "bad\ntag"), Code.ILLEGAL_MESSAGE_TAG),
        (lambda m: setattr(m, "message_group", "g" * 80), Code.ILLEGAL_MESSAGE_GROUP),
        (lambda m: m.add_property("UNIQ_KEY", "forged"), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (lambda m: m.add_property("DELAY", "19"), Code.ILLEGAL_DELIVERY_TIME),
        (
            lambda m: setattr(m, "delivery_timestamp", int(time.time()) + 2 * 86400),
            Code.ILLEGAL_DELIVERY_TIME,
        ),
    ],
    ids=["key", "tag", "group", "reserved-property", "delay-level", "delivery-time"],
)
def test_bad_input_is_refused_with_the_protocol_code_and_nothing_is_stored(
    tmp_path: Path, mutate: object, code: int
) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Strict:2")
    try:
        with producer(broker.endpoint, ("Strict",)) as p:
            bad = message("Strict", b"bad")
            assert callable(mutate)
            mutate(bad)
            with pytest.raises(Exception) as refused:  # noqa: PT011 - the client's own class
                p.send(bad)
            assert getattr(refused.value, "code", None) == code, refused.value
    finally:
        broker.stop()
    with stored(tmp_path) as store:
        assert store.get_max_offset_in_queue("Strict", 0) == 0
        assert store.get_max_offset_in_queue("Strict", 1) == 0


def test_an_unknown_topic_is_refused_when_auto_create_is_off(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path)
    try:
        with producer(broker.endpoint, ()) as p, pytest.raises(Exception, match="route"):
            p.send(message("Nowhere", b"x"))
    finally:
        broker.stop()


@pytest.mark.slow
def test_an_overloaded_send_queue_answers_too_many_requests(tmp_path: Path) -> None:
    # One send worker and a 1 ms queue-wait limit: concurrent SYNC_FLUSH sends must queue, and
    # those that waited longer are refused (RocketMQ's BrokerFastFailure).
    broker = BrokerProcess(
        tmp_path,
        "--flush",
        "SYNC_FLUSH",
        "--topic",
        "Busy:4",
        "--send-workers",
        "1",
        "--wait-time-ms-in-send-queue",
        "1",
    )
    outcomes: list[object] = []
    try:
        with producer(broker.endpoint, ("Busy",)) as p:
            futures = [p.send_async(message("Busy", b"x" * 1024)) for _ in range(400)]
            for f in futures:
                try:
                    outcomes.append(f.result(DEADLINE_S))
                except Exception as e:
                    outcomes.append(e)
    finally:
        broker.stop()
    throttled = [o for o in outcomes if getattr(o, "code", None) == Code.TOO_MANY_REQUESTS]
    accepted = [o for o in outcomes if hasattr(o, "message_id")]
    assert throttled, "no send was refused by the queue-wait rule"
    assert accepted, "the broker refused everything"
    assert len(throttled) + len(accepted) == len(outcomes)
    with stored(tmp_path) as store:
        stored_count = sum(store.get_max_offset_in_queue("Busy", q) for q in range(4))
    assert stored_count == len(accepted), "a refused send was stored anyway"


@pytest.mark.slow
def test_an_unresolved_transaction_survives_a_broker_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Payments:2")
    try:
        with producer(broker.endpoint, ("Payments",), Checker(TransactionResolution.ROLLBACK)) as p:
            pending = p.begin_transaction()
            pending_id = p.send(message("Payments", b"outlives the broker"), pending).message_id
    finally:
        broker.stop()  # the transaction is neither committed nor rolled back
    checker = Checker(TransactionResolution.COMMIT)
    broker = BrokerProcess(
        tmp_path,
        "--transaction-timeout-ms",
        "200",
        "--transaction-check-interval-ms",
        "300",
    )
    try:
        with producer(broker.endpoint, ("Payments",), checker):
            assert checker.asked_event.wait(DEADLINE_S), "no check-back after the restart"
            wait_until(
                lambda: progress(tmp_path, "transaction_progress.json").get("watermark") == 1,
                DEADLINE_S,
                "the commit decided by the new producer",
            )
    finally:
        broker.stop()
    assert checker.asked == [pending_id]
    with stored(tmp_path) as store:
        assert one_copy(store, pending_id, "Payments").body == b"outlives the broker"
