"""The outbox contract: every backend (memory, RocksDB, Redis, MySQL; outbox/backends/) keeps
exactly these promises, and tests/outbox/conformance/ checks each of them against every backend.
The rules every backend applies the same way (argument checks, entry changes) are written once,
in outbox/contract_checks.py; what a backend offers beyond them it declares (``OutboxFeatures``).

Methods are blocking; the sidecar calls them from an executor it owns. Times are passed in
(``now_ms``) rather than read, so that every backend agrees on one clock per call and tests can
set it.

Promises:
- ``put`` returns only once its entries are durable in the backend's sense (each backend's module
  docstring says what that survives). All or nothing: a refused ``put`` (``OutboxFullError``)
  wrote none of its entries. An entry whose message id is already in the outbox, in any state, is
  not written again; ``put`` returns the stored one.
- ``put_groups`` is many independent ``put`` requests made durable together, in one durable write
  where the backend allows (a batch of spools): each request keeps ``put``'s promises and gets
  its own answer, its stored entries or the OutboxError that refused it. A request refused by the
  bound (or too large for the backend) refuses none of the others; a backend failure answers
  every request not yet durable with that error (with one write, every request). Requests are
  answered as if put one after another in the order given, so later ones find the entries of
  earlier ones stored.
- ``claim_due`` leases entries that are PENDING, due (``next_send_time_ms <= now_ms``) and not
  under a live lease, soonest due first. While leased, no other claim returns them. A FIFO entry
  (one with a message group) is claimable only when it is the lowest-``seq`` PENDING entry of its
  (topic, message group): so a group has at most one entry in flight and leaves in order.
- An entry claimed over an expired lease, one whose holder recorded no outcome (no reschedule,
  release, bury or delivery), may have been sent: it is claimed with ``maybe_stored=True``, and
  stays so (the claimed entry and the stored one both say it), so that its resend asks the
  broker's index before sending it again.
- ``expire_leases(owner_prefix, now_ms)`` ends the lease of every PENDING entry whose lease owner
  starts with ``owner_prefix``, live or expired, as if its holder had died: the entry is unleased,
  claimable again at its next send time, with ``maybe_stored=True``. A sidecar ends its own dead
  incarnation's leases so at start (owners are ``<sidecar id>/<incarnation>``), rather than wait
  them out.
- ``reschedule``, ``bury`` and ``release`` act only for the lease's owner and return False
  otherwise (the lease expired and another worker may hold the entry now). ``mark_delivered`` acts
  on any PENDING entry whatever its lease: the broker has the message, that is a fact.
  ``mark_delivered_many`` is ``mark_delivered`` for each item in order, in one write where the
  backend allows; an id given twice is delivered by its first item (the second answers False).
- ``reschedule(..., maybe_stored=True)`` marks the entry maybe stored (the failed resend may
  have reached the broker); the flag is stored with the entry, only ever set, and never read
  back from ``last_error``'s wording.
- ``pending_groups`` is every (topic, message group) for which ``has_pending_group`` is True,
  read at once and cheaply (an index, not every entry, where the backend allows): the sidecar
  loads its FIFO fence from it.
- The bound (``OutboxLimits``) counts PENDING and DEAD entries and their body bytes.
- Storage that runs out of room refuses ``put`` with ``OutboxNoSpaceError`` (and
  ``check_writable`` raises it), while claims and the changes that follow them, deliveries first,
  go on as far as the backend can make them: a full disk stops new spools, not the drain. Each
  backend's docstring says how far.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlsplit

from outbox.contract_checks import check_put_entries
from outbox.entry import (
    DeliveryReceipt,
    EntryState,
    OutboxEntry,
    OutboxLimits,
    OutboxStats,
)
from outbox.errors import EntryTooLargeError, OutboxError, OutboxFullError

SCAN_PAGE_MAX = 1_000


@dataclass(frozen=True, slots=True)
class OutboxFeatures:
    """What a backend offers beyond the contract. Each backend class declares its own
    (``Outbox.features``), and tests/outbox/conformance/test_features.py checks every declared
    feature and, where one is not declared, its absence."""

    # Several sidecars (processes) may open one outbox at once and share its entries: claims
    # never overlap between them and the bound holds for all of them. Without it, a second
    # opener of the same URL is refused (OutboxUnavailableError) or gets an outbox of its own.
    shared_by_sidecars: bool
    # What a returned ``put`` stored is there when the outbox is opened again after SIGKILL of
    # the process that put it (and so after a close and reopen). Without it, nothing outlives
    # the instance that put it.
    survives_process_kill: bool


class Outbox(abc.ABC):
    """One backend of the outbox. Thread-safe: the resend pool's workers share one instance."""

    # The URL scheme(s) the backend is opened by (outbox/factory.py).
    name: str = ""
    # What it offers beyond the contract; every backend class declares it.
    features: ClassVar[OutboxFeatures]

    def __init__(self, limits: OutboxLimits) -> None:
        self.limits = limits

    @classmethod
    @abc.abstractmethod
    def from_url(cls, url: str, limits: OutboxLimits, *, create: bool = True) -> Outbox:
        """Open the backend ``url`` names (outbox/factory.py), creating its schema if missing;
        with ``create=False`` (readers, admin commands) raise OutboxNotFoundError instead, where
        the backend can tell (each backend's docstring says whether it can)."""

    @abc.abstractmethod
    def put(self, entries: Sequence[OutboxEntry]) -> list[OutboxEntry]:
        """Store PENDING entries durably; returns them as stored (``seq`` assigned).

        Raises OutboxFullError (nothing written) when they would pass the bound.
        """

    def put_groups(
        self, requests: Sequence[Sequence[OutboxEntry]]
    ) -> list[list[OutboxEntry] | OutboxError]:
        """``put`` each request, each answered on its own: its stored entries, or the OutboxError
        that refused it (``OutboxFullError``, ``EntryTooLargeError``) or that the backend failed
        with, which then answers the requests after it too. A ValueError (entries that are not
        new) is the caller's bug and raises, whichever request it is in.

        This default makes one write per request; a backend with a group committer overrides it
        to make them all durable in one write.
        """
        for entries in requests:
            check_put_entries(entries)
        answers: list[list[OutboxEntry] | OutboxError] = []
        for index, entries in enumerate(requests):
            try:
                answers.append(self.put(entries))
            except (OutboxFullError, EntryTooLargeError) as refused:
                answers.append(refused)
            except OutboxError as failed:
                answers.extend([failed] * (len(requests) - index))
                break
        return answers

    @abc.abstractmethod
    def get(self, message_id: str) -> OutboxEntry | None: ...

    @abc.abstractmethod
    def has_pending_group(self, topic: str, message_group: str) -> bool:
        """True while the FIFO group has PENDING entries: new sends of it must queue behind."""

    def pending_groups(self) -> set[tuple[str, str]]:
        """Every (topic, message group) with PENDING entries: ``has_pending_group`` at once.

        This default reads every PENDING entry; each backend overrides it with one cheap read.
        """
        return {
            group for e in self.scan_all(EntryState.PENDING) if (group := e.fifo_group) is not None
        }

    @abc.abstractmethod
    def claim_due(self, now_ms: int, limit: int, lease_ms: int, owner: str) -> list[OutboxEntry]:
        """Lease up to ``limit`` due entries to ``owner`` until ``now_ms + lease_ms``."""

    @abc.abstractmethod
    def expire_leases(self, owner_prefix: str, now_ms: int) -> int:
        """End the lease of every PENDING entry leased to an owner starting with
        ``owner_prefix`` (live or expired): unleased, due at its next send time, and
        ``maybe_stored``. Returns how many there were."""

    @abc.abstractmethod
    def mark_delivered(self, message_id: str, receipt: DeliveryReceipt) -> bool:
        """PENDING → DELIVERED tombstone. False when the entry is not PENDING (or absent)."""

    def mark_delivered_many(self, deliveries: Sequence[tuple[str, DeliveryReceipt]]) -> list[bool]:
        """``mark_delivered`` for each (message id, receipt), in order: a resend batch's
        tombstones. This default makes one write per item; backends override it with one."""
        return [self.mark_delivered(message_id, receipt) for message_id, receipt in deliveries]

    @abc.abstractmethod
    def reschedule(
        self,
        message_id: str,
        owner: str,
        next_send_time_ms: int,
        error: str,
        now_ms: int,
        *,
        maybe_stored: bool,
    ) -> bool:
        """A failed resend: attempts + 1, last error kept, lease released, due again later.

        ``maybe_stored``: the failed attempt may have reached the broker (it timed out after the
        request went out), so the entry's next resend asks the broker's index first. It is a
        stored flag, never read back from ``error``'s wording, and only ever set: False leaves
        an entry an earlier attempt may have stored as it was (``contract_checks``).
        """

    @abc.abstractmethod
    def bury(self, message_id: str, owner: str, error: str, now_ms: int) -> bool:
        """A failed resend that ends the entry (its delivery budget ran out, or the broker
        rejected it): PENDING → DEAD, attempts + 1 as for a reschedule, the error kept for
        operators."""

    @abc.abstractmethod
    def release(self, message_id: str, owner: str) -> bool:
        """Give a lease back unused (shutdown): claimable at once, attempts unchanged."""

    @abc.abstractmethod
    def requeue(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        """DEAD → PENDING, due now, attempts reset; all dead entries when ``message_ids`` is None.

        May pass the bound: requeued entries were already counted.
        """

    @abc.abstractmethod
    def retry_now(self, message_ids: Sequence[str] | None, now_ms: int) -> int:
        """PENDING entries due later become due now (``next_send_time_ms = now_ms``), attempts
        and last error unchanged; every PENDING entry when ``message_ids`` is None. Returns how
        many changed.

        Left as they are: entries already due (moving them to ``now_ms`` would put them behind
        entries due since), entries under a live lease (a resend is in flight), FIFO entries of
        a group with an entry under a live lease (the group must not get a second one in
        flight), DELIVERED and DEAD entries, and ids not in the outbox.
        """

    @abc.abstractmethod
    def purge(self, state: EntryState, before_ms: int) -> int:
        """Delete DELIVERED or DEAD entries whose state changed before ``before_ms``.

        PENDING entries are never purged (ValueError): that would lose messages.
        """

    @abc.abstractmethod
    def stats(self, now_ms: int) -> OutboxStats:
        """The outbox's totals as of ``now_ms``, exact when read (``rocketbox outbox stats``)."""

    def shared_stats(self, now_ms: int, reader: str, interval_ms: int) -> OutboxStats:
        """``stats`` for a reader that asks every ``interval_ms``, as every sidecar sharing the
        outbox does for its gauges: cheap enough for all of them at once. The counts, ``bytes``
        and ``oldest_pending_created_ms`` are as ``stats`` reads them. What a backend finds only
        by a scan (``in_flight``, ``next_due_ms``) may be what one reader at a time (named by
        ``reader``, under a lease of a few intervals) last found: so one reader scans, however
        many share the outbox, and each backend's docstring says how old it may be.

        This default is ``stats``: for a backend whose stats need no scan.
        """
        return self.stats(now_ms)

    @classmethod
    def label(cls, url: str) -> str:
        """The outbox ``url`` names, for the ``outbox`` label of metrics: the same from every
        process given that URL, so that a shared outbox is counted once, and without
        credentials. This default: the scheme, the hosts and the path (no user, password or
        query); a backend whose URL names the outbox further (a table, a key prefix) adds that.
        """
        parts = urlsplit(url)
        hosts = parts.netloc.rpartition("@")[2]
        return f"{parts.scheme.lower()}://{hosts}{parts.path}"

    @abc.abstractmethod
    def scan(self, state: EntryState | None, after_seq: int, limit: int) -> list[OutboxEntry]:
        """Entries with ``seq > after_seq`` in ``seq`` order, optionally of one state."""

    @abc.abstractmethod
    def check_writable(self) -> None:
        """Raise OutboxUnavailableError unless a ``put`` could succeed now (readiness);
        OutboxNoSpaceError when the storage has no room for it."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def scan_all(self, state: EntryState | None = None) -> Iterator[OutboxEntry]:
        """Every entry (of a state), page by page in ``seq`` order."""
        after_seq = 0
        while True:
            page = self.scan(state, after_seq, SCAN_PAGE_MAX)
            yield from page
            if len(page) < SCAN_PAGE_MAX:
                return
            after_seq = page[-1].seq

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
