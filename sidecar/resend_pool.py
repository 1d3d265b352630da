"""The resend pool: drains the outbox into the broker.

One claimer loop leases due entries (``claim_batch_max`` at a time) and hands them to resend
tasks; at most ``resend_concurrency_max`` resends run at once. Plain messages of one topic are
resent together, up to ``RESEND_BATCH_MESSAGES_MAX`` (and ``RESEND_BATCH_BYTES_MAX``) per
SendMessage request (one result per message), and the stored ones are marked delivered in one
outbox write (``mark_delivered_many``). A resend:

1. checks the broker's index first when the entry may already be stored (an ambiguous send, a
   resend that failed ambiguously, or an entry claimed over a lease whose holder died without
   recording an outcome): found → delivered, without sending it twice. Where nothing can say
   (a RocketMQ proxy, without ``--lookup-namesrv``) it is resent unchecked, counted and said once
   per access point (sidecar/unchecked_resends.py);
2. sends with the same message id, through the producer's retries; the resend path never spools;
3. stored → marked delivered (a tombstone with what the broker answered: its queue offset, and
   a queue id only where the index named one, sidecar/producer.py's ``SendReceipt``; one write
   for the batch); failed → ``reschedule`` after a back-off (the entry's state is written, never
   its body again), or ``bury`` once its delivery budget has run out (sidecar/delivery_budget.py:
   a failure, however often repeated, never buries by count); rejected by the broker (e.g. its
   topic was deleted) → buried at once.

While the broker takes no sends (sidecar/outage.py), the pool claims one entry per probe
interval and leaves the others due and untouched; a stored send ends that, and the backlog drains
at once. Claimed entries whose resend had not started when the outage began are released, their
attempts unchanged.

FIFO order is the outbox's promise: it hands out only a group's head, so a group has one resend
in flight, in order. A delivered head makes its successor due at once, so the claimer looks again
immediately after any delivery. Each FIFO entry the outbox took out of PENDING (delivered or
buried) is reported to ``on_fifo_delivered(topic, message_group)``, if given: the sidecar's
in-memory FIFO fence learns there that the group may have emptied (it may still have entries
behind the one reported).

On stop the claimer stops, resends in flight finish (their own send timeout bounds them), and the
leases of claimed entries not yet started are released, so another sidecar sharing the outbox
can take them at once.

Deliveries and failures are reported to the pool's ``pull_in`` (sidecar/pull_in.py), which
intake reports its sends to as well: once a topic's sends are stored again, it makes due at once
the entries spooled or rescheduled only to wait for the broker to come back. Its waves finish
before ``run`` returns.

Each job is a ``rocketbox.resend`` span, its broker call a ``rocketbox.resend.send`` and each
burial a ``rocketbox.bury`` (sidecar/tracing.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

from outbox.entry import DeliveryReceipt, EntryState, OutboxEntry
from outbox.errors import OutboxError
from rocketbox_api.deadlines import wait_event
from rocketbox_api.rate_limited_log import RateLimitedLog
from sidecar.async_outbox import AsyncOutbox
from sidecar.backoff import Backoff
from sidecar.clock import now_ms
from sidecar.coalescer import coalescable
from sidecar.config import ResendConfig
from sidecar.delivery_budget import budget_ms, give_up_ms
from sidecar.errors import SendFailedError, SendRejectedError
from sidecar.health_log import RESCHEDULED, BrokerStateLog, OutboxStateLog
from sidecar.metrics import READY, SidecarMetrics
from sidecar.outage import BrokerOutage
from sidecar.producer import Producer
from sidecar.pull_in import RecoveryPullIn
from sidecar.tracing import bury_span, resend_send_span, resend_span
from sidecar.unchecked_resends import UncheckedResends

LOG = logging.getLogger(__name__)
HOUR_MS = 3_600_000
RESEND_OUTCOMES = ("DELIVERED", "RESCHEDULED", "BURIED")


# A resend batch: one SendMessage request (RocketMQ stores it on one queue) and one outbox write.
# A request's CPU cost is large beside a message's and the same whatever it carries, so a drain
# goes at the broker's speed only with many messages per request; the count keeps one failed
# request's blast bounded. The broker's limit on a request is 4 MiB of bodies.
RESEND_BATCH_MESSAGES_MAX = 128
RESEND_BATCH_BYTES_MAX = 4 * 1024 * 1024


def resend_jobs(claimed: list[OutboxEntry]) -> list[list[OutboxEntry]]:
    """The claimed entries as resends: plain messages of one topic batched together; a FIFO
    or delayed message, or one that may already be stored (its index check comes first),
    alone."""
    jobs: list[list[OutboxEntry]] = []
    # Per topic: its open batch and the body bytes in it.
    open_batches: dict[str, tuple[list[OutboxEntry], int]] = {}
    for entry in claimed:
        m = entry.message
        if not coalescable(m) or entry.maybe_stored:
            jobs.append([entry])
            continue
        batch, batch_bytes = open_batches.get(m.topic, ([], 0))
        if (
            not batch
            or len(batch) >= RESEND_BATCH_MESSAGES_MAX
            or batch_bytes + len(m.body) > RESEND_BATCH_BYTES_MAX
        ):
            batch, batch_bytes = [], 0
            jobs.append(batch)
        batch.append(entry)
        open_batches[m.topic] = (batch, batch_bytes + len(m.body))
    return jobs


class ResendPool:
    def __init__(
        self,
        config: ResendConfig,
        producer: Producer,
        outbox: AsyncOutbox,
        backoff: Backoff,
        metrics: SidecarMetrics | None = None,
        on_fifo_delivered: Callable[[str, str], None] | None = None,
        owner: str | None = None,
        broker_log: BrokerStateLog | None = None,
        outbox_log: OutboxStateLog | None = None,
    ) -> None:
        """``owner`` is what the pool leases entries as (the sidecar's ``<id>/<incarnation>``);
        a random one by default. ``broker_log`` and ``outbox_log`` (sidecar/health_log.py) are
        told of deliveries, failed resends and failed outbox calls: an outage is their lines,
        not one line per entry or per poll."""
        self.config = config
        self._producer = producer
        self._outbox = outbox
        self._backoff = backoff
        self._metrics = metrics or SidecarMetrics()
        self._on_fifo_delivered = on_fifo_delivered
        self._broker_log = broker_log or BrokerStateLog()
        self._outbox_log = outbox_log
        # An outbox call failing while readiness says the outbox is fine (else its lines say it).
        self._outbox_errors = RateLimitedLog(LOG, logging.WARNING)
        # Probes and the pull-in's pauses grow only to probe_interval_max_ms: once the broker is
        # back, neither keeps the backlog waiting for longer.
        probe_max_ms = config.probe_interval_max_ms
        probe_backoff = Backoff(min(config.backoff_initial_ms, probe_max_ms), probe_max_ms)
        self._probe_backoff = probe_backoff
        self.outage = BrokerOutage(
            probe_backoff, config.outage_evidence_window_ms, self._metrics.broker_probes.inc
        )
        # A wave is at most one claim's worth, and is over by the time a resend's lease is.
        # Intake's sends are reported to it too: its evidence is the outage's.
        self.pull_in = RecoveryPullIn(
            outbox, probe_backoff, config.pull_in_ids_max, config.claim_batch_max,
            config.lease_ms, on_due=self.wake, metrics=self._metrics, outage=self.outage,
        )  # fmt: skip
        self.owner = owner or f"sidecar-{uuid.uuid4().hex[:12]}"
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(config.resend_concurrency_max)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        # What the pool did (DELIVERED, RESCHEDULED, BURIED), also counted in the metrics.
        self.totals = dict.fromkeys(RESEND_OUTCOMES, 0)
        self._unchecked = UncheckedResends(
            self._metrics.resends_unchecked, producer.config.uniq_key_lookup is not None
        )

    def wake(self) -> None:
        """Something may be due now (a spool, a delivered FIFO head)."""
        self._wake.set()

    async def run(self) -> None:
        """Claim and resend until ``stop``; purge old tombstones along the way. Cancelled (the
        sidecar is going down on a failure), it cancels its resends: none outlives the pool, and
        an entry whose resend was cut off comes again after its lease, checked against the
        broker's index first."""
        try:
            await self._claim_until_stopped()
            # Resends in flight finish: each is bounded by the producer's send timeout.
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.pull_in.stop()

    async def _claim_until_stopped(self) -> None:
        next_purge_s = 0.0
        while not self._stopping:
            if time.monotonic() >= next_purge_s:
                next_purge_s = time.monotonic() + self.config.purge_interval_ms / 1000.0
                await self._purge()
            limit = self.outage.claim_limit(self.config.claim_batch_max)
            if limit == 0:
                await self._wait(self.outage.wait_s())
                continue
            probe = limit == 1 and self.outage.failing
            claimed = await self._claim(limit)
            if probe and not claimed:
                self.outage.probe_unused()
                await self._wait(float("inf"))  # the poll interval: nothing was due
                continue
            if self._stopping:
                await self._release(claimed)
                break
            for job in resend_jobs(claimed):
                await self._slots.acquire()
                if self._stopping or (self.outage.failing and not probe):
                    # An outage began since the claim: the entry waits, due, untouched.
                    self._slots.release()
                    await self._release(job)
                    continue
                task = asyncio.create_task(
                    self._resend(job, probe), name=f"resend {job[0].message_id}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if len(claimed) < limit:
                await self._wait(self.outage.wait_s())

    async def _wait(self, probe_wait_s: float) -> None:
        """Until woken, the poll interval, or the next probe, whichever comes first."""
        await wait_event(self._wake, min(self.config.poll_interval_ms / 1000.0, probe_wait_s))
        self._wake.clear()

    def stop(self) -> None:
        """Stop claiming; ``run`` returns once the resends in flight have finished."""
        self._stopping = True
        self._wake.set()

    async def _claim(self, limit: int) -> list[OutboxEntry]:
        try:
            return await self._outbox.claim_due(now_ms(), limit, self.config.lease_ms, self.owner)
        except Exception as e:  # the outbox is down: readiness says so; try again next poll
            self._outbox_failed("claiming due outbox entries", e)
            return []

    def _outbox_failed(self, what: str, e: Exception) -> None:
        """An outbox call failed: while the outbox is known to be unreachable its state lines
        count it; otherwise a rate-limited line (with the traceback when it is no outbox
        error: a bug)."""
        if isinstance(e, OutboxError) and self._outbox_log is not None:
            self._outbox_log.call_failed()
            if self._outbox_log.state != READY:
                LOG.debug("%s failed: %s", what, e)
                return
        trace = None if isinstance(e, OutboxError) else e
        self._outbox_errors.log("%s failed: %s", what, e, exc_info=trace)

    async def _release(self, entries: list[OutboxEntry]) -> None:
        for entry in entries:
            try:
                await self._outbox.release(entry.message_id, self.owner)
            except Exception as e:  # the lease expires by itself
                self._outbox_failed(f"releasing the lease of {entry.message_id}", e)

    async def _resend(self, job: list[OutboxEntry], probe: bool) -> None:
        try:
            with resend_span(job):
                if len(job) == 1 and job[0].maybe_stored and await self._settled_by_index(job[0]):
                    return
                await self._send(job)
        except Exception as e:
            # The outbox call after the send failed: the lease expires and the entry comes
            # again (checked against the index first if it may be stored).
            self._outbox_failed(f"resend of {[x.message_id for x in job]} left to its lease", e)
        finally:
            self._slots.release()
            if probe:
                self.outage.probe_ended()
                self.wake()

    async def _settled_by_index(self, entry: OutboxEntry) -> bool:
        """Ask the broker's index: True when that settled the entry (found, so delivered; or the
        lookup itself failed, so rescheduled); False when it must be sent."""
        m = entry.message
        try:
            lookup = await self._producer.lookup_stored(m.message_id, m.topic)
        except SendFailedError as e:
            await self._failed(entry, e)
            return True
        if not lookup.offered:
            self._unchecked.resending(self._producer.index_lookup_missing)
            return False
        if lookup.copy is None:
            return False
        LOG.info(
            "%s to %s was already stored; not resent", m.message_id, m.topic,
            extra={"message_id": m.message_id, "topic": m.topic},
        )  # fmt: skip
        receipt = DeliveryReceipt(lookup.copy.queue_id, lookup.copy.queue_offset, now_ms())
        await self._delivered([(entry, receipt)])
        return True

    async def _send(self, job: list[OutboxEntry]) -> None:
        """One SendMessage request for the job (the producer retries), then each entry settled."""
        with resend_send_span(job):
            outcomes = await self._producer.send_many([e.message for e in job])
        delivered_ms = now_ms()
        delivered: list[tuple[OutboxEntry, DeliveryReceipt]] = []
        for entry, outcome in zip(job, outcomes, strict=True):
            if isinstance(outcome, SendRejectedError):
                await self._bury(entry, f"rejected by the broker: {outcome}")
            elif isinstance(outcome, SendFailedError):
                await self._failed(entry, outcome)
            else:
                receipt = DeliveryReceipt(
                    outcome.queue_id, outcome.queue_offset, delivered_ms, outcome.durable
                )
                delivered.append((entry, receipt))
        if delivered:
            await self._delivered(delivered)

    async def _delivered(self, delivered: list[tuple[OutboxEntry, DeliveryReceipt]]) -> None:
        """Tombstones for the entries, in one outbox write."""
        done = await self._outbox.mark_delivered_many([(e.message_id, r) for e, r in delivered])
        # Counted whatever the answer: an entry already delivered (by another sidecar, or by
        # an earlier resend whose tombstone came late) is at the broker all the same.
        self._count("DELIVERED", len(delivered))
        for entry, _ in delivered:
            self._metrics.resend_attempts.observe(entry.attempts + 1)
        self._broker_log.delivered(len(delivered))
        # A job is of one topic.
        self.pull_in.stored(delivered[0][0].message.topic, (e.message_id for e, _ in delivered))
        for (entry, _), changed in zip(delivered, done, strict=True):
            if changed:
                self._fifo_settled(entry)
        if any(e.fifo_group is not None for e, _ in delivered):
            self.wake()  # a successor is its group's head now

    def _fifo_settled(self, entry: OutboxEntry) -> None:
        """Tell ``on_fifo_delivered`` that this entry, if FIFO, left PENDING."""
        group = entry.fifo_group
        if self._on_fifo_delivered is None or group is None:
            return
        try:
            self._on_fifo_delivered(*group)
        except Exception:  # the hook's failure must not leave the resend to its lease
            LOG.exception(
                "on_fifo_delivered failed for %s", entry.message_id,
                extra={"message_id": entry.message_id, "topic": entry.message.topic},
            )  # fmt: skip

    def _count(self, outcome: str, n: int = 1) -> None:
        self.totals[outcome] += n
        self._metrics.resends.labels(outcome).inc(n)

    async def _failed(self, entry: OutboxEntry, failure: SendFailedError) -> None:
        self.pull_in.failed(entry.message.topic, entry.message_id, failure.cause)
        attempts = entry.attempts + 1
        now = now_ms()
        error = str(failure)
        default_ms = self.config.age_max_s * 1000
        if now >= give_up_ms(entry, default_ms):
            budget_s = budget_ms(entry, default_ms) / 1000
            await self._bury(
                entry, f"not delivered within its budget of {budget_s:g} s "
                f"({attempts} resends); last: {error}",
            )  # fmt: skip
            return
        # In an outage the probe's timer, not the entry's back-off, says when the broker is
        # tried again: the entry waits no longer than a probe interval, so that once the broker
        # is back, it is not left behind the drain by a back-off grown during the outage.
        backoff = self._probe_backoff if self.outage.failing else self._backoff
        next_send_time_ms = now + backoff.delay_ms(attempts)
        done = await self._outbox.reschedule(
            entry.message_id, self.owner, next_send_time_ms, error, now,
            maybe_stored=failure.maybe_stored,
        )  # fmt: skip
        if done:
            self._count("RESCHEDULED")
            self._broker_log.failed(failure, RESCHEDULED)
            self.pull_in.backing_off(entry, failure.cause)
        else:
            LOG.warning(
                "lease of %s was lost before its reschedule", entry.message_id,
                extra={"message_id": entry.message_id, "topic": entry.message.topic},
            )  # fmt: skip

    async def _bury(self, entry: OutboxEntry, error: str) -> None:
        with bury_span(entry, error):
            done = await self._outbox.bury(entry.message_id, self.owner, error, now_ms())
        if done:
            self._count("BURIED")
            self._metrics.resend_attempts.observe(entry.attempts + 1)
            self._fifo_settled(entry)
            LOG.error(
                "buried %s to %s: %s", entry.message_id, entry.message.topic, error,
                extra={"message_id": entry.message_id, "topic": entry.message.topic},
            )  # fmt: skip

    async def _purge(self) -> None:
        before_ms = now_ms() - int(self.config.delivered_retention_hours * HOUR_MS)
        try:
            purged = await self._outbox.purge(EntryState.DELIVERED, before_ms)
        except Exception as e:
            self._outbox_failed("purging delivered tombstones", e)
            return
        if purged:
            LOG.info("purged %d delivered tombstones older than the retention", purged)
