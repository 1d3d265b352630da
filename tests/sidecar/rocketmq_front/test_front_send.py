"""SendMessage at the sidecar's RocketMQ front, with the unmodified official Python client and
real broker and sidecar processes. Proves:

- NORMAL (tag, keys, properties), FIFO (message group) and DELAY (delivery time) messages sent
  to the front go through the sidecar's intake (its STORED count), are answered OK with the
  broker's offset, are stored once each under the app's own message id and born time, and reach
  a consumer of the broker with their properties; a delayed one is held by the broker until its
  time; a GZIP body is stored inflated;
- a request of several messages gets one entry each, in order, MULTIPLE_RESULTS when they
  differ; one over the sidecar's limits, mixing TRANSACTION with other types, or naming another
  namespace is refused as a whole, nothing of it stored;
- a request of TRANSACTION messages is forwarded to the broker, not taken by intake: the half
  message is committed and delivered;
- a rejected message gets the protocol's code, the Python client raises the matching exception,
  and nothing is stored or spooled;
- with the broker down the official producer's ``send`` returns OK (offset -1) for normal and
  FIFO messages, and once it is back every one is stored and consumed exactly once, a FIFO
  group in send order;
- a full outbox answers TOO_MANY_REQUESTS, which the Python client raises after one attempt.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import Message, TransactionChecker, TransactionResolution
from rocketmq.grpc_protocol import Code, definition_pb2
from rocketmq.v5.exception import (
    BadRequestException,
    PayloadEmptyException,
    PayloadTooLargeException,
    RequestHeaderFieldsTooLargeException,
    TooManyRequestsException,
)
from rocketmq.v5.util.messaging_result_checker import MessagingResultChecker

from rocketbox_api.admin.v1 import broker_admin_pb2
from tests.broker.broker_process import BrokerProcess
from tests.prometheus import sample, scrape
from tests.rocketbox_process import wait_until
from tests.sidecar.rocketmq_front.front_send_process import (
    FrontSidecar,
    consume,
    producer,
    raw_message,
    raw_send,
    raw_stub,
    refused_endpoint,
)
from tests.sidecar.sidecar_process import BROKER_ARGS, restart, stored_copies, wait_stored

pytestmark = pytest.mark.slow

SENDS = "rocketbox_sidecar_sends_total"
DELIVERY_DEADLINE_S = 60.0
BODY_BYTES_MAX = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, FrontSidecar]]:
    broker = BrokerProcess(tmp_path_factory.mktemp("broker"), *BROKER_ARGS)
    try:
        sidecar = FrontSidecar(broker.endpoint, "memory://")
        try:
            yield broker, sidecar
        finally:
            sidecar.stop()
    finally:
        broker.stop()


def sends(sidecar: FrontSidecar, state: str, cause: str = "") -> float:
    return sample(scrape(sidecar.metrics_port), SENDS, state=state,
                  cause=cause)  # fmt: skip


def message(topic: str, body: bytes, **fields: object) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    for name, value in fields.items():
        setattr(m, name, value)
    return m


def one_copy(broker: BrokerProcess, message_id: str) -> broker_admin_pb2.StoredMessage:
    copies = wait_stored(broker.endpoint, message_id)
    assert len(copies) == 1, copies
    return copies[0]


def test_normal_fifo_and_delay_go_through_intake_stored_once_with_their_properties(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    broker, sidecar = front
    stored_before = sends(sidecar, "STORED")
    with producer(sidecar.front_endpoint, ("FrontOrders", "Fifo", "FrontLater")) as p:
        normal = message("FrontOrders", b"order 1", tag="created", keys="o-1")
        normal.add_property("region", "eu")
        normal_receipt = p.send(normal)
        fifo = [p.send(message("Fifo", f"step {i}".encode(), message_group="front-g"))
                for i in range(3)]  # fmt: skip
        # The Python client's delivery timestamp is whole epoch seconds
        # (docs/rocketmq-protocol.md §5.5).
        deliver_s = int(time.time()) + 3
        delayed = p.send(message("FrontLater", b"later", delivery_timestamp=deliver_s))
    receipts = [normal_receipt, *fifo, delayed]
    assert all(r.offset >= 0 for r in receipts), [r.offset for r in receipts]
    assert sends(sidecar, "STORED") - stored_before == 5, "every one through intake"
    copy = one_copy(broker, normal_receipt.message_id)
    assert (copy.topic, copy.tag, list(copy.keys), dict(copy.user_properties), copy.body) == (
        "FrontOrders", "created", ["o-1"], {"region": "eu"}, b"order 1",
    )  # fmt: skip
    assert copy.queue_offset == normal_receipt.offset
    steps = [one_copy(broker, r.message_id) for r in fifo]
    assert {s.message_group for s in steps} == {"front-g"}
    assert len({s.queue_id for s in steps}) == 1, "one group, one queue"
    assert [s.queue_offset for s in steps] == sorted(s.queue_offset for s in steps)
    [held] = stored_copies(broker.endpoint, delayed.message_id)
    assert held.delivery_timestamp_ms == deliver_s * 1000
    got = consume(broker.endpoint, "FrontReaders", "FrontOrders", {normal_receipt.message_id})
    [m] = got[normal_receipt.message_id]
    assert (m.body, m.tag, list(m.keys), m.properties.get("region")) == (
        b"order 1", "created", ["o-1"], "eu",
    )  # fmt: skip
    consume(broker.endpoint, "FrontLaterReaders", "FrontLater", {delayed.message_id})
    # Delivered by the broker's timer, at its time: the copy in the topic is stored no earlier.
    [due] = [c for c in stored_copies(broker.endpoint, delayed.message_id)
             if c.topic == "FrontLater"]  # fmt: skip
    assert due.store_timestamp_ms >= deliver_s * 1000


def test_the_app_message_id_born_time_and_gzip_body_are_kept(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    broker, sidecar = front
    app_id = f"APP-{time.time_ns()}"
    born_ms = 1_700_000_000_123
    zipped = f"{app_id}-z"
    with raw_stub(sidecar.front_endpoint) as stub:
        plain = raw_message("FrontOwnIds", app_id)
        plain.system_properties.born_timestamp.FromMilliseconds(born_ms)
        compressed = raw_message(
            "FrontOwnIds",
            zipped,
            gzip.compress(b"inflated body"),
            body_encoding=definition_pb2.GZIP,
        )
        response = raw_send(stub, plain, compressed)
    assert response.status.code == Code.OK, response
    assert [e.message_id for e in response.entries] == [app_id, zipped]
    copy = one_copy(broker, app_id)
    assert copy.born_timestamp_ms == born_ms
    assert one_copy(broker, zipped).body == b"inflated body"


def test_one_entry_per_message_in_order_and_whole_request_refusals(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    broker, sidecar = front
    base = f"MIX-{time.time_ns()}"
    with raw_stub(sidecar.front_endpoint) as stub:
        mixed = raw_send(
            stub,
            raw_message("FrontMixed", f"{base}-0"),
            raw_message("FrontMixed", f"{base}-1", tag="bad\x01tag"),
            raw_message("FrontMixed", f"{base}-2"),
        )
        too_many = raw_send(stub, *(raw_message("FrontMixed", f"{base}-n{i}") for i in range(1001)))
        with_transaction = raw_send(
            stub,
            raw_message("FrontMixed", f"{base}-t0"),
            raw_message("FrontMixed", f"{base}-t1", message_type=definition_pb2.TRANSACTION),
        )
        other_namespace = raw_send(stub, raw_message("FrontMixed", f"{base}-ns"), namespace="ns1")
    assert mixed.status.code == Code.MULTIPLE_RESULTS
    assert [e.message_id for e in mixed.entries] == [f"{base}-{i}" for i in range(3)]
    assert [e.status.code for e in mixed.entries] == [Code.OK, Code.ILLEGAL_MESSAGE_TAG, Code.OK]
    assert "tag" in mixed.entries[1].status.message
    assert len(wait_stored(broker.endpoint, f"{base}-2")) == 1
    assert too_many.status.code == Code.BAD_REQUEST
    assert "1001 messages; the limit is 1000" in too_many.status.message
    assert len(too_many.entries) == 1001
    assert with_transaction.status.code == Code.BAD_REQUEST
    assert "TRANSACTION" in with_transaction.status.message
    assert other_namespace.status.code == Code.BAD_REQUEST
    assert "'ns1'" in other_namespace.status.message
    assert "''" in other_namespace.status.message
    for refused in (f"{base}-1", f"{base}-n0", f"{base}-t0", f"{base}-ns"):
        assert stored_copies(broker.endpoint, refused) == [], refused


class Commit(TransactionChecker):  # type: ignore[misc]  # the official client ships no type information
    def check(self, message: Message) -> TransactionResolution:
        return TransactionResolution.COMMIT


def test_transaction_messages_are_forwarded_to_the_broker(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    broker, sidecar = front
    taken_before = sends(sidecar, "STORED") + sends(sidecar, "REJECTED", "INVALID_ARGUMENT")
    with producer(sidecar.front_endpoint, ("FrontPayments",), Commit()) as p:
        transaction = p.begin_transaction()
        receipt = p.send(message("FrontPayments", b"half, then committed"), transaction)
        transaction.commit()
    assert receipt.transaction_id, "the broker's own transaction id"
    got = consume(broker.endpoint, "FrontPaymentReaders", "FrontPayments", {receipt.message_id})
    assert [m.body for m in got[receipt.message_id]] == [b"half, then committed"]
    taken = sends(sidecar, "STORED") + sends(sidecar, "REJECTED", "INVALID_ARGUMENT")
    assert taken == taken_before, "not through intake"


def test_the_official_client_raises_what_the_sidecar_refuses(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    _broker, sidecar = front
    stored_before = sends(sidecar, "STORED")
    # What the official client lets through to the server: it is the sidecar that refuses.
    with producer(sidecar.front_endpoint, ("FrontBad",)) as p:
        with pytest.raises(BadRequestException) as bad_tag:
            p.send(message("FrontBad", b"x", tag="bad\x01tag"))
        with pytest.raises(BadRequestException) as bad_key:
            p.send(message("FrontBad", b"x", keys="two words"))
    assert bad_tag.value.code == Code.ILLEGAL_MESSAGE_TAG
    assert bad_key.value.code == Code.ILLEGAL_MESSAGE_KEY
    assert sends(sidecar, "STORED") == stored_before


def test_rejected_messages_get_the_protocol_code_and_nothing_is_stored_or_spooled(
    front: tuple[BrokerProcess, FrontSidecar],
) -> None:
    broker, sidecar = front
    base = f"BAD-{time.time_ns()}"
    spooled_before = sends(sidecar, "SPOOLED", "UNAVAILABLE")
    # What the client refuses before sending, or never sends, sent as another client could.
    far = Timestamp(seconds=int(time.time()) + 2 * 86_400)
    cases = {
        "empty": (raw_message("FrontBad", "", b""), Code.MESSAGE_BODY_EMPTY, PayloadEmptyException),
        "large": (
            raw_message("FrontBad", "", b"x" * (BODY_BYTES_MAX + 1)),
            Code.MESSAGE_BODY_TOO_LARGE,
            PayloadTooLargeException,
        ),
        "fifo": (
            raw_message("FrontBad", "", message_type=definition_pb2.FIFO),
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            BadRequestException,
        ),
        "delay": (
            raw_message("FrontBad", "", message_type=definition_pb2.DELAY),
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            BadRequestException,
        ),
        "reserved": (
            raw_message("FrontBad", "", user_properties={"UNIQ_KEY": "mine"}),
            Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
            BadRequestException,
        ),
        "properties": (
            raw_message("FrontBad", "", user_properties={"big": "v" * 17_000}),
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            RequestHeaderFieldsTooLargeException,
        ),
        "system-topic": (raw_message("%DLQ%Group", ""), Code.ILLEGAL_TOPIC, BadRequestException),
        "far-delay": (
            raw_message("FrontBad", "", message_type=definition_pb2.DELAY, delivery_timestamp=far),
            Code.ILLEGAL_DELIVERY_TIME,
            BadRequestException,
        ),
        "gzip": (
            raw_message("FrontBad", "", b"not gzip", body_encoding=definition_pb2.GZIP),
            Code.BAD_REQUEST,
            BadRequestException,
        ),
    }
    answers = {}
    with raw_stub(sidecar.front_endpoint) as stub:
        for name, (m, code, raised) in cases.items():
            m.system_properties.message_id = f"{base}-{name}"
            response = answers[name] = raw_send(stub, m)
            assert response.status.code == code, (name, response)
            with pytest.raises(raised):
                MessagingResultChecker.check(response.status)
            assert response.entries[0].message_id == f"{base}-{name}"
        blank_id = raw_send(stub, raw_message("FrontBad", " "))
    assert blank_id.status.code == Code.ILLEGAL_MESSAGE_ID
    assert "message_id" in blank_id.status.message
    assert "the limit is 16384" in answers["properties"].status.message
    assert f"the limit is {BODY_BYTES_MAX}" in answers["large"].status.message
    assert sends(sidecar, "SPOOLED", "UNAVAILABLE") == spooled_before, "nothing spooled"
    for name in cases:
        assert stored_copies(broker.endpoint, f"{base}-{name}") == [], name


def test_broker_down_sends_are_ok_and_each_is_consumed_once_after_it_returns(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "broker", *BROKER_ARGS)
    sidecar = FrontSidecar(broker.endpoint, "memory://")
    back: BrokerProcess | None = None
    try:
        with producer(sidecar.front_endpoint, ("FrontDown", "Fifo")) as p:
            # Killed: a graceful stop would wait out its grace for the producer's Telemetry
            # stream, which the front forwards to it.
            broker.kill()
            normal = [p.send(message("FrontDown", f"n{i}".encode())) for i in range(6)]
            fifo = [p.send(message("Fifo", f"step {i}".encode(), message_group="down-g"))
                    for i in range(4)]  # fmt: skip
        assert {r.offset for r in normal + fifo} == {-1}, "spooled: offset not known yet"
        back = restart(broker)
        endpoint = back.endpoint
        ids = [r.message_id for r in normal + fifo]
        wait_until(
            lambda: all(len(stored_copies(endpoint, i)) == 1 for i in ids),
            DELIVERY_DEADLINE_S, "every message sent while the broker was down, stored",
        )  # fmt: skip
        steps = [stored_copies(endpoint, r.message_id)[0] for r in fifo]
        assert len({s.queue_id for s in steps}) == 1
        assert [s.body for s in sorted(steps, key=lambda s: s.queue_offset)] == [
            f"step {i}".encode() for i in range(4)
        ], "the group in send order"
        got = consume(endpoint, "FrontDownReaders", "FrontDown", {r.message_id for r in normal})
        assert {i: len(c) for i, c in got.items()} == {r.message_id: 1 for r in normal}
        sidecar.stop()
        assert all(len(stored_copies(endpoint, i)) == 1 for i in ids), "a copy too many"
    finally:
        if sidecar.running():
            sidecar.kill()
        if back is not None:
            back.stop()


def test_a_full_outbox_answers_too_many_requests_raised_after_one_attempt() -> None:
    with refused_endpoint() as nowhere:
        sidecar = FrontSidecar(nowhere, "memory://", "--outbox-entries-max=1")
        try:
            with producer(sidecar.front_endpoint, ("FrontFull",)) as p:
                first = p.send(message("FrontFull", b"spooled"))
                with pytest.raises(TooManyRequestsException) as raised:
                    p.send(message("FrontFull", b"refused"))
            assert first.offset == -1
            assert raised.value.code == Code.TOO_MANY_REQUESTS
            assert sends(sidecar, "REJECTED", "RESOURCE_EXHAUSTED") == 1, "never retried"
        finally:
            sidecar.stop()
