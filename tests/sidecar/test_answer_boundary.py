"""The per-message boundary of the sidecar's service (sidecar/server.py), in a service of this
process over a real intake (a producer to a scripted broker of this process, a memory outbox):

- with a bug injected for one topic, that message is answered INTERNAL (Send's status, a
  Rejection in SendBatch and SendStream) while its neighbours are stored;
- an on_sent hook that raises changes no answer;
- each kind of failure is logged with its traceback once, however often it happens within the
  interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
import pytest

from outbox.entry import OutboxLimits, OutboxMessage
from outbox.factory import open_outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from sidecar.async_outbox import AsyncOutbox
from sidecar.backoff import Backoff
from sidecar.channels import Endpoint
from sidecar.coalescer import CoalesceConfig, SendCoalescer
from sidecar.fifo_fence import FifoFence
from sidecar.intake import Accepted, Intake
from sidecar.ledger import SentAnswer
from sidecar.metrics import SidecarMetrics
from sidecar.producer import Producer, ProducerConfig
from sidecar.server import SidecarService
from sidecar.spool_writer import SpoolWriter
from tests.sidecar.scripted_broker import scripted_broker
from tests.sidecar.sidecar_process import CALL_DEADLINE_S, message, outcome

BUG_TOPIC = "Bug"


class Misbehaving(SidecarService):
    """The service with a bug on demand: a message to BUG_TOPIC raises where intake would run
    (no input reaches a bug on purpose; test_answer_contract.py looks for one)."""

    async def _admit(self, message: OutboxMessage) -> Accepted:
        if message.topic == BUG_TOPIC:
            raise RuntimeError("a bug, injected")
        return await super()._admit(message)


@dataclass
class InProcess:
    stub: sidecar_pb2_grpc.SidecarServiceStub
    service: Misbehaving
    sent: list[str]  # the ids given to on_sent


@asynccontextmanager
async def in_process(broker_endpoint: str) -> AsyncIterator[InProcess]:
    """Misbehaving served by a grpc.aio server of this process, over a real intake: a producer
    to the broker and a memory outbox. Its on_sent notes the ids, then fails."""
    metrics = SidecarMetrics()
    outbox = AsyncOutbox(open_outbox("memory://", OutboxLimits()), threads=2)
    producer = Producer(ProducerConfig(access_points=(Endpoint.parse(broker_endpoint),)))
    intake = Intake(
        SendCoalescer(producer, CoalesceConfig(), metrics), SpoolWriter(outbox, metrics),
        FifoFence(outbox), Backoff(100, 500), on_spooled=lambda: None,
    )  # fmt: skip
    sent: list[str] = []

    def on_sent(time_ms: int, answers: Sequence[SentAnswer]) -> None:
        sent.extend(message_id for message_id, _, _ in answers)
        raise OSError("the hook fails after the answers went out")

    service = Misbehaving(intake, 100, 1 << 20, 16, 64, on_sent=on_sent, metrics=metrics)
    server = grpc.aio.server()
    sidecar_pb2_grpc.add_SidecarServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield InProcess(sidecar_pb2_grpc.SidecarServiceStub(channel), service, sent)
    finally:
        await server.stop(None)
        await intake.wait_idle()
        await producer.close()
        await outbox.close()


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CALL_DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_a_bug_answers_internal_and_a_failing_hook_changes_no_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bug = message(BUG_TOPIC, message_id="bug")

    async def run() -> None:
        async with scripted_broker() as broker, in_process(str(broker.endpoint)) as p:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await p.stub.Send(api.SendRequest(message=bug), timeout=CALL_DEADLINE_S)
            assert raised.value.code() == grpc.StatusCode.INTERNAL
            assert "RuntimeError: a bug, injected" in (raised.value.details() or "")

            one = await p.stub.Send(
                api.SendRequest(message=message("Orders", message_id="one")),
                timeout=CALL_DEADLINE_S,
            )
            assert outcome(one.result) == "stored"

            batch = [message("Orders", message_id="two"), bug, message("Orders", message_id="3")]
            response = await p.stub.SendBatch(
                api.SendBatchRequest(messages=batch), timeout=CALL_DEADLINE_S
            )
            assert [outcome(r) for r in response.results] == ["stored", "rejected", "stored"]
            rejected = response.results[1]
            assert (rejected.message_id, rejected.rejected.code) == (
                "bug", grpc.StatusCode.INTERNAL.value[0],
            )  # fmt: skip

            requests = [
                api.SendStreamRequest(request_id=1, message=bug),
                api.SendStreamRequest(request_id=2, message=message("Orders", message_id="4")),
            ]
            answers = {
                r.request_id: outcome(r.result)
                async for r in p.stub.SendStream(iter(requests), timeout=CALL_DEADLINE_S)
            }
            assert answers == {1: "rejected", 2: "stored"}

            taken = ["one", "two", "3", "4"]
            await wait_for(lambda: sorted(p.sent) == sorted(taken), "on_sent given every answer")
            # Three bugs, and the hook failed once per call that took a message: one line each.
            assert p.service.internal_errors.events == 3
            assert p.service.after_answer_errors.events == 3

    with caplog.at_level(logging.ERROR, logger="sidecar.server"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if r.name == "sidecar.server"]
    assert sorted(line.split(" (")[0] for line in lines) == [
        "a message answered INTERNAL: an unexpected error",
        "recording answers that were sent failed",
    ]
    assert all(r.exc_info for r in caplog.records if r.name == "sidecar.server")
