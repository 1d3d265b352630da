"""The stand-in's durable state: append-only JSON Lines files in its data directory.

- ``messages.jsonl``: every message stored, one line each, with the broker, queue and queue
  offset the stand-in chose. A send is answered only after its lines are written and fsynced,
  so a SIGKILL never takes back a message that was answered OK.
- ``acks.jsonl``: each message a consumer group acknowledged (or that its tag filter skipped).
- ``groups.jsonl``: the consumer groups created on first use (a RocketMQ broker keeps them too).

A line cut short by a crash (no newline yet) was never answered: reopening drops it. The test
side reads ``messages.jsonl`` with ``read_stored`` while the stand-in runs (it only appends
whole lines).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MESSAGES_FILE = "messages.jsonl"
ACKS_FILE = "acks.jsonl"
GROUPS_FILE = "groups.jsonl"


@dataclass(frozen=True)
class StoredMessage:
    """A message as the stand-in holds it: where it put it, and what the producer sent."""

    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    message_id: str
    body: bytes
    # definition.proto's MessageType name: NORMAL, FIFO, DELAY or TRANSACTION.
    message_type: str
    store_timestamp_ms: int
    born_timestamp_ms: int = 0
    born_host: str = ""
    tag: str | None = None
    keys: tuple[str, ...] = ()
    message_group: str | None = None
    delivery_timestamp_ms: int | None = None
    # Set for a TRANSACTION message: a half message, never delivered (no EndTransaction here).
    transaction_id: str | None = None
    trace_context: str | None = None
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def queue_key(self) -> tuple[str, str, int]:
        return (self.topic, self.broker_name, self.queue_id)

    def to_json(self) -> str:
        fields = asdict(self)
        fields["body"] = base64.b64encode(self.body).decode()
        fields["keys"] = list(self.keys)
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> StoredMessage:
        fields = dict(fields)
        fields["body"] = base64.b64decode(fields["body"])
        fields["keys"] = tuple(fields["keys"])
        return cls(**fields)


class JsonLines:
    """One append-only file of JSON objects; ``append`` returns once they are on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.loaded: list[dict[str, Any]] = list(_whole_lines(path, truncate=True))
        self._file = path.open("ab")

    def append(self, records: list[str]) -> None:
        self._file.write("".join(f"{r}\n" for r in records).encode())
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def _whole_lines(path: Path, truncate: bool) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    if truncate and len(whole) != len(data):
        with path.open("r+b") as f:
            f.truncate(len(whole))
            os.fsync(f.fileno())
    for line in whole.splitlines():
        yield json.loads(line)


class ProxyStore:
    """The messages, acknowledgements and created groups of one data directory."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self._messages = JsonLines(data_dir / MESSAGES_FILE)
        self._acks = JsonLines(data_dir / ACKS_FILE)
        self._groups = JsonLines(data_dir / GROUPS_FILE)
        self.messages: list[StoredMessage] = [
            StoredMessage.from_json(m) for m in self._messages.loaded
        ]
        self._next_offset: dict[tuple[str, str, int], int] = {}
        for m in self.messages:
            self._next_offset[m.queue_key] = m.queue_offset + 1
        # (group, topic, broker, queue id, queue offset) of every acknowledged message.
        self.acked: set[tuple[str, str, str, int, int]] = {
            (a["group"], a["topic"], a["broker"], a["queue_id"], a["queue_offset"])
            for a in self._acks.loaded
        }
        self.created_groups: set[str] = {g["group"] for g in self._groups.loaded}

    def next_offset(self, topic: str, broker: str, queue_id: int) -> int:
        return self._next_offset.get((topic, broker, queue_id), 0)

    def put(self, messages: list[StoredMessage]) -> None:
        """Durably stored once this returns; offsets must follow on from ``next_offset``."""
        for m in messages:
            assert m.queue_offset == self.next_offset(*m.queue_key), m
            self._next_offset[m.queue_key] = m.queue_offset + 1
        self._messages.append([m.to_json() for m in messages])
        self.messages.extend(messages)

    def ack(self, group: str, message: StoredMessage) -> None:
        key = (group, message.topic, message.broker_name, message.queue_id, message.queue_offset)
        if key in self.acked:
            return
        self._acks.append(
            [
                json.dumps(
                    {
                        "group": group,
                        "topic": message.topic,
                        "broker": message.broker_name,
                        "queue_id": message.queue_id,
                        "queue_offset": message.queue_offset,
                    }
                )
            ]
        )
        self.acked.add(key)

    def is_acked(self, group: str, message: StoredMessage) -> bool:
        key = (group, message.topic, message.broker_name, message.queue_id, message.queue_offset)
        return key in self.acked

    def create_group(self, group: str) -> None:
        if group not in self.created_groups:
            self._groups.append([json.dumps({"group": group})])
            self.created_groups.add(group)

    def close(self) -> None:
        for log in (self._messages, self._acks, self._groups):
            log.close()


def read_stored(data_dir: Path, topic: str | None = None) -> list[StoredMessage]:
    """What a stand-in over ``data_dir`` holds (of ``topic``), in the order it stored them."""
    return [
        m
        for m in map(StoredMessage.from_json, _whole_lines(data_dir / MESSAGES_FILE, False))
        if topic is None or m.topic == topic
    ]


def read_acked(data_dir: Path, group: str) -> list[tuple[str, str, int, int]]:
    """(topic, broker, queue id, queue offset) of each message ``group`` acknowledged."""
    return [
        (a["topic"], a["broker"], a["queue_id"], a["queue_offset"])
        for a in _whole_lines(data_dir / ACKS_FILE, False)
        if a["group"] == group
    ]
