"""The batching senders against a real sidecar and broker. They prove:

- 64 concurrent sends (threads on BatchingSender, gather on AsyncBatchingSender) are all Stored,
  in fewer SendBatch requests than messages; a bad message among them fails its own send only;
- a whole request refused as UNAVAILABLE (no sidecar yet) is retried with the same message ids,
  and the messages are stored under them once the sidecar is up;
- close() answers every message handed over: stored when the sidecar is up, UnavailableError
  when none is reachable — none is left pending;
- send() waits while the buffer is full, and past its deadline raises ResourceExhaustedError;
  the messages already taken end in DeadlineExceededError when the sidecar never answers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocketbox_client import (
    AsyncClient,
    Client,
    DeadlineExceededError,
    InvalidMessageError,
    Message,
    ResourceExhaustedError,
    SendResult,
    Stored,
    UnavailableError,
)
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.client.test_client import retried_ids
from tests.services import free_port
from tests.sidecar.sidecar_process import SidecarProcess, wait_stored
from tests.sidecar.test_sidecar_process import Blackhole

pytestmark = pytest.mark.slow

CONCURRENT_SENDS = 64
DEADLINE_S = 30.0


def test_concurrent_sends_from_threads_share_requests(
    sidecar: SidecarProcess, broker: BrokerProcess
) -> None:
    start = threading.Barrier(CONCURRENT_SENDS)
    with Client(sidecar.endpoint) as client, client.batching_sender() as sender:

        def send(i: int) -> SendResult:
            start.wait(DEADLINE_S)
            return sender.send(Message("Orders", f"t{i}".encode())).result(DEADLINE_S)

        with ThreadPoolExecutor(CONCURRENT_SENDS) as pool:
            results = list(pool.map(send, range(CONCURRENT_SENDS)))
        stats = sender.stats
        good = sender.send(Message("Orders", b"good"))
        bad = sender.send(Message("Orders", b"", message_id="bad"))
        sender.flush()
    assert all(isinstance(r, Stored) for r in results), results
    assert len({r.message_id for r in results}) == CONCURRENT_SENDS
    assert stats.messages_sent == CONCURRENT_SENDS
    assert stats.batches_sent < CONCURRENT_SENDS, stats
    assert isinstance(good.result(), Stored)
    with pytest.raises(InvalidMessageError) as raised:
        bad.result()
    assert (raised.value.field, raised.value.message_id) == ("body", "bad")
    [copy] = wait_stored(broker.endpoint, results[0].message_id)
    assert copy.body == b"t0"


def test_concurrent_sends_from_tasks_share_requests(
    sidecar: SidecarProcess, broker: BrokerProcess
) -> None:
    async def run() -> tuple[list[SendResult], int, BaseException | SendResult]:
        async with (
            AsyncClient(sidecar.endpoint) as client,
            client.batching_sender() as sender,
        ):
            results = await asyncio.gather(
                *(sender.send(Message("Orders", f"a{i}".encode())) for i in range(CONCURRENT_SENDS))
            )
            batches = sender.stats.batches_sent
            good, bad = await asyncio.gather(
                sender.send(Message("Orders", b"good")),
                sender.send(Message("Orders", b"", message_id="bad")),
                return_exceptions=True,
            )
            assert isinstance(good, Stored)
            return results, batches, bad

    results, batches, bad = asyncio.run(run())
    assert all(isinstance(r, Stored) for r in results), results
    assert len({r.message_id for r in results}) == CONCURRENT_SENDS
    assert batches < CONCURRENT_SENDS
    assert isinstance(bad, InvalidMessageError)
    assert bad.field == "body"
    [copy] = wait_stored(broker.endpoint, results[-1].message_id)
    assert copy.body == f"a{CONCURRENT_SENDS - 1}".encode()


def test_a_refused_request_is_retried_with_the_same_message_ids(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="rocketbox_client")
    port = free_port()
    sidecar: SidecarProcess | None = None
    with Client(
        f"127.0.0.1:{port}", timeout_s=60, unavailable_retries_max=50, retry_backoff_ms=50
    ) as client:
        sender = client.batching_sender()
        first = sender.send(Message("Orders", b"early"))
        try:
            wait_until(lambda: retried_ids(caplog), DEADLINE_S, "the sender's first retry")
            sidecar = SidecarProcess(broker.endpoint, "memory://", "--listen", f"127.0.0.1:{port}")
            result = first.result(DEADLINE_S)
            sender.close()
        finally:
            if sidecar is not None:
                sidecar.stop()
    assert isinstance(result, Stored), result
    assert set(retried_ids(caplog)) == {result.message_id}
    [copy] = wait_stored(broker.endpoint, result.message_id)
    assert copy.body == b"early"


def test_close_answers_every_message_handed_over(sidecar: SidecarProcess) -> None:
    with Client(sidecar.endpoint) as client:
        sender = client.batching_sender(batches_in_flight_max=2)
        futures = [sender.send(Message("Orders", f"c{i}".encode())) for i in range(300)]
        sender.close()
        assert all(f.done() for f in futures), "close returned with messages unanswered"
        assert all(isinstance(f.result(), Stored) for f in futures)
        with pytest.raises(RuntimeError, match="closed"):
            sender.send(Message("Orders", b"after close"))


def test_close_answers_every_message_when_no_sidecar_is_reachable() -> None:
    async def run_async(target: str) -> list[BaseException | SendResult]:
        async with AsyncClient(target, unavailable_retries_max=1, retry_backoff_ms=10) as client:
            sender = client.batching_sender()
            await sender.start()
            sends = [asyncio.ensure_future(sender.send(Message("Orders", b"x"))) for _ in range(50)]
            await asyncio.sleep(0)  # sleep: one turn, in which each send reaches the buffer
            await sender.close()
            assert all(s.done() for s in sends)
            return await asyncio.gather(*sends, return_exceptions=True)

    target = f"127.0.0.1:{free_port()}"
    with Client(target, unavailable_retries_max=1, retry_backoff_ms=10) as client:
        sender = client.batching_sender()
        futures = [sender.send(Message("Orders", b"x")) for _ in range(50)]
    # The client's close closed the sender.
    assert all(f.done() for f in futures)
    assert all(isinstance(f.exception(), UnavailableError) for f in futures)
    answers = asyncio.run(run_async(target))
    assert len(answers) == 50
    assert all(isinstance(a, UnavailableError) for a in answers), answers


def test_a_full_buffer_blocks_send_until_its_deadline() -> None:
    hung = Blackhole()  # a "sidecar" that accepts connections and never answers
    held_s, waiting_s = 3.0, 0.5
    try:
        with Client(f"127.0.0.1:{hung.port}", timeout_s=held_s) as client:
            sender = client.batching_sender(
                batch_messages_max=1, batches_in_flight_max=1, buffer_messages_max=2
            )
            # One batch of one message in flight (hung), two messages in the buffer.
            taken = [sender.send(Message("Orders", f"b{i}".encode())) for i in range(3)]
            started_s = time.monotonic()
            with pytest.raises(ResourceExhaustedError) as raised:
                sender.send(Message("Orders", b"no room"), timeout_s=waiting_s)
            waited_s = time.monotonic() - started_s
            sender.close()
    finally:
        hung.close()
    assert waiting_s <= waited_s < held_s
    assert "buffer_messages_max=2" in raised.value.reason
    assert "not sent" in raised.value.reason
    # The hung request ran out of time, and the messages behind it with it.
    assert all(isinstance(f.exception(), DeadlineExceededError) for f in taken)
    assert "may or may not be stored" in str(taken[0].exception())
