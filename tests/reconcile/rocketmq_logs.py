"""Two brokers' stores as Apache RocketMQ writes them (rocketmq_records.py), with the ledger a
sender kept and what the reconciliation must count in them.

- ``broker_4x``: a RocketMQ 4.x broker (before 4.3's transactions): V1 records without the
  __CRC32# property, IPv6 born and store hosts, a transaction committed and one rolled back the
  old way (PREPARED, then COMMIT or ROLLBACK records in the topic itself), a resend stored twice,
  a consumer's %RETRY% copy, a record without UNIQ_KEY, a topic no ledger names, and one
  acknowledged message that is not there: ``LOST``.
- ``broker_5x``: a RocketMQ 5.2+ broker restarted with ``enabledAppendPropCRC`` turned on half
  way: records without and with the property, V1 and V2 (a topic of 140 characters), IPv6 hosts,
  transactions the 4.3+ way (half messages under RMQ_SYS_TRANS_HALF_TOPIC, op records under
  RMQ_SYS_TRANS_OP_HALF_TOPIC: one committed, one rolled back, one unresolved), delayed messages
  (one delivered, one not yet), and a crash mid-append: a torn last record, zeros after it,
  never acknowledged. ``NOTHING_LOST``.

Both use small segments, so records span several segment files ending in blank markers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.reconcile.rocketmq_records import (
    BROKER,
    BROKER_V6,
    PRODUCER,
    PRODUCER_V6,
    Broker,
    Message,
    producer_properties,
    properties_text,
)

SEGMENT_BYTES = 1024
T0 = 1_767_225_600_000
LONG_TOPIC = "Orders-" + "eu-west-1-" * 13 + "xyz"  # 140 characters: V2 from RocketMQ 5.1
COUNT_NAMES = (
    "messages", "lost", "pending", "dead", "recovered", "ok", "unexpected", "unchecked",
    "duplicated", "duplicate_copies", "resend_pending", "parked_only",
)  # fmt: skip


@dataclass
class Store:
    root: Path
    totals: dict[str, int]  # what the reconciliation must count
    log: dict[str, int]  # the commitlog's figures
    acked: list[dict[str, Any]] = field(default_factory=list)

    @property
    def commitlog(self) -> Path:
        return self.root / "store" / "commitlog"

    @property
    def acks(self) -> Path:
        return self.root / "acks.jsonl"

    @property
    def outbox(self) -> Path:
        return self.root / "outbox.jsonl"

    def write_inputs(self) -> None:
        self.acks.write_text("".join(json.dumps(line) + "\n" for line in self.acked))
        self.outbox.write_text("")

    def ack(self, message_id: str, topic: str) -> None:
        line = {"message_id": message_id, "topic": topic, "state": "STORED",
                "time_ms": T0 + len(self.acked), "queue_id": 0, "queue_offset": 0,
                "durable": True}  # fmt: skip
        self.acked.append(line)


def totals(**counts: int) -> dict[str, int]:
    return {name: counts.get(name, 0) for name in COUNT_NAMES}


def uniq(tag: str, i: int) -> str:
    """A UNIQ_KEY as the Java client makes them: 32 hex digits."""
    return f"7F0000013A6C18B4AAC2{tag}{i:06X}"


def message(topic: str, message_id: str | None, i: int, **kw: Any) -> Message:
    pairs = producer_properties(message_id, keys=f"k-{i}") if message_id else [("WAIT", "true")]
    return Message(topic, f"{topic[:6]} {i} ".encode() * (3 + i % 5), properties_text(pairs),
                   queue_id=i % 4, born_timestamp_ms=T0 + i, **kw)  # fmt: skip


def broker_4x(root: Path) -> Store:
    store = Store(
        root,
        totals(messages=11, ok=8, lost=1, unchecked=2, duplicated=1, duplicate_copies=1,
               parked_only=1),
        {"records": 15, "kept_records": 12, "parked_records": 2, "system_topic_records": 1,
         "rollback_records": 1, "records_without_id": 1},
    )  # fmt: skip
    broker = Broker(store.commitlog, SEGMENT_BYTES, release="4.x")
    hosts = [
        (PRODUCER, BROKER),
        (PRODUCER_V6, BROKER),
        (PRODUCER, BROKER_V6),
        (PRODUCER_V6, BROKER_V6),
    ]
    for i in range(6):
        born, at = hosts[i % 4]
        msg = message("Orders", uniq("0A", i), i, born_host=born, store_host=at)
        broker.put(msg)
        store.ack(uniq("0A", i), "Orders")
        if i == 4:
            broker.put(message("Orders", uniq("0A", i), i, born_host=born, store_host=at))
    broker.put(message("%RETRY%billing", uniq("0A", 0), 0))
    broker.put(message("Orders", None, 99))
    for i, commit in ((20, True), (21, False)):
        msg = message("Orders", uniq("0B", i), i, born_host=PRODUCER_V6)
        prepared_at = broker.prepared_in_topic(msg)
        broker.end_in_topic(msg, prepared_at, commit)
        store.ack(uniq("0B", i), "Orders")
    for i in (30, 31):
        broker.put(message("Payments", uniq("0C", i), i))
    store.ack(uniq("0D", 40), "Orders")  # acknowledged, never stored
    store.write_inputs()
    return store


def broker_5x(root: Path) -> Store:
    store = Store(
        root,
        totals(messages=14, ok=14, parked_only=3),
        {"records": 18, "kept_records": 16, "parked_records": 5, "system_topic_records": 2,
         "rollback_records": 0, "records_without_id": 0},
    )  # fmt: skip
    broker = Broker(store.commitlog, SEGMENT_BYTES, release="5.x", append_crc=False)
    for i in range(9):
        if i == 6:  # restarted with enabledAppendPropCRC=true
            broker.append_crc = True
        topic = LONG_TOPIC if i % 3 == 2 else "Orders"
        msg = message(topic, uniq("1A", i), i, born_host=PRODUCER_V6 if i % 2 else PRODUCER,
                      store_host=BROKER_V6 if i % 4 == 3 else BROKER)  # fmt: skip
        broker.put(msg)
        store.ack(uniq("1A", i), topic)
    for i, end in ((10, "commit"), (11, "rollback"), (12, "open")):
        msg = message("Orders", uniq("1B", i), i)
        half = broker.half(msg)
        store.ack(uniq("1B", i), "Orders")
        if end != "open":
            broker.end_transaction(half, end == "commit", uniq("1F", i))
    for i, due in ((20, True), (21, False)):
        msg = message("Orders", uniq("1C", i), i)
        broker.delayed(msg, level=3)
        store.ack(uniq("1C", i), "Orders")
        if due:
            broker.deliver_delayed(msg)
    broker.put(message("Orders", uniq("1D", 30), 30), kept_bytes=60)  # the crash
    store.write_inputs()
    return store
