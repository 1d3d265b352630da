"""Intake: each message the app hands over is sent, spooled or rejected, and the app is told which.

    validate ──bad──► SendRejectedError (nothing sent, nothing spooled)
       │
    FIFO group fenced (entries in the outbox)? ──yes──► spool behind them (FIFO_FENCE)
       │ no
    the broker in an outage (probed)? ──yes──► spool, no send (the outage's cause)
       │ no
    send (plain messages coalesced per topic; retries) ──stored──► STORED
       │                                        ──refused by the broker──► SendRejectedError
       │ failed (throttled / unavailable / ambiguous)
    spool (durable; shared writes) ──► SPOOLED   or, when the outbox refuses, SendRejectedError:
                                                  RESOURCE_EXHAUSTED at its bound, UNAVAILABLE
                                                  when it cannot write; the app is told it was
                                                  not taken, and when to try again

``accept`` answers STORED or SPOOLED, or raises SendRejectedError: the outbox's errors are
translated here, where it is known what they mean for the message.

Messages of one (topic, message group) pass intake one at a time, in arrival order: the fence
check, the send and the spool of one are done before the next begins, so no later message of the
group can overtake an earlier one that is being spooled. The fence is kept in memory, backed by
the outbox (sidecar/fifo_fence.py): a message costs no trip to the outbox unless it is spooled.

Each send's outcome is also reported to ``broker_log`` (sidecar/health_log.py), whose lines say
when the broker stops and starts taking messages: a comparison per message, no line per message.

Each send's outcome is reported to ``pull_in`` (sidecar/pull_in.py), if given: a stored send
pulls in its topic's entries waiting out an UNAVAILABLE back-off.

While the resend pool holds the broker to be in an outage (``outage``, sidecar/outage.py: sends
fail and none was stored lately), intake spools without sending: the pool's probe is the broker's
one caller then, and ends the outage at the first stored send. A message spooled so is answered
SPOOLED with the outage's cause, due as any spooled message is; the wait it adds once the broker is
back is at most one probe interval. Without it, every message of an outage pays its failed sends
and their retries before its spool, and spooling goes slower than storing did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from outbox.entry import OutboxEntry, OutboxMessage, SpoolCause
from outbox.errors import (
    OutboxError,
    OutboxFullError,
    OutboxHeldError,
    OutboxNoSpaceError,
    OutboxUnavailableError,
)
from sidecar.backoff import Backoff
from sidecar.clock import now_ms
from sidecar.coalescer import SendCoalescer
from sidecar.errors import SPOOL_OUTCOME_OPEN, SendFailedError, SendRejectedError
from sidecar.fifo_fence import FifoFence
from sidecar.health_log import SPOOLED, BrokerStateLog
from sidecar.outage import BrokerOutage
from sidecar.producer import SendOutcome, SendReceipt
from sidecar.pull_in import RecoveryPullIn
from sidecar.spool_writer import SpoolWriter
from sidecar.validation import validate_message

LOG = logging.getLogger(__name__)
# What an app told that the outbox cannot write waits before it sends again.
OUTBOX_UNAVAILABLE_RETRY_AFTER_MS = 1_000


@dataclass(frozen=True, slots=True)
class Stored:
    receipt: SendReceipt


@dataclass(frozen=True, slots=True)
class Spooled:
    entry: OutboxEntry


Accepted = Stored | Spooled


class Intake:
    def __init__(
        self,
        coalescer: SendCoalescer,
        spool_writer: SpoolWriter,
        fence: FifoFence,
        backoff: Backoff,
        on_spooled: Callable[[], None],
        pull_in: RecoveryPullIn | None = None,
        broker_log: BrokerStateLog | None = None,
        outage: BrokerOutage | None = None,
        namespace: str = "",
    ) -> None:
        """``namespace``: the producer's, which the broker prefixes the topic with."""
        self._coalescer = coalescer
        self._spool_writer = spool_writer
        self._fence = fence
        self._backoff = backoff
        self._on_spooled = on_spooled
        self._pull_in = pull_in
        self._broker_log = broker_log
        self._outage = outage
        self._namespace = namespace
        # One lock per FIFO group with messages in intake, and how many hold or await it.
        self._group_locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    async def accept(self, message: OutboxMessage) -> Accepted:
        """STORED or SPOOLED; raises SendRejectedError when the message was not taken."""
        validate_message(message, namespace=self._namespace)
        if not message.message_group:
            return await self._send_or_spool(message)
        if not self._fence.loaded:
            raise SendRejectedError(
                "", "the sidecar has not yet read which FIFO groups have entries in the outbox "
                "(it cannot reach the outbox): a FIFO message sent now could overtake them",
                grpc.StatusCode.UNAVAILABLE, OUTBOX_UNAVAILABLE_RETRY_AFTER_MS,
            )  # fmt: skip
        key = (message.topic, message.message_group)
        # The lock lives while anyone holds or awaits it: dropping it while a woken waiter has
        # not yet run would let a newcomer take a fresh lock and overtake that waiter.
        lock, users = self._group_locks.get(key, (asyncio.Lock(), 0))
        self._group_locks[key] = (lock, users + 1)
        try:
            async with lock:
                if key in self._fence:
                    return await self._spool(
                        message,
                        SpoolCause.FIFO_FENCE,
                        "earlier messages of its message group are in the outbox",
                        maybe_stored=False,
                        due_now=True,
                    )
                return await self._send_or_spool(message)
        finally:
            lock, users = self._group_locks[key]
            if users == 1:
                del self._group_locks[key]
            else:
                self._group_locks[key] = (lock, users - 1)

    async def wait_idle(self) -> None:
        """Until the broker requests and spool writes in flight have answered (a clean stop:
        the outbox must not close under a write)."""
        await self._coalescer.wait_idle()
        await self._spool_writer.wait_idle()

    async def _send_or_spool(self, message: OutboxMessage) -> Accepted:
        outage = self._outage
        if outage is not None and outage.failing:
            if not outage.take_probe():
                return await self._spool_in_outage(message, outage.cause)
            try:
                return await self._sent(message, await self._coalescer.send(message))
            finally:
                outage.probe_ended()
        return await self._sent(message, await self._coalescer.send(message))

    async def _spool_in_outage(self, message: OutboxMessage, cause: SpoolCause) -> Spooled:
        spooled = await self._spool(
            message, cause, "the broker takes no sends; the sidecar is probing it",
            maybe_stored=False, due_now=False,
        )  # fmt: skip
        if self._pull_in is not None:
            self._pull_in.backing_off(spooled.entry, cause)
        return spooled

    async def _sent(self, message: OutboxMessage, outcome: SendOutcome) -> Accepted:
        """The send's outcome as the message's answer: STORED, or spooled after a failure."""
        if isinstance(outcome, SendRejectedError):
            raise outcome  # the broker's refusal of this message, as the producer answered it
        if isinstance(outcome, SendFailedError):
            if self._pull_in is not None:
                self._pull_in.failed(message.topic, cause=outcome.cause)
            spooled = await self._spool(
                message, outcome.cause, outcome.detail, outcome.maybe_stored, due_now=False
            )
            if self._pull_in is not None:
                self._pull_in.backing_off(spooled.entry, outcome.cause)
            if self._broker_log is not None:
                self._broker_log.failed(outcome, SPOOLED)
            return spooled
        if self._pull_in is not None:
            # The topic's sends are stored again: its entries backing off may go now.
            self._pull_in.stored(message.topic)
        if self._broker_log is not None:
            self._broker_log.stored()
        return Stored(outcome)

    async def _spool(
        self,
        message: OutboxMessage,
        cause: SpoolCause,
        detail: str,
        maybe_stored: bool,
        due_now: bool,
    ) -> Spooled:
        created_ms = now_ms()
        # The first resend waits one back-off step: an immediate retry is what just failed
        # (and after throttling, RocketMQ's rule forbids it). A fenced entry waits on its group's
        # head instead, so it is due at once.
        next_send_time_ms = created_ms if due_now else created_ms + self._backoff.delay_ms(1)
        entry = OutboxEntry(
            message=message,
            cause=cause,
            created_ms=created_ms,
            next_send_time_ms=next_send_time_ms,
            maybe_stored=maybe_stored,
            last_error=f"{cause.value}: {detail}",
            state_changed_ms=created_ms,
        )
        try:
            stored = await self._spool_writer.spool(entry)
        except OutboxFullError as e:
            raise SendRejectedError(
                "", f"outbox is full: {e}", grpc.StatusCode.RESOURCE_EXHAUSTED, e.retry_after_ms
            ) from e
        except (OutboxNoSpaceError, OutboxHeldError) as e:
            raise SendRejectedError(
                "", f"the broker did not take it and the outbox could not spool it: {e}",
                grpc.StatusCode.UNAVAILABLE, OUTBOX_UNAVAILABLE_RETRY_AFTER_MS,
            ) from e  # fmt: skip
        except OutboxUnavailableError as e:
            # The write may have been applied with its answer lost (a connection cut, a server
            # killed after its log write) or left unconfirmed by replicas: neither SPOOLED nor
            # surely not taken, so the app is told how to send it again without a duplicate.
            raise SendRejectedError(
                "", f"the broker did not take it and the outbox did not confirm the spool, so "
                f"it {SPOOL_OUTCOME_OPEN} {message.message_id} (the outbox keeps one entry an "
                f"id), never as a new message ({e})",
                grpc.StatusCode.UNAVAILABLE, OUTBOX_UNAVAILABLE_RETRY_AFTER_MS,
            ) from e  # fmt: skip
        except OutboxError as e:
            raise SendRejectedError(
                "", f"the broker did not take it and the outbox could not spool it: {e}",
                grpc.StatusCode.UNAVAILABLE, OUTBOX_UNAVAILABLE_RETRY_AFTER_MS,
            ) from e  # fmt: skip
        if message.message_group:
            self._fence.add((message.topic, message.message_group))
        LOG.debug(
            "spooled %s to %s: %s (%s)", message.message_id, message.topic, cause.value, detail,
            extra={"message_id": message.message_id, "topic": message.topic},
        )  # fmt: skip
        if due_now:
            self._on_spooled()  # others wait for their back-off: the pool's poll finds them
        return Spooled(stored)
