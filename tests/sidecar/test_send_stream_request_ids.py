"""SendStream's request ids (sidecar/send_stream.py): unique among a stream's requests in flight.

Against a real sidecar in front of a real broker, whose process is paused (SIGSTOP) so that the
first request stays in flight: a second request with its request_id is answered at once, REJECTED
(INVALID_ARGUMENT naming ``request_id``) under its own app-given message id, and the stream goes
on; once the broker resumes, the first request and the one beside it are STORED; once the first's
answer came, its id may be used again, and that request is sent too; the stream ends cleanly.
The duplicate's message was never sent: not in the broker's commitlog, not in the outbox; the
first is stored once.

In process, answer_stream itself: a duplicate's refusal is answered while the first is pending,
takes one of the ``in_flight_max`` slots like any request (reading stops at the bound), and never
reaches ``answer_one``; the key is free again once the first's answer was yielded.
"""

from __future__ import annotations

import asyncio
import queue
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from outbox.factory import open_outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.send_stream import answer_stream
from tests.broker.broker_process import BrokerProcess
from tests.sidecar.sidecar_process import (
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    send,
    stored_copies,
    wait_stored,
)

pytestmark = pytest.mark.slow

# Far past the test: the first request's send waits on the paused broker, never times out.
SEND_TIMEOUT_MS = 120_000
STREAM_DEADLINE_S = 3 * CALL_DEADLINE_S


def stream_request(request_id: int, message_id: str) -> api.SendStreamRequest:
    m = message("Orders", message_id.encode(), message_id=message_id)
    return api.SendStreamRequest(request_id=request_id, message=m)


def test_a_duplicate_request_id_in_flight_is_rejected_unsent_and_the_stream_goes_on(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"
    timeout = f"--send-msg-timeout-ms={SEND_TIMEOUT_MS}"
    sidecar = SidecarProcess(broker.endpoint, outbox_url, timeout)
    try:
        duplicate, answered, again = duplicate_in_flight(sidecar, broker)
        assert duplicate.request_id == 7
        assert outcome(duplicate.result) == "rejected", duplicate
        assert duplicate.result.message_id == "dup-7"
        rejected = duplicate.result.rejected
        assert rejected.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], rejected
        assert rejected.field == "request_id", rejected
        assert "in flight" in rejected.reason, rejected
        assert set(answered) == {"first-7", "beside-8"}
        assert answered["first-7"].request_id == 7
        assert answered["beside-8"].request_id == 8
        assert {outcome(r.result) for r in answered.values()} == {"stored"}, answered
        assert (again.request_id, again.result.message_id) == (7, "again-7")
        assert outcome(again.result) == "stored", again

        for sent in ("first-7", "beside-8", "again-7"):
            assert len(wait_stored(broker.endpoint, sent)) == 1, sent
        assert stored_copies(broker.endpoint, "dup-7") == [], "the duplicate's message was sent"
        sidecar.stop()
        with open_outbox(outbox_url) as outbox:
            assert [e.message_id for e in outbox.scan_all()] == []
    finally:
        sidecar.kill()


Answer = api.SendStreamResponse


def duplicate_in_flight(
    sidecar: SidecarProcess, broker: BrokerProcess
) -> tuple[Answer, dict[str, Answer], Answer]:
    """On one stream, while the broker is paused: request 7, a second 7 and an 8; then, the
    broker resumed and the first 7 answered, 7 again. The duplicate's answer, the two others'
    by message id, and the last 7's."""
    requests: queue.Queue[api.SendStreamRequest | None] = queue.Queue()

    def request_iterator() -> Iterator[api.SendStreamRequest]:
        while (r := requests.get()) is not None:
            yield r

    paused = False
    try:
        with sidecar.client() as stub:
            assert outcome(send(stub, message("Orders", b"warm"))) == "stored"  # route known
            broker.signal(signal.SIGSTOP)
            paused = True
            responses = stub.SendStream(request_iterator(), timeout=STREAM_DEADLINE_S)
            for r in (stream_request(7, "first-7"), stream_request(7, "dup-7"),
                      stream_request(8, "beside-8")):  # fmt: skip
                requests.put(r)
            # Nothing can be stored while the broker is paused: the duplicate's answer is first.
            duplicate = next(responses)
            broker.signal(signal.SIGCONT)
            paused = False
            answered = {r.result.message_id: r for r in (next(responses), next(responses))}
            requests.put(stream_request(7, "again-7"))  # 7 was answered: free again
            again = next(responses)
            requests.put(None)
            assert list(responses) == [], "one answer per request"
    finally:
        requests.put(None)  # the client's request thread ends, whatever happened
        if paused:
            broker.signal(signal.SIGCONT)
    return duplicate, answered, again


# -- answer_stream in process ---------------------------------------------------------------------
def test_a_duplicate_takes_a_slot_is_answered_at_once_and_never_reaches_answer_one() -> None:
    async def run() -> None:
        fed: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue()
        held = {"a": asyncio.Event(), "c": asyncio.Event()}
        seen_by_answer_one: list[str] = []

        async def requests() -> AsyncIterator[tuple[int, str]]:
            while (request := await fed.get()) is not None:
                yield request

        async def answer_one(request: tuple[int, str]) -> str:
            seen_by_answer_one.append(request[1])
            if request[1] in held:
                await held[request[1]].wait()
            return f"ok {request[1]}"

        def refuse(request: tuple[int, str]) -> str:
            return f"duplicate {request[1]}"

        answers = answer_stream(requests(), answer_one, 2, lambda r: r[0], refuse)
        for request in ((1, "a"), (1, "dup")):
            fed.put_nowait(request)
        assert await anext(answers) == "duplicate dup"  # while "a" is pending
        fed.put_nowait((2, "b"))
        assert await anext(answers) == "ok b"
        # "a" and "c" hold both slots: "dup2" is read but waits for one, so its refusal comes
        # only after "c"'s answer freed a slot.
        for request in ((3, "c"), (1, "dup2")):
            fed.put_nowait(request)
        held["c"].set()
        assert await anext(answers) == "ok c"
        assert await anext(answers) == "duplicate dup2"
        held["a"].set()
        assert await anext(answers) == "ok a"
        fed.put_nowait((1, "after"))  # "a"'s answer went out: 1 is free again
        assert await anext(answers) == "ok after"
        fed.put_nowait(None)
        assert [a async for a in answers] == []
        assert seen_by_answer_one == ["a", "b", "c", "after"]

    asyncio.run(run())
