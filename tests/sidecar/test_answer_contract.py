"""Exactly one answer per message, whatever the message, from a real sidecar in front of a real
broker, spooling to a real Redis:

- Send, SendBatch and SendStream, given arbitrary messages (hypothesis: any unicode in every
  string field, bodies up to 4 KiB, delivery times in and out of google.protobuf.Timestamp's
  range, optional fields set or not, ids given or not), answer each message exactly once and
  well: stored, spooled or rejected, under the app's id when it gave one; a rejection's code is a
  real error, never UNKNOWN (nor INTERNAL: no message may find a bug), and INVALID_ARGUMENT names
  a field of the message;
- every message id the broker's commitlog or the outbox holds was answered STORED or SPOOLED,
  and every id answered STORED is in the commitlog;
- the reported cases of an invalid delivery_time (nanos or seconds outside the Timestamp's
  range): Send answers INVALID_ARGUMENT naming delivery_time and the limit; a SendBatch of 5 good
  messages and 1 bad one answers each (the good ones STORED, stored once); a SendStream answers
  every request, the bad one too, and the sidecar logs no task exception;
- a SendStream request without a message is answered INVALID_ARGUMENT with its request_id.

A bug and a failing hook are answered as test_answer_boundary.py shows.
"""

from __future__ import annotations

import mmap
import re
import string
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import redis
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.store.codec.scan import SegmentScanner
from outbox.entry import OutboxLimits
from outbox.factory import open_outbox
from rocketbox_api.protobuf_ranges import TIMESTAMP_SECONDS_MAX, TIMESTAMP_SECONDS_MIN
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from tests.broker.broker_process import BrokerProcess
from tests.services import redis_url, unique_name
from tests.sidecar.sidecar_process import (
    BROKER_ARGS,
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    set_flow_control,
    stored_copies,
)

pytestmark = pytest.mark.slow

MESSAGE_FIELDS = frozenset(f.name for f in api.Message.DESCRIPTOR.fields) | {"message"}
NEVER_ANSWERED = (grpc.StatusCode.OK, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}
SCAN_BATCH_RECORDS_MAX = 4_096
# A commitlog segment file: its first phy_offset, 20 digits (a file being prepared is not one).
SEGMENT_NAME = re.compile(r"\d{20}")
EXAMPLES_MAX = 120
# Sent with hypothesis's examples: a real topic of each kind, and whatever text it draws.
TOPICS = ("Orders", "Fifo", "Contract")
NOW_S = int(time.time())


@dataclass
class Books:
    """What the sidecar answered over the whole module, by message id."""

    taken: set[str] = field(default_factory=set)  # answered STORED or SPOOLED
    stored: set[str] = field(default_factory=set)  # answered STORED


@dataclass
class Contract:
    broker: BrokerProcess
    sidecar: SidecarProcess
    stub: sidecar_pb2_grpc.SidecarServiceStub
    outbox_url: str
    books: Books


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Contract]:
    prefix = unique_name("rocketbox_contract")
    outbox_url = f"{redis_url()}?prefix={prefix}"
    broker = BrokerProcess(tmp_path_factory.mktemp("broker"), *BROKER_ARGS)
    sidecar = SidecarProcess(broker.endpoint, outbox_url)
    try:
        with sidecar.client() as stub:
            yield Contract(broker, sidecar, stub, outbox_url, Books())
        sidecar.stop()  # and exit 0, after all that
        assert "Task exception was never retrieved" not in sidecar.output()
    finally:
        sidecar.kill()
        broker.kill()
        client = redis.Redis.from_url(redis_url())
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()


# -- arbitrary messages ----------------------------------------------------------------------------
# Each message is a valid one with up to three of its fields drawn from anything instead: a
# message of wholly arbitrary fields is nearly always refused for its first field, and the paths
# of a message taken (stored, spooled) would go untried.
WILD_FIELDS = (
    "topic", "body", "tag", "keys", "message_group", "delivery_time", "user_properties",
    "message_id",
)  # fmt: skip
anything = st.text(max_size=24)
names = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=16)
seconds = st.one_of(
    st.integers(NOW_S - 3 * 86_400, NOW_S + 3 * 86_400),
    st.integers(TIMESTAMP_SECONDS_MIN - 2, TIMESTAMP_SECONDS_MIN + 2),
    st.integers(TIMESTAMP_SECONDS_MAX - 2, TIMESTAMP_SECONDS_MAX + 2),
    st.integers(-(2**63), 2**63 - 1),
)
nanos = st.one_of(st.integers(0, 999_999_999), st.integers(-(2**31), 2**31 - 1))


@st.composite
def messages(draw: st.DrawFn) -> api.Message:
    wild = draw(st.sets(st.sampled_from(WILD_FIELDS), max_size=3))

    def text(name: str) -> str:
        return draw(anything if name in wild else names)

    topic = draw(anything) if "topic" in wild else draw(st.sampled_from(TOPICS))
    m = api.Message(
        topic=topic,
        body=draw(st.binary(min_size=0 if "body" in wild else 1, max_size=4096)),
        keys=[text("keys") for _ in range(draw(st.integers(0, 3)))],
        user_properties={text("user_properties"): text("user_properties")
                         for _ in range(draw(st.integers(0, 3)))},
    )  # fmt: skip
    if draw(st.booleans()):
        m.tag = text("tag")
    fifo = topic == "Fifo"
    if ("message_group" in wild and draw(st.booleans())) or fifo:
        m.message_group = text("message_group")
    if "delivery_time" in wild and draw(st.booleans()):
        m.delivery_time.CopyFrom(timestamp_pb2.Timestamp(seconds=draw(seconds), nanos=draw(nanos)))
    elif not fifo and draw(st.integers(0, 3)) == 0:
        ahead_s = draw(st.integers(0, 23 * 3600))
        m.delivery_time.CopyFrom(timestamp_pb2.Timestamp(seconds=int(time.time()) + ahead_s))
    if "message_id" in wild:
        m.message_id = draw(anything)
    elif draw(st.booleans()):
        m.message_id = str(draw(st.uuids()))
    return m


# -- what a well-formed answer is ----------------------------------------------------------------
def check_result(contract: Contract, sent: api.Message | None, result: api.SendResult) -> None:
    """One message's answer: exactly one outcome, well formed; noted in the books."""
    kind = outcome(result)
    assert kind in ("stored", "spooled", "rejected"), result
    if sent is not None and sent.HasField("message_id"):
        assert result.message_id == sent.message_id
    if kind == "rejected":
        check_rejection(
            STATUS_CODES.get(result.rejected.code), result.rejected.field, result.rejected.reason
        )
        return
    assert result.message_id, result
    contract.books.taken.add(result.message_id)
    if kind == "stored":
        contract.books.stored.add(result.message_id)


def check_rejection(code: grpc.StatusCode | None, field_name: str, reason: str) -> None:
    assert code is not None, "not a gRPC code"
    assert code not in NEVER_ANSWERED, f"{code.name}: {reason}"
    assert reason
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        assert field_name in MESSAGE_FIELDS, f"{field_name!r}: {reason}"


def check_books(contract: Contract) -> None:
    """Whatever the broker or the outbox holds was answered STORED or SPOOLED; whatever was
    answered STORED, the broker holds."""
    held = commitlog_ids(contract.broker.data_dir)
    assert contract.books.stored <= held
    with open_outbox(contract.outbox_url, OutboxLimits()) as outbox:
        held |= {entry.message.message_id for entry in outbox.scan_all()}
    assert held <= contract.books.taken, f"held yet never answered: {held - contract.books.taken}"


def commitlog_ids(data_dir: Path) -> set[str]:
    """The message ids of every record in the broker's commitlog, read as the reconciliation
    reads it (broker/store/codec/scan.py)."""
    ids: set[str] = set()
    segments = (p for p in (data_dir / "commitlog").iterdir() if SEGMENT_NAME.fullmatch(p.name))
    for path in sorted(segments):
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            scanner = SegmentScanner(buf, int(path.name), len(buf))
            for batch in scanner.batches(SCAN_BATCH_RECORDS_MAX):
                ids.update(i for i in batch.message_id.tolist() if i)
    return ids


def send_call(contract: Contract, m: api.Message) -> None:
    try:
        response: api.SendResponse = contract.stub.Send(
            api.SendRequest(message=m), timeout=CALL_DEADLINE_S
        )
    except grpc.RpcError as e:
        status = rpc_status.from_call(e)  # type: ignore[arg-type]  # a grpc.RpcError raised by a call is also a grpc.Call
        field_name = ""
        for detail in status.details if status else ():
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad):
                field_name = bad.field_violations[0].field
        check_rejection(e.code(), field_name, e.details() or "")
        return
    assert outcome(response.result) in ("stored", "spooled")
    check_result(contract, m, response.result)


def stream_call(
    contract: Contract, requests: Sequence[api.SendStreamRequest]
) -> dict[int, api.SendResult]:
    responses = list(contract.stub.SendStream(iter(requests), timeout=CALL_DEADLINE_S))
    ids = [r.request_id for r in responses]
    assert sorted(ids) == sorted(r.request_id for r in requests), "one answer per request"
    return {r.request_id: r.result for r in responses}


@contextmanager
def throttling(contract: Contract, on: bool) -> Iterator[None]:
    """The broker's flow control on for the block: what the sidecar sends then is spooled
    (THROTTLED), and FIFO groups it spools are fenced until the resend pool delivers them."""
    if not on:
        yield
        return
    set_flow_control(contract.broker.endpoint, True)
    try:
        yield
    finally:
        set_flow_control(contract.broker.endpoint, False)


# -- the properties --------------------------------------------------------------------------------
PROPERTY = settings(
    max_examples=EXAMPLES_MAX,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(m=messages(), throttled=st.booleans())
def test_send_answers_any_message_once(contract: Contract, m: api.Message, throttled: bool) -> None:
    with throttling(contract, throttled):
        send_call(contract, m)
    check_books(contract)


@PROPERTY
@given(batch=st.lists(messages(), max_size=8), throttled=st.booleans())
def test_send_batch_answers_each_message_once(
    contract: Contract, batch: list[api.Message], throttled: bool
) -> None:
    with throttling(contract, throttled):
        response: api.SendBatchResponse = contract.stub.SendBatch(
            api.SendBatchRequest(messages=batch), timeout=CALL_DEADLINE_S
        )
    assert len(response.results) == len(batch)
    for m, result in zip(batch, response.results, strict=True):
        check_result(contract, m, result)
    check_books(contract)


@PROPERTY
@given(batch=st.lists(messages() | messages() | st.none(), max_size=8), throttled=st.booleans())
def test_send_stream_answers_each_request_once(
    contract: Contract, batch: list[api.Message | None], throttled: bool
) -> None:
    requests = [
        api.SendStreamRequest(request_id=i, message=m) if m else api.SendStreamRequest(request_id=i)
        for i, m in enumerate(batch)
    ]
    with throttling(contract, throttled):
        results = stream_call(contract, requests)
    for i, m in enumerate(batch):
        check_result(contract, m, results[i])
    check_books(contract)


# -- the reported cases ----------------------------------------------------------------------------
BAD_TIMESTAMPS = {
    "nanos": (timestamp_pb2.Timestamp(seconds=NOW_S, nanos=-1), "nanos is -1"),
    "seconds": (
        timestamp_pb2.Timestamp(seconds=TIMESTAMP_SECONDS_MAX + 1),
        f"seconds is {TIMESTAMP_SECONDS_MAX + 1}",
    ),
}


@pytest.mark.parametrize("part", sorted(BAD_TIMESTAMPS))
def test_send_of_an_invalid_delivery_time_names_the_field_and_the_limit(
    contract: Contract, part: str
) -> None:
    timestamp, words = BAD_TIMESTAMPS[part]
    with pytest.raises(grpc.RpcError) as raised:
        contract.stub.Send(
            api.SendRequest(message=message("Orders", delivery_time=timestamp)),
            timeout=CALL_DEADLINE_S,
        )
    error: grpc.Call = raised.value  # type: ignore[assignment]  # a grpc.RpcError raised by a call is also a grpc.Call
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = error.details() or ""
    assert details.startswith(f"delivery_time: {words}; google.protobuf.Timestamp allows")
    assert ("999,999,999" if part == "nanos" else "years 0001 to 9999") in details


def good_and_bad(tag: str) -> list[api.Message]:
    good = [message("Orders", f"{tag} {i}".encode(), message_id=f"{tag}-{i}") for i in range(5)]
    bad = message(
        "Orders", message_id=f"{tag}-bad", delivery_time=timestamp_pb2.Timestamp(nanos=-1)
    )
    return [*good[:3], bad, *good[3:]]


def assert_good_stored_bad_rejected(
    contract: Contract, batch: list[api.Message], results: list[api.SendResult]
) -> None:
    for m, result in zip(batch, results, strict=True):
        assert result.message_id == m.message_id
        if m.HasField("delivery_time"):
            assert outcome(result) == "rejected"
            assert result.rejected.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
            assert result.rejected.field == "delivery_time"
            assert result.rejected.reason.startswith("nanos is -1")
        else:
            assert outcome(result) == "stored", result
            assert len(stored_copies(contract.broker.endpoint, m.message_id)) == 1


def test_a_batch_with_one_invalid_delivery_time_answers_every_message(contract: Contract) -> None:
    batch = good_and_bad("batch")
    response: api.SendBatchResponse = contract.stub.SendBatch(
        api.SendBatchRequest(messages=batch), timeout=CALL_DEADLINE_S
    )
    assert_good_stored_bad_rejected(contract, batch, list(response.results))


def test_a_stream_with_one_invalid_delivery_time_answers_every_request(
    contract: Contract,
) -> None:
    batch = good_and_bad("stream")
    requests = [api.SendStreamRequest(request_id=10 + i, message=m) for i, m in enumerate(batch)]
    results = stream_call(contract, requests)
    assert_good_stored_bad_rejected(contract, batch, [results[10 + i] for i in range(len(batch))])
    assert "Task exception was never retrieved" not in contract.sidecar.output()


def test_a_stream_request_without_a_message_is_answered_with_its_request_id(
    contract: Contract,
) -> None:
    requests = [
        api.SendStreamRequest(request_id=7),
        api.SendStreamRequest(request_id=8, message=message("Orders")),
    ]
    results = stream_call(contract, requests)
    assert outcome(results[7]) == "rejected"
    assert results[7].rejected.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert (results[7].rejected.field, results[7].rejected.reason) == ("message", "is required")
    assert outcome(results[8]) == "stored"
