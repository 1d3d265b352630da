"""Recovery pull-in: once a topic's sends are stored again, its entries that only wait out an
UNAVAILABLE back-off are made due at once, a bounded wave at a time, so that a backlog drains at
the broker's pace rather than at its back-off's.

Without it, an entry spooled or rescheduled during an outage waits out its own exponential
back-off (up to ``backoff_max_ms``) after the broker is back, and the broker idles meanwhile.

What is pulled in. The ids of entries this sidecar spooled (intake) or rescheduled (the resend
pool) after a failure whose cause is in ``PULL_IN_CAUSES`` are kept in memory, at most
``pull_in_ids_max`` (0: off; about 200 bytes an id); when full, the oldest is dropped: it keeps
its back-off, so nothing is lost, only slower. THROTTLED entries are pulled in too, but only as
any entry is: after a send of their topic was stored, which is the broker taking sends again
(RocketMQ's rule forbids retrying at once after throttling, not once the broker takes sends).
Left out:
- FIFO_FENCE entries: they are due at once already, behind their group's head;
- entries from before a restart of the sidecar, and entries another sidecar sharing the outbox
  spooled: they are not in this registry and keep their back-off. Entries that failed while the
  pool saw an outage (sidecar/outage.py) back off only as long as a probe interval, so few wait
  long however they came.
AMBIGUOUS entries are pulled in: a resend of an entry that may be stored asks the broker's index
first (its ``maybe_stored`` flag, stored by its spool or reschedule), so pulling it in cannot
store it twice; and an outage seen on live connections (a broker killed or hung) ends as
AMBIGUOUS, not UNAVAILABLE.

When. A send of the topic is stored (by intake or the resend pool), and the topic has ids
waiting and no wave out. The evidence is per topic: a failure carries no broker (the producer's
retries may span several, and the spool cause is the last one's), while a stored send of the topic
went through the same route and fault avoidance the pulled-in resends will take. A global trigger
would let one healthy topic pull in, wave after wave, the entries of a topic whose broker is
still down.

How much. A wave is one ``retry_now`` call in the outbox's executor (the outbox contract leaves
leased entries, FIFO groups with a leased entry, and entries already due as they are) of at most
``wave_max`` ids, the oldest first, and then a wake of the resend pool. ``wave_max`` bounds the
ids of all waves out at once, over all topics: the resend pool passes its ``claim_batch_max``,
so what the pull-in adds is at most one claim's worth at a time. A topic whose wave waits for
room is served in turn, round robin.

The next wave of a topic starts only once every entry its wave made due was stored. Any failed
send of the topic meanwhile (intake's or a resend's, whatever the cause) ends the wave and stops
the pull-in: the wave's failed entries are rescheduled with their normal growing back-off, and
the topic's next wave needs a stored send after a quiet time that grows, with jitter, with each
wave ended so, up to the pool's ``probe_interval_max_ms`` (the ``backoff`` given): a broker that
failed the first sends after its return keeps the backlog waiting no longer than a probe would.
A flapping broker thus sees at most one wave per recovery, and an entry pulled in costs at most
one attempt per wave. A wave whose entries are not all heard of as stored within
``wave_timeout_ms`` (the pool passes its lease: another sidecar sharing the outbox resent some, or
the broker rejected one) ends with no failure seen, and the next wave starts: it is as bounded as
the first.

Every outcome reported here is also reported to ``outage`` (sidecar/outage.py), if given: intake's
and the pool's sends are its evidence too.

Runs on the event loop (intake and the resend pool report from it): no locks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from outbox.entry import EntryState, OutboxEntry, SpoolCause
from sidecar.async_outbox import AsyncOutbox
from sidecar.backoff import Backoff
from sidecar.clock import now_ms
from sidecar.metrics import SidecarMetrics
from sidecar.outage import BrokerOutage

LOG = logging.getLogger(__name__)
# Failures after which an entry waits only for the broker to come back.
PULL_IN_CAUSES = frozenset({SpoolCause.UNAVAILABLE, SpoolCause.AMBIGUOUS, SpoolCause.THROTTLED})


@dataclass(slots=True)
class Wave:
    # The ids asked of retry_now and not yet heard of as stored.
    message_ids: set[str]
    # Its share of ``wave_max`` until it ends.
    size: int
    # How many retry_now made due; None until it answered.
    made_due: int | None = None
    stored: int = 0
    expiry: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class TopicState:
    """A topic's ids waiting (oldest first), its wave out, and its quiet time after a wave
    ended by a failure. Dropped when it has none of them."""

    waiting: dict[str, None] = field(default_factory=dict)
    wave: Wave | None = None
    failed_waves: int = 0
    quiet_until_s: float = 0.0


class RecoveryPullIn:
    def __init__(
        self,
        outbox: AsyncOutbox,
        backoff: Backoff,
        ids_max: int,
        wave_max: int,
        wave_timeout_ms: int,
        on_due: Callable[[], None],
        metrics: SidecarMetrics | None = None,
        outage: BrokerOutage | None = None,
    ) -> None:
        if ids_max < 0 or wave_max < 1 or wave_timeout_ms < 1:
            raise ValueError(
                f"ids_max must be >= 0 (got {ids_max}), wave_max >= 1 (got {wave_max}), "
                f"wave_timeout_ms >= 1 (got {wave_timeout_ms})"
            )
        self._outbox = outbox
        self._backoff = backoff
        self._ids_max = ids_max
        self._wave_max = wave_max
        self._wave_timeout_s = wave_timeout_ms / 1000.0
        self._on_due = on_due
        self._metrics = metrics or SidecarMetrics()
        self._outage = outage
        # Every id waiting → its topic, oldest first: the order in which a full registry drops.
        self._waiting: OrderedDict[str, str] = OrderedDict()
        self._topics: dict[str, TopicState] = {}
        # Topics with a stored send whose wave waits for room under wave_max, in turn.
        self._ready: dict[str, None] = {}
        self._ids_in_waves = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        # Entries made due by the pull-in, also counted in the metrics.
        self.pulled_in = 0

    def __len__(self) -> int:
        """Ids waiting to be pulled in."""
        return len(self._waiting)

    def backing_off(self, entry: OutboxEntry, cause: SpoolCause) -> None:
        """The entry waits out a back-off after a failure of ``cause`` (a spool, a reschedule)."""
        if (
            cause not in PULL_IN_CAUSES
            or self._ids_max == 0
            or entry.state is not EntryState.PENDING
        ):
            return
        message_id = entry.message_id
        self._forget(message_id)
        if len(self._waiting) >= self._ids_max:
            self._forget(next(iter(self._waiting)))
        topic = entry.message.topic
        self._waiting[message_id] = topic
        self._topics.setdefault(topic, TopicState()).waiting[message_id] = None

    def stored(self, topic: str, message_ids: Iterable[str] = ()) -> None:
        """A send of ``topic`` was stored: intake's (no ids) or the resend pool's (the ids
        delivered). May start the topic's next wave."""
        if self._outage is not None:
            self._outage.stored()
        state = self._topics.get(topic)
        if state is None:
            return
        wave = state.wave
        for message_id in message_ids:
            self._forget(message_id)
            if wave is not None and message_id in wave.message_ids:
                wave.message_ids.discard(message_id)
                wave.stored += 1
        if wave is None:
            if time.monotonic() >= state.quiet_until_s:
                self._ready[topic] = None
                self._start_waves()
            return
        if wave.made_due is not None and wave.stored >= wave.made_due:
            self._end_wave(topic, state, wave, succeeded=wave.made_due > 0)

    def failed(
        self, topic: str, message_id: str | None = None, cause: SpoolCause | None = None
    ) -> None:
        """A send of ``topic`` failed, whatever the cause (intake's, or a resend's or index
        lookup's of ``message_id``): its wave, if out, ends, and the topic goes quiet. A wave
        waiting for room no longer starts: the stored send it was for is no evidence now."""
        if self._outage is not None:
            self._outage.failed(cause)
        if message_id is not None:
            self._forget(message_id)
        self._ready.pop(topic, None)
        state = self._topics.get(topic)
        if state is None or state.wave is None:
            return
        state.failed_waves += 1
        quiet_s = self._backoff.delay_ms(state.failed_waves) / 1000.0
        state.quiet_until_s = time.monotonic() + quiet_s
        LOG.info(
            "a send to %s failed while %d of its entries were pulled in; no more for %.1f s",
            topic, state.wave.size, quiet_s,
        )  # fmt: skip
        self._end_wave(topic, state, state.wave, succeeded=False)

    async def stop(self) -> None:
        """No more waves; those whose retry_now is out finish (before the outbox closes)."""
        self._stopping = True
        for state in self._topics.values():
            if state.wave is not None and state.wave.expiry is not None:
                state.wave.expiry.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _forget(self, message_id: str) -> None:
        topic = self._waiting.pop(message_id, None)
        if topic is not None:
            state = self._topics[topic]
            del state.waiting[message_id]
            self._drop_if_idle(topic, state)

    def _drop_if_idle(self, topic: str, state: TopicState) -> None:
        if not state.waiting and state.wave is None and time.monotonic() >= state.quiet_until_s:
            del self._topics[topic]
            self._ready.pop(topic, None)

    def _start_waves(self) -> None:
        """Waves for the ready topics, in turn, while ``wave_max`` has room."""
        while self._ready and not self._stopping:
            room = self._wave_max - self._ids_in_waves
            if room <= 0:
                return
            topic = next(iter(self._ready))
            del self._ready[topic]
            state = self._topics.get(topic)
            if state is None or state.wave is not None:
                continue
            if not state.waiting:
                self._drop_if_idle(topic, state)
                continue
            message_ids = list(itertools.islice(state.waiting, room))
            wave = state.wave = Wave(set(message_ids), len(message_ids))
            self._ids_in_waves += wave.size
            for message_id in message_ids:
                self._forget(message_id)
            wave.expiry = asyncio.get_running_loop().call_later(
                self._wave_timeout_s, self._expire, topic, wave
            )
            task = asyncio.create_task(self._pull_in(topic, wave, message_ids))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pull_in(self, topic: str, wave: Wave, message_ids: list[str]) -> None:
        try:
            made_due = await self._outbox.retry_now(message_ids, now_ms())
        except Exception as e:  # the outbox is down: the entries keep their back-off
            LOG.warning("pulling in %d entries of %s failed: %s", len(message_ids), topic, e)
            state = self._topics.get(topic)
            if state is not None and state.wave is wave:
                self._end_wave(topic, state, wave, succeeded=False, next_wave=False)
            return
        if made_due:
            self.pulled_in += made_due
            self._metrics.resends_pulled_in.inc(made_due)
            LOG.debug("pulled in %d entries of %s", made_due, topic)
            self._on_due()
        state = self._topics.get(topic)
        if state is None or state.wave is not wave:
            return  # ended meanwhile by a failure: what it made due is resent all the same
        wave.made_due = made_due
        if wave.stored >= made_due:
            self._end_wave(topic, state, wave, succeeded=made_due > 0)

    def _expire(self, topic: str, wave: Wave) -> None:
        state = self._topics.get(topic)
        if state is not None and state.wave is wave:
            LOG.debug(
                "%d pulled-in entries of %s not heard of in time", len(wave.message_ids), topic
            )
            wave.expiry = None
            self._end_wave(topic, state, wave, succeeded=False)

    def _end_wave(
        self,
        topic: str,
        state: TopicState,
        wave: Wave,
        *,
        succeeded: bool,
        next_wave: bool = True,
    ) -> None:
        """The wave is over; unless a failure ended it (the topic is quiet then) or the outbox
        failed, the topic's next wave takes its turn."""
        if wave.expiry is not None:
            wave.expiry.cancel()
        state.wave = None
        self._ids_in_waves -= wave.size
        if succeeded:
            state.failed_waves = 0
        if next_wave and time.monotonic() >= state.quiet_until_s:
            self._ready[topic] = None
        self._drop_if_idle(topic, state)
        self._start_waves()
