"""The sidecar's core built in the test process, as sidecar/sidecar.py builds it: intake (the
coalescer, the spool writer, the FIFO fence) and the resend pool over the reference memory outbox,
the producer sending to a ScriptedBroker (tests/sidecar/scripted_broker.py). A failure in these
tests names the line of intake or the pool, not only the scenario of a whole process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from outbox import Outbox, OutboxEntry, OutboxLimits, OutboxMessage, open_outbox
from rocketbox_api.credentials import Credentials
from sidecar.async_outbox import AsyncOutbox
from sidecar.backoff import Backoff
from sidecar.coalescer import CoalesceConfig, SendCoalescer
from sidecar.config import ResendConfig
from sidecar.fifo_fence import FifoFence
from sidecar.intake import Intake
from sidecar.metrics import SidecarMetrics
from sidecar.producer import Producer, ProducerConfig
from sidecar.resend_pool import ResendPool
from sidecar.spool_writer import SpoolWriter
from tests.sidecar.scripted_broker import ScriptedBroker, scripted_broker

# Long enough for any answer of this machine's loop, short enough that a HANG ends soon.
SEND_MSG_TIMEOUT_MS = 1_000
RETRY_TIMES_WHEN_SEND_FAILED = 2
WAIT_DEADLINE_S = 30.0
# Resends come at once: the back-off is what the tests wait on, not what they test. A failure
# after a stored send is never an outage here (sidecar/outage.py); tests/sidecar/test_outage.py
# sets its own window.
FAST_RESEND = ResendConfig(
    poll_interval_ms=10, backoff_initial_ms=1, backoff_max_ms=5, lease_ms=10_000,
    probe_interval_max_ms=5, outage_evidence_window_ms=3_600_000,
)  # fmt: skip


@dataclass
class Core:
    broker: ScriptedBroker
    outbox: Outbox  # the contract's own (blocking) methods, for what the tests read
    intake: Intake
    pool: ResendPool
    fifo_settled: list[tuple[str, str]]  # what on_fifo_delivered heard, in order

    def entry(self, message_id: str) -> OutboxEntry:
        found = self.outbox.get(message_id)
        assert found is not None, f"{message_id} is not in the outbox"
        return found


@asynccontextmanager
async def core(
    resend: ResendConfig = FAST_RESEND,
    *,
    pool_running: bool,
    credentials: Credentials | None = None,
) -> AsyncIterator[Core]:
    """Intake and the resend pool over a fresh memory outbox, sending to a fresh scripted
    broker; with ``pool_running`` the pool claims and resends until the block ends; with
    ``credentials`` the producer signs its requests."""
    async with scripted_broker() as broker:
        outbox = open_outbox("memory://", OutboxLimits())
        async_outbox = AsyncOutbox(outbox, threads=2)
        producer = Producer(
            ProducerConfig(
                access_points=(broker.endpoint,),
                retry_times_when_send_failed=RETRY_TIMES_WHEN_SEND_FAILED,
                send_msg_timeout_ms=SEND_MSG_TIMEOUT_MS,
                credentials=credentials,
            )
        )
        metrics = SidecarMetrics()
        backoff = Backoff(resend.backoff_initial_ms, resend.backoff_max_ms)
        fence = FifoFence(async_outbox)
        await fence.load()
        settled: list[tuple[str, str]] = []
        pool = ResendPool(
            resend, producer, async_outbox, backoff, metrics,
            on_fifo_delivered=lambda topic, group: settled.append((topic, group)),
        )  # fmt: skip
        intake = Intake(
            SendCoalescer(producer, CoalesceConfig(), metrics), SpoolWriter(async_outbox, metrics),
            fence, backoff, on_spooled=pool.wake, pull_in=pool.pull_in, outage=pool.outage,
        )  # fmt: skip
        runner = asyncio.create_task(pool.run()) if pool_running else None
        try:
            yield Core(broker, outbox, intake, pool, settled)
        finally:
            pool.stop()
            if runner is not None:
                await runner
            await intake.wait_idle()
            await producer.close()
            await async_outbox.close()


def message(
    n: int, topic: str = "Orders", body: bytes = b"payload", **fields: object
) -> OutboxMessage:
    return OutboxMessage(topic=topic, body=body, message_id=f"01{n:032X}", **fields)  # type: ignore[arg-type]  # the optional fields by name


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline_s = time.monotonic() + WAIT_DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline_s, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)
