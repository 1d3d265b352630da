"""The route table (RocketMQ's RouteInfoManager): which broker groups hold which topics, and
where their brokers are.

Four tables under one lock, as RocketMQ keeps them:

- ``broker_addr_table``: broker name (the group) → its cluster and live brokers by id;
- ``cluster_addr_table``: cluster → its broker names;
- ``topic_queue_table``: topic → broker name → the group's queue data;
- ``broker_live_table``: broker address → its last registration and when it came.

Invariants, kept by every method: a group in broker_addr_table has at least one broker, and
every broker of it is in broker_live_table; topic_queue_table names only such groups, and holds
no topic without a group. So a group whose last broker leaves (unregistered, or silent past the
expiry: ``scan_not_active_broker``) takes its queue data with it, while a dropped master leaves
its slaves, and their group's queues, in place (what a slave read needs).

A master's registration is the truth about its group's topics: it replaces the group's queue
data, and a topic it no longer lists leaves the group's routes. A slave's only fills in topics
its group has none for, which matters when the NameServer restarted after the master was gone.

Times come from ``clock_ms`` (the NameServer's own clock): liveness never compares a broker's
clock with ours.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from namesrv.errors import BrokersFullError

MASTER_ID = 0  # broker id 0 is its group's master


class Permission(enum.IntFlag):
    """RocketMQ's PermName bits, as routes carry them."""

    WRITE = 2
    READ = 4
    READ_WRITE = 6


@dataclass(frozen=True, slots=True)
class QueueData:
    """One group's queues of one topic (a registration carries one per topic it holds)."""

    topic_name: str
    broker_name: str
    queue_nums: int
    perm: Permission
    message_type: str


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """What a broker tells the NameServer each time it registers."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str | None
    role: str
    topics: tuple[QueueData, ...]
    max_phy_offset: int
    data_version: tuple[int, int]  # (timestamp_ms, counter)


@dataclass(frozen=True, slots=True)
class BrokerLiveInfo:
    registration: BrokerRegistration
    last_update_timestamp_ms: int


@dataclass(slots=True)
class BrokerData:
    cluster_name: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """For a slave, its group's live master (None while there is none)."""

    master_addr: str | None
    ha_server_addr: str | None


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]  # by broker name
    broker_datas: tuple[BrokerData, ...]  # copies, by broker name


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RouteInfoManager:
    def __init__(self, brokers_max: int, clock_ms: Callable[[], int] = _now_ms) -> None:
        self._brokers_max = brokers_max
        self._clock_ms = clock_ms
        # The gRPC handlers run on the event loop, scrapes of the metrics on their own thread.
        self._lock = threading.Lock()
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}

    def now_ms(self) -> int:
        return self._clock_ms()

    # -- what brokers tell -------------------------------------------------------------------
    def register_broker(self, reg: BrokerRegistration) -> RegisterBrokerResult:
        with self._lock:
            self._forget_stale(reg)
            known = reg.broker_addr in self.broker_live_table
            if not known and len(self.broker_live_table) >= self._brokers_max:
                raise BrokersFullError(
                    f"the route table holds {self._brokers_max} brokers (brokers_max): "
                    f"{reg.broker_name}/{reg.broker_id} at {reg.broker_addr} is refused"
                )
            group = self.broker_addr_table.get(reg.broker_name)
            if group is None:
                group = self.broker_addr_table[reg.broker_name] = BrokerData(
                    reg.cluster_name, reg.broker_name
                )
            elif group.cluster_name != reg.cluster_name:
                self._leave_cluster(group)
                group.cluster_name = reg.cluster_name
            group.broker_addrs[reg.broker_id] = reg.broker_addr
            self.cluster_addr_table.setdefault(reg.cluster_name, set()).add(reg.broker_name)
            self.broker_live_table[reg.broker_addr] = BrokerLiveInfo(reg, self._clock_ms())
            self._update_queue_datas(reg)
            if reg.broker_id == MASTER_ID:
                return RegisterBrokerResult(None, None)
            master_addr = group.broker_addrs.get(MASTER_ID)
            master = self.broker_live_table.get(master_addr) if master_addr else None
            return RegisterBrokerResult(
                master_addr, master.registration.ha_server_addr if master else None
            )

    def unregister_broker(self, broker_name: str, broker_id: int, broker_addr: str) -> bool:
        """Whether the broker was known (and is now gone)."""
        with self._lock:
            live = self.broker_live_table.get(broker_addr)
            if live is None:
                return False
            if (live.registration.broker_name, live.registration.broker_id) != (
                broker_name,
                broker_id,
            ):
                return False  # the address serves another broker now: not the one leaving
            self._remove(live.registration)
            return True

    def scan_not_active_broker(self, expired_time_ms: int) -> list[BrokerLiveInfo]:
        """Drop every broker whose last registration is older than ``expired_time_ms``; the
        dropped ones."""
        with self._lock:
            now = self._clock_ms()
            expired = [
                live
                for live in self.broker_live_table.values()
                if now - live.last_update_timestamp_ms > expired_time_ms
            ]
            for live in expired:
                self._remove(live.registration)
            return expired

    # -- what clients read -------------------------------------------------------------------
    def topic_route(self, topic: str) -> TopicRouteData | None:
        """The groups holding ``topic`` and their brokers; None when no group does."""
        with self._lock:
            by_group = self.topic_queue_table.get(topic)
            if not by_group:
                return None
            names = sorted(by_group)
            return TopicRouteData(
                tuple(by_group[name] for name in names),
                tuple(
                    replace(
                        self.broker_addr_table[name],
                        broker_addrs=dict(self.broker_addr_table[name].broker_addrs),
                    )
                    for name in names
                ),
            )

    def cluster_info(self) -> list[BrokerLiveInfo]:
        """Every live broker, by cluster, broker name and id."""
        with self._lock:
            lives = list(self.broker_live_table.values())
        return sorted(
            lives,
            key=lambda live: (
                live.registration.cluster_name,
                live.registration.broker_name,
                live.registration.broker_id,
            ),
        )

    def live_broker_count(self) -> int:
        with self._lock:
            return len(self.broker_live_table)

    # -- how (the lock held) -----------------------------------------------------------------
    def _forget_stale(self, reg: BrokerRegistration) -> None:
        """A broker restarted on another address, or an address now serving another broker
        (a restart under another name or id): the old entry goes first, whole."""
        at_addr = self.broker_live_table.get(reg.broker_addr)
        if at_addr is not None and (
            at_addr.registration.broker_name,
            at_addr.registration.broker_id,
        ) != (reg.broker_name, reg.broker_id):
            self._remove(at_addr.registration)
        group = self.broker_addr_table.get(reg.broker_name)
        old_addr = group.broker_addrs.get(reg.broker_id) if group else None
        if old_addr is not None and old_addr != reg.broker_addr:
            old = self.broker_live_table.get(old_addr)
            if old is not None:
                self._remove(old.registration)

    def _update_queue_datas(self, reg: BrokerRegistration) -> None:
        listed = {q.topic_name: q for q in reg.topics}
        if reg.broker_id == MASTER_ID:
            for topic, by_group in list(self.topic_queue_table.items()):
                if reg.broker_name in by_group and topic not in listed:
                    self._drop_queue_data(topic, reg.broker_name)
            for topic, queue_data in listed.items():
                self.topic_queue_table.setdefault(topic, {})[reg.broker_name] = queue_data
            return
        for topic, queue_data in listed.items():
            self.topic_queue_table.setdefault(topic, {}).setdefault(reg.broker_name, queue_data)

    def _drop_queue_data(self, topic: str, broker_name: str) -> None:
        by_group = self.topic_queue_table.get(topic)
        if by_group is None:
            return
        by_group.pop(broker_name, None)
        if not by_group:
            del self.topic_queue_table[topic]

    def _remove(self, reg: BrokerRegistration) -> None:
        self.broker_live_table.pop(reg.broker_addr, None)
        group = self.broker_addr_table.get(reg.broker_name)
        if group is None:
            return
        if group.broker_addrs.get(reg.broker_id) == reg.broker_addr:
            del group.broker_addrs[reg.broker_id]
        if group.broker_addrs:
            return
        del self.broker_addr_table[reg.broker_name]
        self._leave_cluster(group)
        for topic in list(self.topic_queue_table):
            self._drop_queue_data(topic, reg.broker_name)

    def _leave_cluster(self, group: BrokerData) -> None:
        names = self.cluster_addr_table.get(group.cluster_name)
        if names is None:
            return
        names.discard(group.broker_name)
        if not names:
            del self.cluster_addr_table[group.cluster_name]
