"""``Client`` and ``AsyncClient`` against a real sidecar and broker. They prove:

- a message is answered Stored under the id the client stamped (or the app's own), and the
  broker holds it under that id;
- the broker unreachable: Spooled with its cause; the outbox full: ResourceExhaustedError with
  the sidecar's retry-after;
- a message the sidecar refuses raises InvalidMessageError naming the field (TopicNotFoundError
  for a topic a strict broker lacks), chained to the gRPC error, not retriable;
- send_batch answers each message in its slot, one bad message among good ones failing alone,
  and refuses a batch over the sidecar's limit before sending it;
- UNAVAILABLE is retried with the same message id: a send started before its sidecar exists is
  stored once the sidecar comes up, under the id it was stamped with before the first attempt;
  with no sidecar at all it ends in UnavailableError after the retries;
- a deadline that passes raises DeadlineExceededError, which says the message may be stored.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import grpc
import pytest

from rocketbox_client import (
    AsyncClient,
    Client,
    DeadlineExceededError,
    InvalidMessageError,
    Message,
    RejectedError,
    ResourceExhaustedError,
    SendResult,
    Spooled,
    Stored,
    TopicNotFoundError,
    UnavailableError,
)
from rocketbox_client.message_id import GENERATOR, MESSAGE_ID_LENGTH
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.services import free_port
from tests.sidecar.sidecar_process import SidecarProcess, wait_stored
from tests.sidecar.test_sidecar_process import Blackhole

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
RETRY_LOG = re.compile(r"UNAVAILABLE .*first message_id=(\S+)|UNAVAILABLE .*message_id=(\S+)")


def client_prefix() -> str:
    """The part of a V1 id naming the process that stamped it: "01" and this process's node."""
    return GENERATOR.next_id()[:18]


def test_send_is_stored_under_the_id_the_client_stamped(
    sidecar: SidecarProcess, broker: BrokerProcess
) -> None:
    with Client(sidecar.endpoint) as client:
        result = client.send(
            Message("Orders", b"order 1", tag="created", keys=("o-1",), properties={"r": "eu"})
        )
        own = client.send(Message("Orders", b"order 2", message_id="order-2"))
    assert isinstance(result, Stored), result
    assert len(result.message_id) == MESSAGE_ID_LENGTH
    assert result.message_id[:18] == client_prefix(), "stamped by the sidecar, not the client"
    assert result.durable
    assert result.attempts == 1
    [copy] = wait_stored(broker.endpoint, result.message_id)
    assert (copy.topic, copy.body, copy.queue_offset) == ("Orders", b"order 1", result.queue_offset)
    assert isinstance(own, Stored)
    assert own.message_id == "order-2"
    [copy] = wait_stored(broker.endpoint, "order-2")
    assert copy.body == b"order 2"


def test_async_send_is_stored(sidecar: SidecarProcess, broker: BrokerProcess) -> None:
    async def send() -> SendResult:
        async with AsyncClient(sidecar.endpoint) as client:
            return await client.send(Message("Orders", b"async order"))

    result = asyncio.run(send())
    assert isinstance(result, Stored), result
    [copy] = wait_stored(broker.endpoint, result.message_id)
    assert copy.body == b"async order"


def test_broker_unreachable_spools_until_the_outbox_is_full() -> None:
    sidecar = SidecarProcess(f"127.0.0.1:{free_port()}", "memory://", "--outbox-entries-max=2")
    try:
        with Client(sidecar.endpoint) as client:
            kept = [client.send(Message("Orders", f"m{i}".encode())) for i in range(2)]
            with pytest.raises(ResourceExhaustedError) as raised:
                client.send(Message("Orders", b"one too many", message_id="too-many"))
    finally:
        sidecar.stop()
    for spooled in kept:
        assert isinstance(spooled, Spooled), spooled
        assert spooled.cause == "UNAVAILABLE"
        assert not spooled.maybe_stored, "a refused connection: nothing went out"
        assert spooled.next_attempt_time_ms > time.time() * 1000 - DEADLINE_S * 1000
        assert spooled.message_id[:18] == client_prefix()
    full = raised.value
    assert full.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert full.message_id == "too-many"
    assert full.retry_after_ms is not None
    assert full.retry_after_ms > 0
    assert full.retriable
    assert "outbox is full" in full.reason


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (Message("Orders", b""), "body"),
        (Message("no spaces allowed", b"x"), "topic"),
        (Message("Orders", b"x", tag="a|b"), "tag"),
        (Message("Orders", b"x", properties={"UNIQ_KEY": "mine"}), "user_properties"),
        (Message("Orders", b"x", message_id="two words"), "message_id"),
    ],
)
def test_an_invalid_message_is_rejected_naming_the_field(
    sidecar: SidecarProcess, message: Message, field: str
) -> None:
    with Client(sidecar.endpoint) as client, pytest.raises(InvalidMessageError) as raised:
        client.send(message)
    error = raised.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field == field
    assert error.reason
    assert str(error).startswith(f"INVALID_ARGUMENT: {field}: "), str(error)
    assert not error.retriable
    assert error.message_id == (message.message_id or error.message_id)
    assert error.message_id
    assert isinstance(error.__cause__, grpc.RpcError)


def test_a_topic_a_strict_broker_lacks_is_not_found(tmp_path: Path) -> None:
    strict = BrokerProcess(tmp_path / "strict")  # no --auto-create-topic
    sidecar = SidecarProcess(strict.endpoint, "memory://")
    try:
        with Client(sidecar.endpoint) as client, pytest.raises(TopicNotFoundError) as raised:
            client.send(Message("Missing", b"x"))
    finally:
        sidecar.stop()
        strict.kill()
    assert raised.value.field == "topic"
    assert isinstance(raised.value, RejectedError)
    assert not raised.value.retriable


def test_send_batch_answers_each_message_in_its_slot(
    sidecar: SidecarProcess, broker: BrokerProcess
) -> None:
    messages = [
        Message("Orders", b"first"),
        Message("Orders", b"", message_id="the-bad-one"),
        Message("Orders", b"third", message_id="the-third"),
    ]
    with Client(sidecar.endpoint) as client:
        first, bad, third = client.send_batch(messages)
        assert client.send_batch([]) == []
        with pytest.raises(InvalidMessageError) as too_many:
            client.send_batch([Message("Orders", b"x")] * 1_001)
    assert isinstance(first, Stored)
    assert isinstance(third, Stored)
    assert third.message_id == "the-third"
    assert isinstance(bad, InvalidMessageError)
    assert (bad.field, bad.message_id) == ("body", "the-bad-one")
    assert [c.body for c in wait_stored(broker.endpoint, first.message_id)] == [b"first"]
    assert too_many.value.field == "messages"
    assert "the limit is 1000" in too_many.value.reason


def test_unavailable_is_retried_with_the_message_id_stamped_before_the_first_attempt(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="rocketbox_client")
    port = free_port()
    results: list[SendResult] = []
    # Nothing listens on the port yet: the first attempts are refused, and retried.
    client = Client(
        f"127.0.0.1:{port}", timeout_s=60, unavailable_retries_max=50, retry_backoff_ms=50
    )
    sending = threading.Thread(
        target=lambda: results.append(client.send(Message("Orders", b"late")))
    )
    sending.start()
    sidecar: SidecarProcess | None = None
    try:
        wait_until(lambda: retried_ids(caplog), DEADLINE_S, "the client's first retry")
        sidecar = SidecarProcess(broker.endpoint, "memory://", "--listen", f"127.0.0.1:{port}")
        sending.join(DEADLINE_S)
        assert not sending.is_alive(), "no answer once the sidecar came up"
    finally:
        client.close()
        if sidecar is not None:
            sidecar.stop()
    [result] = results
    assert isinstance(result, Stored), result
    assert set(retried_ids(caplog)) == {result.message_id}, "a retry changed the message id"
    [copy] = wait_stored(broker.endpoint, result.message_id)
    assert copy.body == b"late"


def retried_ids(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The message ids the client's retry log lines name."""
    return [
        next(g for g in m.groups() if g)
        for r in caplog.records
        if (m := RETRY_LOG.search(r.getMessage()))
    ]


def test_no_sidecar_at_all_ends_in_unavailable_after_the_retries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="rocketbox_client")
    with Client(
        f"127.0.0.1:{free_port()}", unavailable_retries_max=2, retry_backoff_ms=10
    ) as client:
        with pytest.raises(UnavailableError) as raised:
            client.send(Message("Orders", b"x", message_id="nowhere"))
        with pytest.raises(UnavailableError) as batch_raised:
            client.send_batch([Message("Orders", b"x")])
    assert raised.value.message_id == "nowhere"
    assert raised.value.retriable
    assert isinstance(raised.value.__cause__, grpc.RpcError)
    assert batch_raised.value.message_id is None
    assert retried_ids(caplog).count("nowhere") == 2


def test_a_deadline_that_passes_raises_deadline_exceeded() -> None:
    hung = Blackhole()  # the broker accepts connections and never answers
    sidecar = SidecarProcess(f"127.0.0.1:{hung.port}", "memory://", "--send-msg-timeout-ms=5000")

    async def send_async() -> None:
        async with AsyncClient(sidecar.endpoint, timeout_s=0.5) as client:
            await client.send(Message("Orders", b"x", message_id="async-late"))

    try:
        with Client(sidecar.endpoint, timeout_s=0.5) as client:
            started_s = time.monotonic()
            with pytest.raises(DeadlineExceededError) as raised:
                client.send(Message("Orders", b"x", message_id="late"))
            elapsed_s = time.monotonic() - started_s
        with pytest.raises(DeadlineExceededError) as async_raised:
            asyncio.run(send_async())
    finally:
        sidecar.stop()
        hung.close()
    error = raised.value
    assert error.message_id == "late"
    assert "may or may not be stored" in str(error)
    assert error.retriable
    assert isinstance(error.__cause__, grpc.RpcError)
    assert error.__cause__.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert elapsed_s < 3.0, "the client's deadline, not the sidecar's send timeout"
    assert async_raised.value.message_id == "async-late"
