"""Consumer groups and their settings (RocketMQ's SubscriptionGroupManager).

A group's settings decide how it consumes: ``consume_message_orderly`` (FIFO: a message group's
next message waits for the previous one's ack) and ``retry_max_times`` (a message is delivered at
most retry_max_times + 1 times, then dead-lettered to ``%DLQ%<group>``). Groups are created on
first use with RocketMQ's defaults (16 retries, not orderly) unless created explicitly first.
Persisted like topics, as one JSON file replaced atomically.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from broker.state_file import read_json, write_json_atomic
from broker.store.errors import MessageIllegalError
from rocketbox_api.names import GROUP_LENGTH_MAX, NAME_CHARACTERS, is_group_name

LOG = logging.getLogger(__name__)

RETRY_MAX_TIMES_DEFAULT = 16
RETRY_MAX_TIMES_MAX = 64
GROUPS_FILE_NAME = "groups.json"
DLQ_TOPIC_PREFIX = "%DLQ%"
RETRY_TOPIC_PREFIX = "%RETRY%"


def dlq_topic(group: str) -> str:
    return f"{DLQ_TOPIC_PREFIX}{group}"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_name: str
    consume_message_orderly: bool = False
    retry_max_times: int = RETRY_MAX_TIMES_DEFAULT

    @property
    def max_delivery_attempts(self) -> int:
        return self.retry_max_times + 1


def validate_group_name(group: str) -> None:
    if not is_group_name(group):
        raise MessageIllegalError(
            "group",
            f"1..{GROUP_LENGTH_MAX} characters of {NAME_CHARACTERS}",
            f"{group!r} is not one",
        )


class GroupConfigManager:
    def __init__(self, config_dir: Path) -> None:
        self._path = config_dir / GROUPS_FILE_NAME
        self._lock = threading.Lock()
        self._groups: dict[str, GroupConfig] = {}

    def load(self) -> None:
        raw = read_json(self._path)
        if raw is None:
            return
        self._groups = {g["group_name"]: GroupConfig(**g) for g in raw.get("groups", [])}

    def find(self, group: str) -> GroupConfig | None:
        return self._groups.get(group)

    def list(self) -> list[GroupConfig]:
        return sorted(self._groups.values(), key=lambda g: g.group_name)

    def replace_all(self, groups: Iterable[GroupConfig]) -> None:
        """A slave's sync: its master's groups, exactly."""
        new = {gc.group_name: gc for gc in groups}
        with self._lock:
            if new == self._groups:
                return
            self._groups = new
            write_json_atomic(self._path, {"groups": [asdict(g) for g in self.list()]})
        LOG.info("groups synced from the master: %s", len(new))

    def find_or_create(self, group: str) -> GroupConfig:
        found = self._groups.get(group)
        return found if found is not None else self.create(group, exist_ok=True)

    def create(
        self,
        group: str,
        consume_message_orderly: bool = False,
        retry_max_times: int = RETRY_MAX_TIMES_DEFAULT,
        exist_ok: bool = False,
        replace: bool = False,
    ) -> GroupConfig:
        validate_group_name(group)
        if not 0 <= retry_max_times <= RETRY_MAX_TIMES_MAX:
            raise MessageIllegalError(
                "retry_max_times", f"0..{RETRY_MAX_TIMES_MAX}", f"is {retry_max_times}"
            )
        with self._lock:
            existing = self._groups.get(group)
            if existing is not None and not replace:
                if exist_ok:
                    return existing
                raise MessageIllegalError("group", "unique", f"{group!r} exists")
            gc = GroupConfig(group, consume_message_orderly, retry_max_times)
            self._groups = {**self._groups, group: gc}
            write_json_atomic(self._path, {"groups": [asdict(g) for g in self.list()]})
        LOG.info(
            "group %s: orderly=%s retry_max_times=%s",
            group,
            gc.consume_message_orderly,
            gc.retry_max_times,
        )
        return gc
