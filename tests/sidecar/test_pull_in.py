"""Recovery pull-in (sidecar/pull_in.py): once a topic's sends are stored again, the entries that
only wait out an UNAVAILABLE back-off go at once, a bounded wave at a time.

With real processes (a broker, a sidecar on a Redis outbox the test reads, a back-off of a
minute):
- a backlog spooled while the broker was down is delivered, every message exactly once and none
  after a failed resend, as soon as one send to its topic is stored again: long before the
  first entry's own back-off would have let it go (the deadline is computed from the spool
  answers' next attempt times); the pulled-in counter counts each entry once;
- THROTTLED entries of the same topic are pulled in as well once a send of it is stored (the
  broker takes sends again): delivered with the UNAVAILABLE ones, long before their back-off.

With the memory outbox and the reports made by hand (no broker):
- a wave makes at most ``wave_max`` entries due, oldest first, over all topics; the next wave
  comes only once the wave's entries were stored, then another topic's turn comes;
- a failed send ends the wave, and a stored send during the quiet time after pulls in nothing;
- FIFO_FENCE entries are never registered, and a full registry drops its oldest.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from outbox.backends.memory import MemoryOutbox
from outbox.entry import EntryState, OutboxEntry, OutboxLimits, OutboxMessage, SpoolCause
from outbox.factory import open_outbox
from outbox.outbox import Outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.async_outbox import AsyncOutbox
from sidecar.backoff import Backoff
from sidecar.clock import now_ms
from sidecar.pull_in import RecoveryPullIn
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import metrics_port, sample, scrape
from tests.services import redis_url, unique_name
from tests.sidecar.sidecar_process import (
    SidecarProcess,
    message,
    outcome,
    restart,
    send,
    set_flow_control,
    stored_copies,
)

METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")
# Without the pull-in, no spooled entry would be resent before a minute has passed.
BACKOFF_MS = 60_000
# Small waves, so that the backlog needs several of them one after the other.
CLAIM_BATCH_MAX = 64
BACKLOG_MESSAGES = 300
# Sends to the restarted broker until one is stored (its channel reconnects within seconds).
TRIGGER_DEADLINE_S = 20.0
# Time kept between the end of a wait and the earliest next attempt time of the backlog.
BACKOFF_MARGIN_S = 5.0
PULLED_IN = "rocketbox_sidecar_resends_pulled_in_total"


@pytest.fixture
def outbox_url() -> Iterator[str]:
    """A Redis outbox of the test's own, which the test reads while the sidecar runs."""
    prefix = unique_name("rocketbox_pull_in")
    yield f"{redis_url()}?prefix={prefix}"
    client = redis.Redis.from_url(redis_url())
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)


def start_sidecar(broker: BrokerProcess, outbox_url: str) -> tuple[SidecarProcess, int]:
    sidecar = SidecarProcess(
        broker.endpoint, outbox_url, f"--backoff-initial-ms={BACKOFF_MS}",
        f"--backoff-max-ms={BACKOFF_MS}", f"--claim-batch-max={CLAIM_BATCH_MAX}",
        "--metrics-listen=127.0.0.1:0",
    )  # fmt: skip
    return sidecar, metrics_port(sidecar.output(), METRICS_LINE)


def spool_batch(sidecar: SidecarProcess, count: int, *causes: int) -> dict[str, int]:
    """``count`` messages to Orders in one SendBatch, each SPOOLED with one of ``causes``: their
    ids → their next attempt times (ms)."""
    with sidecar.client() as stub:
        response = stub.SendBatch(
            api.SendBatchRequest(
                messages=[message("Orders", f"backlog {i}".encode()) for i in range(count)]
            ),
            timeout=60.0,
        )
    spooled: dict[str, int] = {}
    for result in response.results:
        assert outcome(result) == "spooled", result
        assert result.spooled.cause in causes, result
        spooled[result.message_id] = result.spooled.next_attempt_time.ToMilliseconds()
    assert len(spooled) == count
    return spooled


def send_until_stored(sidecar: SidecarProcess) -> dict[str, int]:
    """Sends to Orders until one is stored; those spooled meanwhile, as ``spool_batch``."""
    spooled: dict[str, int] = {}
    with sidecar.client() as stub:

        def one_stored() -> bool:
            result = send(stub, message("Orders", b"trigger"))
            if outcome(result) == "stored":
                return True
            assert outcome(result) == "spooled", result
            # Spooled unsent while the broker is probed: the outage's last cause.
            assert result.spooled.cause in (
                api.SPOOL_CAUSE_UNAVAILABLE, api.SPOOL_CAUSE_THROTTLED,
            ), result  # fmt: skip
            spooled[result.message_id] = result.spooled.next_attempt_time.ToMilliseconds()
            return False

        wait_until(one_stored, TRIGGER_DEADLINE_S, "a send to the restarted broker stored")
    return spooled


def deadline_before(next_attempts_ms: dict[str, int]) -> float:
    """Seconds from now to well before the earliest of the next attempt times: a wait ending
    within it was not a back-off running out."""
    deadline_s = (min(next_attempts_ms.values()) - now_ms()) / 1000.0 - BACKOFF_MARGIN_S
    assert deadline_s > 10.0, f"the test took too long to be a proof: {deadline_s:.1f} s left"
    return deadline_s


def delivered(outbox: Outbox, message_ids: dict[str, int]) -> Callable[[], bool]:
    def check() -> bool:
        entries = [outbox.get(i) for i in message_ids]
        return all(e is not None and e.state is EntryState.DELIVERED for e in entries)

    return check


@pytest.mark.slow
def test_a_backlog_goes_once_a_send_to_its_topic_is_stored_again(
    broker: BrokerProcess, outbox_url: str
) -> None:
    sidecar, port = start_sidecar(broker, outbox_url)
    outbox = open_outbox(outbox_url, OutboxLimits())
    back: BrokerProcess | None = None
    try:
        broker.stop()
        backlog = spool_batch(sidecar, BACKLOG_MESSAGES, api.SPOOL_CAUSE_UNAVAILABLE)
        back = restart(broker)
        backlog |= send_until_stored(sidecar)
        wait_until(
            lambda: outbox.stats(now_ms()).pending == 0, deadline_before(backlog),
            "the whole backlog delivered, long before its back-off",
        )  # fmt: skip
        for message_id, next_attempt_ms in backlog.items():
            entry = outbox.get(message_id)
            assert entry is not None
            assert entry.state is EntryState.DELIVERED
            assert entry.attempts == 0, f"{message_id} was resent after a failure: {entry}"
            assert entry.receipt is not None
            assert entry.receipt.delivered_ms < next_attempt_ms
        # Each entry pulled in once: the drain went in waves, none of which failed.
        assert sample(scrape(port), PULLED_IN) == len(backlog)
        sidecar.stop()
        endpoint = back.endpoint
        copies = {i: len(stored_copies(endpoint, i)) for i in backlog}
        assert set(copies.values()) == {1}, {i: n for i, n in copies.items() if n != 1}
    finally:
        sidecar.kill()
        outbox.close()
        if back is not None:
            back.kill()


@pytest.mark.slow
def test_throttled_entries_are_pulled_in_once_the_broker_takes_sends(
    broker: BrokerProcess, outbox_url: str
) -> None:
    sidecar, port = start_sidecar(broker, outbox_url)
    outbox = open_outbox(outbox_url, OutboxLimits())
    back: BrokerProcess | None = None
    try:
        set_flow_control(broker.endpoint, True)
        throttled = spool_batch(sidecar, 5, api.SPOOL_CAUSE_THROTTLED)
        set_flow_control(broker.endpoint, False)
        broker.stop()
        # Spooled in the outage that throttling began: intake does not send them, and says
        # the outage's last cause until a probe fails otherwise.
        unavailable = spool_batch(
            sidecar, 20, api.SPOOL_CAUSE_UNAVAILABLE, api.SPOOL_CAUSE_THROTTLED
        )
        back = restart(broker)
        unavailable |= send_until_stored(sidecar)
        wait_until(
            delivered(outbox, throttled | unavailable), deadline_before(throttled | unavailable),
            "the THROTTLED and UNAVAILABLE entries delivered",
        )  # fmt: skip
        assert sample(scrape(port), PULLED_IN) == len(throttled) + len(unavailable)
        for message_id in throttled:
            assert len(stored_copies(back.endpoint, message_id)) == 1
    finally:
        sidecar.stop()
        outbox.close()
        if back is not None:
            back.kill()


# The pull-in on its own: the memory outbox, and reports made as intake and the pool make them.

HOUR_MS = 3_600_000
UNIT_DEADLINE_S = 10.0


def backing_off_entry(n: int, topic: str = "Orders", group: str | None = None) -> OutboxEntry:
    created_ms = now_ms()
    return OutboxEntry(
        message=OutboxMessage(
            topic=topic, body=b"payload", message_id=f"01{n:032X}", message_group=group
        ),
        cause=SpoolCause.UNAVAILABLE,
        created_ms=created_ms,
        next_send_time_ms=created_ms + HOUR_MS,
    )


class Harness:
    """A pull-in over a memory outbox holding ``entries``, all registered as UNAVAILABLE."""

    def __init__(self, entries: list[OutboxEntry], ids_max: int = 1_000, wave_max: int = 4):
        self.outbox = MemoryOutbox(OutboxLimits())
        self.stored = self.outbox.put(entries)
        self.async_outbox = AsyncOutbox(self.outbox, threads=2)
        self.wakes = 0
        self.pull_in = RecoveryPullIn(
            self.async_outbox, Backoff(initial_ms=HOUR_MS, max_ms=HOUR_MS), ids_max, wave_max,
            wave_timeout_ms=HOUR_MS, on_due=self._wake,
        )  # fmt: skip
        for entry in self.stored:
            self.pull_in.backing_off(entry, SpoolCause.UNAVAILABLE)

    def _wake(self) -> None:
        self.wakes += 1

    def due(self) -> list[str]:
        """The ids due now, in the order the outbox hands them out."""
        now = now_ms()
        return [e.message_id for e in self.outbox.scan_all(EntryState.PENDING)
                if e.next_send_time_ms <= now]  # fmt: skip

    async def until_pulled_in(self, count: int) -> None:
        deadline_s = time.monotonic() + UNIT_DEADLINE_S
        while self.pull_in.pulled_in < count:
            assert time.monotonic() < deadline_s, f"{self.pull_in.pulled_in} pulled in, not {count}"
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        await self.pull_in.stop()
        await self.async_outbox.close()


def ids(entries: list[OutboxEntry]) -> list[str]:
    return [e.message_id for e in entries]


def test_one_wave_at_a_time_each_after_the_last_was_stored() -> None:
    async def run() -> None:
        h = Harness([backing_off_entry(n) for n in range(10)], wave_max=4)
        try:
            assert len(h.pull_in) == 10
            h.pull_in.stored("Orders")  # intake's send stored: the first wave
            assert len(h.pull_in) == 6
            await h.until_pulled_in(4)
            assert h.due() == ids(h.stored[:4])  # the oldest first
            assert h.wakes == 1
            h.pull_in.stored("Orders")  # more stored sends while the wave is out: no second
            h.pull_in.stored("Orders", ids(h.stored[:3]))  # not the whole wave yet
            assert len(h.pull_in) == 6
            h.pull_in.stored("Orders", ids(h.stored[3:4]))  # the wave stored: the next one
            assert len(h.pull_in) == 2
            await h.until_pulled_in(8)
            assert h.due() == ids(h.stored[:8])
            h.pull_in.stored("Orders", ids(h.stored[4:8]))
            await h.until_pulled_in(10)
            assert len(h.pull_in) == 0
            assert h.pull_in.pulled_in == 10
        finally:
            await h.close()

    asyncio.run(run())


def test_a_failed_send_ends_the_wave_and_quiets_the_topic() -> None:
    async def run() -> None:
        h = Harness([backing_off_entry(n) for n in range(10)], wave_max=4)
        try:
            h.pull_in.stored("Orders")
            await h.until_pulled_in(4)
            h.pull_in.stored("Orders", ids(h.stored[:1]))
            # A resend of the wave failed: it is rescheduled (registered again, at the end).
            h.pull_in.failed("Orders", h.stored[1].message_id)
            h.pull_in.backing_off(h.stored[1], SpoolCause.UNAVAILABLE)
            assert len(h.pull_in) == 7
            # The rest of the wave is stored, and intake's sends too: the topic stays quiet.
            h.pull_in.stored("Orders", ids(h.stored[2:4]))
            h.pull_in.stored("Orders")
            assert len(h.pull_in) == 7
            assert h.pull_in.pulled_in == 4
        finally:
            await h.close()

    asyncio.run(run())


def test_waves_share_wave_max_over_topics_in_turn() -> None:
    async def run() -> None:
        orders = [backing_off_entry(n, "Orders") for n in range(4)]
        payments = [backing_off_entry(100 + n, "Payments") for n in range(4)]
        h = Harness(orders + payments, wave_max=4)
        try:
            h.pull_in.stored("Orders")
            h.pull_in.stored("Payments")  # no room: Payments waits for its turn
            assert len(h.pull_in) == 4
            await h.until_pulled_in(4)
            h.pull_in.stored("Orders", ids(orders))
            assert len(h.pull_in) == 0
            await h.until_pulled_in(8)
            assert sorted(h.due()) == sorted(ids(orders + payments))
        finally:
            await h.close()

    asyncio.run(run())


def test_only_entries_waiting_for_the_broker_are_registered_and_the_oldest_go_first() -> None:
    async def run() -> None:
        h = Harness([], ids_max=3, wave_max=10)
        try:
            entries = h.outbox.put([backing_off_entry(n) for n in range(6)])
            h.pull_in.backing_off(entries[0], SpoolCause.FIFO_FENCE)
            assert len(h.pull_in) == 0
            h.pull_in.backing_off(entries[1], SpoolCause.THROTTLED)
            for entry in entries[2:]:
                h.pull_in.backing_off(entry, SpoolCause.AMBIGUOUS)
            assert len(h.pull_in) == 3  # entries[1] and [2] dropped: they keep their back-off
            h.pull_in.stored("Orders")
            await h.until_pulled_in(3)
            assert h.due() == ids(entries[3:])
        finally:
            await h.close()

    asyncio.run(run())
