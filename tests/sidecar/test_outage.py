"""A broker outage, as the resend pool lives it (sidecar/outage.py, sidecar/resend_pool.py,
sidecar/delivery_budget.py), in this process against a scripted broker that fails every send
for as long as the test says.

It proves:
- failed resends never bury by count: an entry that failed more resends than any count limit
  would allow is PENDING still, and delivered once the broker stores again;
- the delivery budget buries: the sidecar's default (``age_max_s``) for a message without its
  own, the message's own ``delivery_timeout_ms`` over the default either way;
- an outage costs one write per message: the pool probes with one entry at a time, the other
  entries stay as spooled (no attempt, no reschedule), and each reschedule is a failed probe's,
  due again after a probe interval rather than its grown back-off; once the broker stores again,
  every entry is delivered, once;
- in an outage intake spools what apps send without sending it, but for the probe: an app's
  message may be it, and once one is stored the outage is over and intake sends again;
- BrokerOutage's rules: the evidence window, the failures that begin an outage within it, one
  probe at a time, the interval's bound.
"""

from __future__ import annotations

import asyncio
import dataclasses

from outbox import EntryState, SpoolCause
from sidecar.backoff import Backoff
from sidecar.clock import now_ms
from sidecar.intake import Spooled, Stored
from sidecar.outage import OUTAGE_FAILURES_MIN, BrokerOutage
from tests.sidecar.in_process import FAST_RESEND, Core, core, message, wait_for
from tests.sidecar.scripted_broker import Answer

# Every failure is an outage's: no stored send to count as evidence.
OUTAGE_RESEND = dataclasses.replace(FAST_RESEND, outage_evidence_window_ms=0)
# More failed resends than the count limit the sidecar once had (64).
FAILED_RESENDS_MANY = 80
BACKLOG = 60


def states(c: Core, message_ids: list[str]) -> list[EntryState]:
    return [c.entry(m).state for m in message_ids]


def test_failed_resends_never_bury_an_entry_within_its_budget() -> None:
    async def run() -> None:
        async with core(OUTAGE_RESEND, pool_running=True) as c:
            c.broker.standing_answer = Answer.UNAVAILABLE
            m = message(1)
            assert isinstance(await c.intake.accept(m), Spooled)
            await wait_for(
                lambda: c.entry(m.message_id).attempts >= FAILED_RESENDS_MANY,
                f"{FAILED_RESENDS_MANY} failed resends",
            )
            assert c.entry(m.message_id).state is EntryState.PENDING
            c.broker.standing_answer = Answer.STORE
            await wait_for(
                lambda: c.entry(m.message_id).state is EntryState.DELIVERED, "the delivery"
            )
            assert c.pool.totals["BURIED"] == 0
            assert c.broker.store_log == [m.message_id]

    asyncio.run(run())


def test_the_budget_is_the_message_s_own_or_the_sidecar_s() -> None:
    resend = dataclasses.replace(OUTAGE_RESEND, age_max_s=1)

    async def run() -> None:
        async with core(resend, pool_running=True) as c:
            c.broker.standing_answer = Answer.UNAVAILABLE
            by_default = message(1)
            own_longer = message(2, delivery_timeout_ms=3_600_000)
            for m in (by_default, own_longer):
                assert isinstance(await c.intake.accept(m), Spooled)
            await wait_for(
                lambda: c.entry(by_default.message_id).state is EntryState.DEAD,
                "the entry without a budget of its own buried after the sidecar's 1 s",
            )
            assert "within its budget of 1 s" in c.entry(by_default.message_id).last_error
            longer = c.entry(own_longer.message_id)
            assert longer.state is EntryState.PENDING
            assert longer.message.delivery_timeout_ms == 3_600_000

    asyncio.run(run())


def test_an_outage_probes_one_entry_at_a_time_and_leaves_the_rest_as_spooled() -> None:
    # An entry's own back-off could grow to ten minutes; a probe interval is at most 5 ms.
    resend = dataclasses.replace(OUTAGE_RESEND, backoff_max_ms=600_000)

    async def run() -> None:
        async with core(resend, pool_running=True) as c:
            c.broker.standing_answer = Answer.UNAVAILABLE
            ids = []
            for n in range(BACKLOG):
                m = message(n)
                assert isinstance(await c.intake.accept(m), Spooled)
                ids.append(m.message_id)
            await wait_for(lambda: c.pool.outage.probes >= 2 * BACKLOG, "probes")
            entries = [c.entry(m) for m in ids]
            resent = sum(e.attempts for e in entries)
            # Every resend in the outage was a probe, and each failed probe is one reschedule:
            # no entry was claimed, released or rewritten otherwise.
            assert resent <= c.pool.outage.probes
            assert c.pool.totals["RESCHEDULED"] == resent
            assert c.pool.outage.outages == 1
            # A failed probe waits a probe interval, not its grown back-off: due again at once
            # once the broker is back.
            assert max(e.next_send_time_ms for e in entries) <= now_ms() + 1_000
            c.broker.standing_answer = Answer.STORE
            await wait_for(
                lambda: set(states(c, ids)) == {EntryState.DELIVERED}, "the backlog delivered"
            )
            assert sorted(c.broker.store_log) == sorted(ids), "each stored once"
            assert not c.pool.outage.failing

    asyncio.run(run())


def test_in_an_outage_intake_spools_without_sending_but_for_the_probe() -> None:
    async def run() -> None:
        # The pool is not running: only intake's messages can probe.
        async with core(OUTAGE_RESEND, pool_running=False) as c:
            c.broker.standing_answer = Answer.UNAVAILABLE
            assert isinstance(await c.intake.accept(message(0)), Spooled)
            assert c.pool.outage.failing
            requests_at_outage = len(c.broker.requests)
            answers = [await c.intake.accept(message(n)) for n in range(1, BACKLOG + 1)]
            assert all(isinstance(a, Spooled) for a in answers)
            entries = [a.entry for a in answers if isinstance(a, Spooled)]
            unsent = [e for e in entries if "probing" in e.last_error]
            # The probes' own failures are answered as any failed send is (AMBIGUOUS here).
            assert len(entries) - len(unsent) <= c.pool.outage.probes
            assert {(e.cause, e.maybe_stored) for e in unsent} == {(SpoolCause.UNAVAILABLE, False)}
            # Each request since is a probe's (with its retries); the rest were spooled unsent.
            assert len(c.broker.requests) - requests_at_outage <= 3 * c.pool.outage.probes
            c.broker.standing_answer = Answer.STORE
            n = BACKLOG + 1

            async def stored_once() -> bool:
                nonlocal n
                n += 1
                return isinstance(await c.intake.accept(message(n)), Stored)

            deadline_s = asyncio.get_running_loop().time() + 30.0
            while not await stored_once():
                assert asyncio.get_running_loop().time() < deadline_s, "no probe was stored"
            assert not c.pool.outage.failing
            assert isinstance(await c.intake.accept(message(n + 1)), Stored)

    asyncio.run(run())


def test_the_outage_s_rules() -> None:
    probe_backoff = Backoff(initial_ms=1, max_ms=50)
    # A send stored within the window: a failure is its message's own, no outage...
    recent = BrokerOutage(probe_backoff, evidence_window_ms=3_600_000)
    recent.stored()
    for _ in range(OUTAGE_FAILURES_MIN - 1):
        recent.failed()
    assert not recent.failing
    assert recent.claim_limit(512) == 512
    # ...until so many failed with none stored between them: a broker gone mid-drain.
    recent.failed()
    assert recent.failing
    recent.stored()
    recent.failed()
    assert not recent.failing, "a stored send starts the count again"
    # None stored within it: an outage, one probe at a time.
    outage = BrokerOutage(probe_backoff, evidence_window_ms=0)
    outage.stored()
    outage.failed()
    assert outage.failing
    assert 0.0 <= outage.wait_s() <= 0.05
    assert outage.outages == 1

    async def probe() -> int:
        await wait_for(lambda: outage.wait_s() == 0.0, "the first probe's time")
        return outage.claim_limit(512)

    assert asyncio.run(probe()) == 1
    assert outage.claim_limit(512) == 0, "a second probe while one is out"
    assert outage.wait_s() == float("inf")
    outage.probe_ended()
    assert 0.0 <= outage.wait_s() <= 0.05, "the interval is bounded by its maximum"
    outage.stored()
    assert not outage.failing
    assert outage.claim_limit(512) == 512
