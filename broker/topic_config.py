"""Topics: their queue counts and accepted message types (RocketMQ's TopicConfigManager).

Persisted as one JSON file under the store root, rewritten atomically (write a temporary file,
fsync, rename), so a crash leaves either the old table or the new one.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from broker.errors import TopicExistsError, TopicNotFoundError
from broker.state_file import read_json, write_json_atomic
from broker.store.errors import MessageIllegalError
from rocketbox_api.message_rules import SYSTEM_TOPIC_PREFIXES, is_system_topic, name_fault
from rocketbox_api.names import TOPIC_LENGTH_MAX

LOG = logging.getLogger(__name__)

QUEUE_NUMS_MAX = 1024
TOPICS_FILE_NAME = "topics.json"


class TopicMessageType(enum.Enum):
    """What a topic accepts (RocketMQ 5's topic attribute ``message.type``)."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"  # all four

    def accepts(self, message_type: TopicMessageType) -> bool:
        return self is TopicMessageType.MIXED or self is message_type


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic_name: str
    queue_nums: int = 8
    message_type: TopicMessageType = TopicMessageType.MIXED

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["message_type"] = self.message_type.value
        return d


def validate_topic_name(topic: str, allow_system: bool = False) -> None:
    fault = name_fault(topic, TOPIC_LENGTH_MAX)
    if fault is not None:
        raise MessageIllegalError("topic", *fault)
    if not allow_system and is_system_topic(topic):
        raise MessageIllegalError(
            "topic",
            f"no system prefix {SYSTEM_TOPIC_PREFIXES} nor name such as TBW102",
            f"{topic!r} is a system topic",
        )


class TopicConfigManager:
    def __init__(self, config_dir: Path, default_queue_nums: int) -> None:
        self._path = config_dir / TOPICS_FILE_NAME
        self._default_queue_nums = default_queue_nums
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change of the table (a topic created or deleted), on
        the thread that changed it, outside the lock: the broker registers again with its
        NameServers so that routes follow."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    def load(self) -> None:
        raw = read_json(self._path)
        if raw is None:
            return
        topics = {}
        for entry in raw.get("topics", []):
            tc = TopicConfig(
                entry["topic_name"],
                int(entry["queue_nums"]),
                TopicMessageType(entry["message_type"]),
            )
            topics[tc.topic_name] = tc
        self._topics = topics
        LOG.info("loaded %s topics from %s", len(topics), self._path)

    def find(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def list(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.topic_name)

    def create(
        self,
        topic: str,
        queue_nums: int | None = None,
        message_type: TopicMessageType = TopicMessageType.MIXED,
        exist_ok: bool = False,
        allow_system: bool = False,
    ) -> TopicConfig:
        validate_topic_name(topic, allow_system)
        nums = self._default_queue_nums if queue_nums is None else queue_nums
        if not 1 <= nums <= QUEUE_NUMS_MAX:
            raise MessageIllegalError("queue_nums", f"1..{QUEUE_NUMS_MAX}", f"is {nums}")
        with self._lock:
            existing = self._topics.get(topic)
            if existing is not None:
                if exist_ok:
                    return existing
                raise TopicExistsError(f"topic {topic!r} exists")
            tc = TopicConfig(topic, nums, message_type)
            self._topics = {**self._topics, topic: tc}
            self._persist()
        LOG.info("created topic %s: %s queues, %s", topic, nums, message_type.value)
        self._changed()
        return tc

    def delete(self, topic: str) -> TopicConfig:
        with self._lock:
            tc = self._topics.get(topic)
            if tc is None:
                raise TopicNotFoundError(f"topic {topic!r} does not exist")
            self._topics = {k: v for k, v in self._topics.items() if k != topic}
            self._persist()
        LOG.info("deleted topic %s", topic)
        self._changed()
        return tc

    def replace_all(self, topics: Iterable[TopicConfig]) -> None:
        """A slave's sync: its master's topics, exactly."""
        new = {tc.topic_name: tc for tc in topics}
        with self._lock:
            if new == self._topics:
                return
            self._topics = new
            self._persist()
        LOG.info("topics synced from the master: %s", len(new))

    def _persist(self) -> None:
        write_json_atomic(self._path, {"topics": [t.to_json() for t in self.list()]})
