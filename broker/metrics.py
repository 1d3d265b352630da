"""The broker's Prometheus metrics, served on ``metrics_listen`` (off by default).

Counted and timed on the send path:
- ``rocketbox_broker_put_messages_total{topic, status}``: messages of client sends by
  PutMessageStatus (PUT_OK, FLUSH_DISK_TIMEOUT, ...).
- ``rocketbox_broker_put_seconds``: a send request's store put (the append, and under SYNC_FLUSH
  the wait for its fsync).
- ``rocketbox_broker_flow_control_rejections_total{reason}``: sends refused with
  TOO_MANY_REQUESTS (forced, send_queue_full, send_queue_wait, timer_full).
- ``rocketbox_broker_flush_seconds``: one commitlog fsync (by whichever flush service runs).
- ``rocketbox_broker_access_refusals_total{method, code}``: calls refused by the access layer
  (broker/grpc_service/access.py): UNAUTHORIZED, FORBIDDEN, or BAD_REQUEST for a bad namespace.
  Never labelled by user: an access key is not secret, but labels are not the place for names
  clients choose.

Read when scraped, so nothing is kept twice:
- ``rocketbox_broker_consumer_lag{group, topic}``: messages stored and not yet consumed, summed
  over the topic's queues; ``rocketbox_broker_consumer_inflight{group, topic}``: received and not
  yet acknowledged.
- ``rocketbox_broker_long_polls_waiting{topic, group}``: receives (and, with ``group=""``, pulls)
  waiting in a long poll for a message to arrive.
- ``rocketbox_broker_send_queue_depth``, ``rocketbox_broker_commitlog_max_phy_offset`` and
  ``rocketbox_broker_commitlog_flushed_phy_offset`` (bytes; their difference is what a crash of
  the machine could lose under ASYNC_FLUSH).
- HA replication (broker/ha): ``rocketbox_broker_ha_connections`` (a master: slaves connected; a
  slave: 1 while connected to its master), ``rocketbox_broker_ha_slave_ack_offset{slave}`` (a
  master: each slave's last acknowledged phy_offset), and
  ``rocketbox_broker_ha_replication_lag_bytes{peer}`` (a master: how far each slave is behind
  it; a slave: how far it is behind the master's end it heard of, peer = its master).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from broker.consumer_progress import QueueProgress
from broker.flow_control import FlowControlReason
from broker.ha.replication import HAState
from broker.store.status import PutMessageResult

# Seconds: from an append alone, well under a millisecond, to a SYNC_FLUSH put that waits for its
# fsync.
PUT_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1)
FLUSH_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class BrokerState(Protocol):
    """What the scrape-time gauges read (the BrokerController)."""

    def consumer_progress(self) -> Iterable[tuple[str, str, Sequence[QueueProgress]]]:
        """(group, topic, its queues' progress) for every group and topic it consumed."""
        ...

    def send_queue_depth(self) -> int: ...

    def long_polls_waiting(self) -> Iterable[tuple[str, str, int]]:
        """(topic, group or "" for pulls, receives waiting for an arrival)."""
        ...

    def commitlog_offsets(self) -> tuple[int, int]:
        """(max phy_offset, flushed phy_offset)."""
        ...

    def ha_state(self) -> HAState: ...


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.put_messages = Counter(
            "rocketbox_broker_put_messages", "Messages of client sends, by put status.",
            ["topic", "status"], registry=r,
        )  # fmt: skip
        self._put_messages_children: dict[tuple[str, str], Counter] = {}
        self.put_seconds = Histogram(
            "rocketbox_broker_put_seconds", "A send request's store put.",
            buckets=PUT_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.flow_control_rejections = Counter(
            "rocketbox_broker_flow_control_rejections",
            "Sends refused with TOO_MANY_REQUESTS, by reason.", ["reason"], registry=r,
        )  # fmt: skip
        for reason in FlowControlReason:
            # Present at 0 from the start, so rate() and alerts see the series before the first.
            self.flow_control_rejections.labels(reason.value)
        self.flush_seconds = Histogram(
            "rocketbox_broker_flush_seconds", "One commitlog fsync.",
            buckets=FLUSH_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.access_refusals = Counter(
            "rocketbox_broker_access_refusals",
            "Calls refused by authentication, the ACL or a bad namespace, by method and code.",
            ["method", "code"], registry=r,
        )  # fmt: skip

    def observe_put(self, topic: str, results: Sequence[PutMessageResult], seconds: float) -> None:
        self.put_seconds.observe(seconds)
        # One labelled increment per distinct status, not per message: on the send path, a
        # batch's messages almost always share one.
        if len(results) == 1:
            self._put_messages_child(topic, results[0].status.name).inc()
            return
        for status, n in collections.Counter(r.status.name for r in results).items():
            self._put_messages_child(topic, status).inc(n)

    def _put_messages_child(self, topic: str, status: str) -> Counter:
        # labels() builds a key and takes a lock each call; a dict lookup is the hot path's
        # price. Bounded as the metric's own children are: by topics and statuses.
        key = (topic, status)
        child = self._put_messages_children.get(key)
        if child is None:
            child = self._put_messages_children[key] = self.put_messages.labels(topic, status)
        return child

    def observe_flow_control(self, reason: FlowControlReason) -> None:
        self.flow_control_rejections.labels(reason.value).inc()

    def observe_flush(self, seconds: float) -> None:
        self.flush_seconds.observe(seconds)

    def watch(self, state: BrokerState) -> None:
        """Serve the scrape-time gauges from ``state`` (once the broker is started)."""
        self.registry.register(_StateCollector(state))


class _StateCollector(Collector):
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def collect(self) -> Iterable[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "rocketbox_broker_consumer_lag",
            "Messages stored and not yet consumed by the group, over the topic's queues.",
            labels=["group", "topic"],
        )
        inflight = GaugeMetricFamily(
            "rocketbox_broker_consumer_inflight",
            "Messages received by the group and not yet acknowledged.",
            labels=["group", "topic"],
        )
        for group, topic, queues in self._state.consumer_progress():
            lag.add_metric([group, topic], sum(q.lag for q in queues))
            inflight.add_metric([group, topic], sum(q.inflight_count for q in queues))
        yield lag
        yield inflight
        waiting = GaugeMetricFamily(
            "rocketbox_broker_long_polls_waiting",
            'Receives waiting in a long poll for a message (group "": pulls).',
            labels=["topic", "group"],
        )
        for topic, group, n in self._state.long_polls_waiting():
            waiting.add_metric([topic, group], n)
        yield waiting
        yield GaugeMetricFamily(
            "rocketbox_broker_send_queue_depth", "Sends waiting for a send worker.",
            value=self._state.send_queue_depth(),
        )  # fmt: skip
        max_offset, flushed_offset = self._state.commitlog_offsets()
        yield GaugeMetricFamily(
            "rocketbox_broker_commitlog_max_phy_offset", "Bytes appended to the commitlog.",
            value=max_offset,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "rocketbox_broker_commitlog_flushed_phy_offset", "Bytes of the commitlog fsynced.",
            value=flushed_offset,
        )  # fmt: skip
        yield from _ha_gauges(self._state.ha_state())


def _ha_gauges(ha: HAState) -> Iterable[GaugeMetricFamily]:
    connections = len(ha.slaves) if ha.master_ha_address is None else int(ha.master_connected)
    yield GaugeMetricFamily(
        "rocketbox_broker_ha_connections",
        "HA connections: a master's slaves, or a slave's one to its master.", value=connections,
    )  # fmt: skip
    ack = GaugeMetricFamily(
        "rocketbox_broker_ha_slave_ack_offset",
        "The phy_offset each slave last acknowledged (a master).", labels=["slave"],
    )  # fmt: skip
    lag = GaugeMetricFamily(
        "rocketbox_broker_ha_replication_lag_bytes",
        "Bytes a slave is behind its master (a master: per slave; a slave: peer = its master).",
        labels=["peer"],
    )  # fmt: skip
    for slave in ha.slaves:
        ack.add_metric([slave.address], slave.ack_offset)
        lag.add_metric([slave.address], slave.lag_bytes)
    if ha.master_ha_address is not None:
        lag.add_metric([ha.master_ha_address], ha.behind_master_bytes)
    yield ack
    yield lag
