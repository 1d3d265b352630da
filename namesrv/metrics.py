"""The NameServer's Prometheus metrics: registrations by cluster and broker, the live brokers
(read from the route table at scrape time), and the brokers dropped for silence."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from namesrv.route_info import RouteInfoManager


class _LiveBrokers(Collector):
    def __init__(self, routes: RouteInfoManager) -> None:
        self._routes = routes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "rocketbox_namesrv_live_brokers",
            "Brokers whose last registration is within the expiry.",
            value=self._routes.live_broker_count(),
        )


class NamesrvMetrics:
    def __init__(self, routes: RouteInfoManager) -> None:
        self.registry = CollectorRegistry()
        self.registrations = Counter(
            "rocketbox_namesrv_registrations",
            "Broker registrations accepted.",
            ["cluster", "broker"],
            registry=self.registry,
        )
        self.evicted = Counter(
            "rocketbox_namesrv_brokers_evicted",
            "Brokers dropped because they were silent past broker_channel_expired_time_ms.",
            registry=self.registry,
        )
        self.registry.register(_LiveBrokers(routes))
