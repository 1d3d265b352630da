"""A commitlog, ledger and outbox with planted findings, and what the reconciliation must say.

Every planted message is a ``Plant``: its id, topic, 10-minute bucket, the outcome the
reconciliation must give it, and how many copies the commitlog holds. ``expected_counts`` turns
the list into the per-(topic, bucket) counts by plain Python: the specification the Spark job is
held to. The files are written as rocketbox writes them: the commitlog with the broker's codec
(testdata.py's CommitLogWriter: small segments, so several scan tasks, blank padding,
and a torn last record), the ledger as the sidecar writes it (plus a torn last line), the outbox
through a real MemoryOutbox and outbox/export.py.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from outbox import DeliveryReceipt, OutboxEntry, OutboxMessage, SpoolCause
from outbox.backends.memory import MemoryOutbox
from outbox.entry import OutboxLimits
from outbox.export import export_jsonl, export_parquet
from tests.reconcile.testdata import CommitLogWriter, ledger_line, write_ledger

T0 = 1_767_225_600_000  # 2026-01-01T00:00Z, a bucket boundary
BUCKET_MS = 600_000
SEGMENT_BYTES = 8 * 1024
LEASE_MS = 60_000


def at(bucket: int, second: float) -> int:
    return T0 + bucket * BUCKET_MS + int(second * 1000)


@dataclass
class Plant:
    message_id: str
    topic: str
    bucket: int
    outcome: str
    copies: int = 1
    parked_only: bool = False
    resend_pending: bool = False


@dataclass
class Planted:
    root: Path
    plants: list[Plant] = field(default_factory=list)
    # (store time, topic, id, extra properties) of every record, written in store-time order.
    records: list[tuple[int, str, str | None, dict[str, str]]] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    # (id, topic, created_ms, state, cause, maybe_stored, delivered_ms)
    entries: list[tuple[str, str, int, str, SpoolCause, bool, int | None]] = field(
        default_factory=list
    )
    latencies_ms: list[int] = field(default_factory=list)
    torn_id: str = ""

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def acks(self) -> Path:
        return self.root / "acks.jsonl"

    @property
    def outbox_jsonl(self) -> Path:
        return self.root / "outbox.jsonl"

    @property
    def outbox_parquet(self) -> Path:
        return self.root / "outbox.parquet"

    # -- planting ---------------------------------------------------------------------------------
    def plant(self, plant: Plant) -> Plant:
        self.plants.append(plant)
        return plant

    def store_copy(self, ts: int, topic: str, message_id: str | None, **props: str) -> None:
        self.records.append((ts, topic, message_id, props))

    def ack(
        self, message_id: str, topic: str, state: str, ts: int, cause: str | None = None
    ) -> None:
        self.ledger.append(
            ledger_line(message_id, topic, state, ts, cause=cause, queue_id=0, queue_offset=0)
        )

    def spool(
        self,
        message_id: str,
        topic: str,
        created_ms: int,
        state: str,
        cause: SpoolCause = SpoolCause.UNAVAILABLE,
        maybe_stored: bool = False,
        delivered_ms: int | None = None,
    ) -> None:
        self.entries.append(
            (message_id, topic, created_ms, state, cause, maybe_stored, delivered_ms)
        )

    # -- writing ----------------------------------------------------------------------------------
    def write(self) -> None:
        with CommitLogWriter(self.store / "commitlog", SEGMENT_BYTES) as log:
            for ts, topic, message_id, props in sorted(self.records, key=lambda r: r[0]):
                log.append(topic, message_id, ts, body=b"b" * 40, properties=props)
            last_ts = max(r[0] for r in self.records)
            log.append_torn("Orders", self.torn_id, last_ts, kept_bytes=60)
        write_ledger(self.acks, sorted(self.ledger, key=lambda line: line["time_ms"]))
        with self.acks.open("a", encoding="utf-8") as f:
            f.write('{"message_id":"TORN-LINE","top')  # a crash tore the last line
        outbox = self.outbox()
        with self.outbox_jsonl.open("w", encoding="utf-8") as f:
            export_jsonl(outbox, f)
        export_parquet(outbox, self.outbox_parquet)
        outbox.close()

    def outbox(self) -> MemoryOutbox:
        outbox = MemoryOutbox(OutboxLimits())
        outbox.put(
            [
                OutboxEntry(
                    message=OutboxMessage(topic=topic, body=b"b" * 40, message_id=message_id),
                    cause=cause,
                    created_ms=created,
                    next_send_time_ms=created,
                    maybe_stored=maybe_stored,
                    state_changed_ms=created,
                )
                for message_id, topic, created, _, cause, maybe_stored, _ in self.entries
            ]
        )
        for message_id, _, _, state, _, _, delivered_ms in self.entries:
            if state == "DELIVERED":
                assert delivered_ms is not None
                assert outbox.mark_delivered(message_id, DeliveryReceipt(1, 7, delivered_ms))
        claimed = outbox.claim_due(T0 + 100 * BUCKET_MS, 10_000, LEASE_MS, "planter")
        dead = {e[0] for e in self.entries if e[3] == "DEAD"}
        for entry in claimed:
            if entry.message_id in dead:
                assert outbox.bury(entry.message_id, "planter", "gave up", T0 + 3 * BUCKET_MS)
            else:
                assert outbox.release(entry.message_id, "planter")
        return outbox


def planted(root: Path) -> Planted:
    """The scenario (see the README of each block below); files written under ``root``."""
    p = Planted(root)
    n = iter(range(1, 10_000))

    def new_id(prefix: str) -> str:
        return f"01{prefix}{next(n):028X}"

    _plant_bucket_0(p, new_id)
    _plant_bucket_1(p, new_id)
    _plant_bucket_2(p, new_id)
    for plant in p.plants:
        if plant.outcome in ("lost", "pending", "dead"):
            plant.copies = 0
    p.write()
    return p


def _plant_bucket_0(p: Planted, new_id: Callable[[str], str]) -> None:
    # Bucket 0. Orders: 40 ok; 2 lost (acknowledged STORED, never stored); 3 stored twice and 1
    # three times (ok, duplicated). Payments: 20 ok; 2 stored and never acknowledged in a topic
    # the ledger names (unexpected). Audit (no ledger names it): 5 stored (unchecked).
    for i in range(40):
        m = p.plant(Plant(new_id("A"), "Orders", 0, "ok"))
        p.store_copy(at(0, i), "Orders", m.message_id)
        p.ack(m.message_id, "Orders", "STORED", at(0, i))
    for i in range(2):
        m = p.plant(Plant(new_id("B"), "Orders", 0, "lost"))
        p.ack(m.message_id, "Orders", "STORED", at(0, 50 + i))
    for i, copies in enumerate((2, 2, 2, 3)):
        m = p.plant(Plant(new_id("C"), "Orders", 0, "ok", copies=copies))
        p.ack(m.message_id, "Orders", "STORED", at(0, 60 + i))
        for c in range(copies):
            p.store_copy(at(0, 60 + i + 10 * c), "Orders", m.message_id)
    for i in range(20):
        m = p.plant(Plant(new_id("D"), "Payments", 0, "ok"))
        p.store_copy(at(0, 100 + i), "Payments", m.message_id)
        p.ack(m.message_id, "Payments", "STORED", at(0, 100 + i))
    for i in range(2):
        m = p.plant(Plant(new_id("E"), "Payments", 0, "unexpected"))
        p.store_copy(at(0, 130 + i), "Payments", m.message_id)
    for i in range(5):
        m = p.plant(Plant(new_id("F"), "Audit", 0, "unchecked"))
        p.store_copy(at(0, 140 + i), "Audit", m.message_id)


def _plant_bucket_1(p: Planted, new_id: Callable[[str], str]) -> None:
    # Bucket 1. Orders: 30 ok; 4 spooled (UNAVAILABLE), PENDING, not stored; 2 spooled
    # (THROTTLED), DEAD, not stored; 3 ambiguous, stored before they were spooled, DELIVERED
    # (recovered); 1 ambiguous, stored, still PENDING (recovered, a resend would duplicate it);
    # 1 ambiguous, stored by its first attempt and again by the resend (recovered, duplicated).
    # Payments: 5 spooled and delivered later (ok; their latencies are the histogram's); 1
    # spooled, in no outbox, not stored (lost); 1 DELIVERED in the outbox, not stored (lost).
    for i in range(30):
        m = p.plant(Plant(new_id("G"), "Orders", 1, "ok"))
        p.store_copy(at(1, i), "Orders", m.message_id)
        p.ack(m.message_id, "Orders", "STORED", at(1, i))
    for i in range(4):
        m = p.plant(Plant(new_id("H"), "Orders", 1, "pending"))
        p.ack(m.message_id, "Orders", "SPOOLED", at(1, 40 + i), "UNAVAILABLE")
        p.spool(m.message_id, "Orders", at(1, 40 + i), "PENDING")
    for i in range(2):
        m = p.plant(Plant(new_id("I"), "Orders", 1, "dead"))
        p.ack(m.message_id, "Orders", "SPOOLED", at(1, 50 + i), "THROTTLED")
        p.spool(m.message_id, "Orders", at(1, 50 + i), "DEAD", SpoolCause.THROTTLED)
    for i in range(5):
        copies = 2 if i == 4 else 1
        pending = i == 3
        m = p.plant(
            Plant(new_id("J"), "Orders", 1, "recovered", copies=copies, resend_pending=pending)
        )
        p.store_copy(at(1, 60 + i) - 100, "Orders", m.message_id)  # the ambiguous attempt
        if copies == 2:
            p.store_copy(at(1, 60 + i) + 5_000, "Orders", m.message_id)  # the resend
        p.ack(m.message_id, "Orders", "SPOOLED", at(1, 60 + i), "AMBIGUOUS")
        p.spool(
            m.message_id, "Orders", at(1, 60 + i), "PENDING" if pending else "DELIVERED",
            SpoolCause.AMBIGUOUS, maybe_stored=True,
            delivered_ms=None if pending else at(1, 60 + i) + 5_000,
        )  # fmt: skip
        p.latencies_ms.append(0)  # stored before it was spooled
    for i, latency_ms in enumerate((200, 1_500, 4_000, 25_000, 90_000)):
        m = p.plant(Plant(new_id("K"), "Payments", 1, "ok"))
        spooled = at(1, 100 + i)
        p.ack(m.message_id, "Payments", "SPOOLED", spooled, "UNAVAILABLE")
        p.spool(m.message_id, "Payments", spooled, "DELIVERED", delivered_ms=spooled + latency_ms)
        p.store_copy(spooled + latency_ms, "Payments", m.message_id)
        p.latencies_ms.append(latency_ms)
    m = p.plant(Plant(new_id("L"), "Payments", 1, "lost"))
    p.ack(m.message_id, "Payments", "SPOOLED", at(1, 120), "UNAVAILABLE")
    m = p.plant(Plant(new_id("M"), "Payments", 1, "lost"))
    p.ack(m.message_id, "Payments", "SPOOLED", at(1, 121), "UNAVAILABLE")
    p.spool(m.message_id, "Payments", at(1, 121), "DELIVERED", delivered_ms=at(1, 125))


def _plant_bucket_2(p: Planted, new_id: Callable[[str], str]) -> None:
    # Bucket 2. Orders: 2 delayed messages not yet due, parked under SCHEDULE_TOPIC_XXXX (ok,
    # parked only); 1 delayed message that came due (parked copy + its real copy: ok, one copy);
    # 2 ok messages a consumer group retried (copies under %RETRY%: not duplicates); the torn
    # last record, acknowledged STORED (lost: recovery cuts it). Payments: 1 PENDING and 1 DEAD
    # entry no ledger mentions (pending, dead). Also a record without a message id and a
    # transaction op record (system topic): counted, never classified.
    for i in range(2):
        m = p.plant(Plant(new_id("N"), "Orders", 2, "ok", copies=0, parked_only=True))
        p.ack(m.message_id, "Orders", "STORED", at(2, i))
        p.store_copy(at(2, i), "SCHEDULE_TOPIC_XXXX", m.message_id, REAL_TOPIC="Orders",
                     REAL_QID="0", TIMER_DELIVER_MS=str(at(5, 0)))  # fmt: skip
    m = p.plant(Plant(new_id("O"), "Orders", 2, "ok"))
    p.ack(m.message_id, "Orders", "STORED", at(2, 10))
    p.store_copy(at(2, 10), "SCHEDULE_TOPIC_XXXX", m.message_id, REAL_TOPIC="Orders",
                 REAL_QID="0")  # fmt: skip
    p.store_copy(at(2, 30), "Orders", m.message_id)
    for i in range(2):
        m = p.plant(Plant(new_id("P"), "Orders", 2, "ok"))
        p.ack(m.message_id, "Orders", "STORED", at(2, 40 + i))
        p.store_copy(at(2, 40 + i), "Orders", m.message_id)
        p.store_copy(at(2, 45 + i), "%RETRY%Fulfilment", m.message_id, RETRY_TOPIC="Orders")
    torn = p.plant(Plant(new_id("Q"), "Orders", 2, "lost", copies=0))
    p.torn_id = torn.message_id
    p.ack(torn.message_id, "Orders", "STORED", at(2, 90))
    m = p.plant(Plant(new_id("R"), "Payments", 2, "pending", copies=0))
    p.spool(m.message_id, "Payments", at(2, 60), "PENDING")
    m = p.plant(Plant(new_id("S"), "Payments", 2, "dead", copies=0))
    p.spool(m.message_id, "Payments", at(2, 61), "DEAD")
    p.store_copy(at(2, 70), "Orders", None)
    p.store_copy(at(2, 71), "RMQ_SYS_TRANS_OP_HALF_TOPIC", new_id("T"))


COUNT_NAMES = (
    "messages", "lost", "pending", "dead", "recovered", "ok", "unexpected", "unchecked",
    "duplicated", "duplicate_copies", "resend_pending", "parked_only",
)  # fmt: skip


def counts(plants: list[Plant]) -> dict[str, int]:
    out = dict.fromkeys(COUNT_NAMES, 0)
    for plant in plants:
        out["messages"] += 1
        out[plant.outcome] += 1
        out["duplicated"] += plant.copies > 1
        out["duplicate_copies"] += max(plant.copies - 1, 0)
        out["resend_pending"] += plant.resend_pending
        out["parked_only"] += plant.parked_only
    return out


def expected_counts(plants: list[Plant]) -> dict[tuple[str | None, int | None], dict[str, int]]:
    """Counts per (topic, bucket start), per topic (bucket None), per bucket (topic None) and in
    total (both None)."""
    groups: dict[tuple[str | None, int | None], list[Plant]] = collections.defaultdict(list)
    for plant in plants:
        start = T0 + plant.bucket * BUCKET_MS
        for key in ((plant.topic, start), (plant.topic, None), (None, start), (None, None)):
            groups[key].append(plant)
    return {key: counts(group) for key, group in groups.items()}
