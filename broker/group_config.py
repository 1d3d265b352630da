"""Consumer groups and their settings (RocketMQ's SubscriptionGroupManager).

A group's settings decide how it consumes: ``consume_message_orderly`` (FIFO: a message group's
next message waits for the previous one's ack) and ``retry_max_times`` (a message is delivered at
most retry_max_times + 1 times, then dead-lettered to ``%DLQ%<group>``) and
``consume_broadcast_enable`` (RocketMQ's name: every member receives every message, each with its
own progress, broadcast_members.py; otherwise the members share them, clustering). Groups are
created on first use with RocketMQ's defaults (16 retries, not orderly, clustering) unless created
explicitly first.

A group's consume model does not change under live consumers: CreateGroup of an existing group is
refused (the admin names the model it has); only the broker's ``--group`` at start replaces a
group's settings, when no consumer is connected yet, and it logs a model change. DeleteGroup
removes a group none of whose consumers is connected; it can then be created with other settings.
Persisted like topics, as one JSON file replaced atomically.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from broker.state_file import read_json, write_json_atomic
from broker.store.errors import MessageIllegalError
from rocketbox_api.message_rules import (
    DLQ_TOPIC_PREFIX,
    SYSTEM_GROUP_RULE,
    is_system_group,
    name_fault,
    shown,
)
from rocketbox_api.names import GROUP_LENGTH_MAX

LOG = logging.getLogger(__name__)

RETRY_MAX_TIMES_DEFAULT = 16
RETRY_MAX_TIMES_MAX = 64
GROUPS_FILE_NAME = "groups.json"


def dlq_topic(group: str) -> str:
    return f"{DLQ_TOPIC_PREFIX}{group}"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_name: str
    consume_message_orderly: bool = False
    retry_max_times: int = RETRY_MAX_TIMES_DEFAULT
    consume_broadcast_enable: bool = False

    @property
    def max_delivery_attempts(self) -> int:
        return self.retry_max_times + 1


def model_name(gc: GroupConfig) -> str:
    """RocketMQ's MessageModel of the group, as operators read it."""
    return "broadcasting" if gc.consume_broadcast_enable else "clustering"


def validate_group_name(group: str) -> None:
    """RocketMQ's name rule, told as CreateTopic tells a topic's (``name_fault``): a name over
    its length is not quoted back, so no answer outgrows what gRPC lets an error carry. System
    groups (rocketbox_api/message_rules.py) are refused, as the gRPC edge refuses them."""
    fault = name_fault(group, GROUP_LENGTH_MAX)
    if fault is not None:
        raise MessageIllegalError("group", *fault)
    if is_system_group(group):
        raise MessageIllegalError("group", SYSTEM_GROUP_RULE, f"{shown(group)} is a system group")


class GroupConfigManager:
    def __init__(self, config_dir: Path) -> None:
        self._path = config_dir / GROUPS_FILE_NAME
        self._lock = threading.Lock()
        self._groups: dict[str, GroupConfig] = {}
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change of the table (a group created, replaced or
        deleted), on the thread that changed it, outside the lock: a master's slaves are sent
        the change (broker/ha/slave_synchronize.py)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

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
        consume_broadcast_enable: bool = False,
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
            gc = GroupConfig(
                group, consume_message_orderly, retry_max_times, consume_broadcast_enable
            )
            if (
                existing is not None
                and existing.consume_broadcast_enable != gc.consume_broadcast_enable
            ):
                LOG.warning(
                    "group %s: consume model changed from %s to %s",
                    group,
                    model_name(existing),
                    model_name(gc),
                )
            self._groups = {**self._groups, group: gc}
            write_json_atomic(self._path, {"groups": [asdict(g) for g in self.list()]})
        LOG.info(
            "group %s: orderly=%s retry_max_times=%s model=%s",
            group,
            gc.consume_message_orderly,
            gc.retry_max_times,
            model_name(gc),
        )
        self._changed()
        return gc

    def delete(self, group: str) -> GroupConfig | None:
        """Remove ``group`` from the table (RocketMQ's deleteSubGroup); None when it is not
        there. Its consume progress stays: a group created again continues from it."""
        with self._lock:
            gc = self._groups.get(group)
            if gc is None:
                return None
            self._groups = {k: v for k, v in self._groups.items() if k != group}
            write_json_atomic(self._path, {"groups": [asdict(g) for g in self.list()]})
        LOG.info("deleted group %s (%s)", group, model_name(gc))
        self._changed()
        return gc
