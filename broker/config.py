"""The broker's typed, frozen configuration (RocketMQ's BrokerConfig and ProxyConfig).

Built once by the CLI and passed down; the store's own settings stay in store/config.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker.errors import BrokerConfigError
from broker.store.config import MessageStoreConfig

HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    store: MessageStoreConfig
    listen_host: str = "127.0.0.1"
    listen_port: int = 8081
    # What routes advertise: clients send every call after QueryRoute there. Defaults to the
    # listen address; never 0.0.0.0 (clients cannot dial it).
    advertised_host: str | None = None
    broker_name: str = "rocketbox-broker"
    auto_create_topic_enable: bool = False
    default_topic_queue_nums: int = 8

    # Flow control (RocketMQ's BrokerFastFailure): a send that waited in the send queue longer
    # than this, or that finds the queue full, is answered TOO_MANY_REQUESTS.
    wait_time_ms_in_send_queue: int = 200
    send_queue_capacity_max: int = 10_000
    # Send workers draining the send queue; puts are short, SYNC_FLUSH waits overlap.
    send_workers: int = 64

    # Delayed messages: furthest delivery time accepted, and delayed messages held at once.
    delay_ms_max: int = 24 * HOUR_MS
    timer_pending_max: int = 1_000_000

    # Transactions: a half message unresolved this long is checked back with a producer, every
    # interval, at most this many times; then it is rolled back.
    transaction_timeout_ms: int = 6_000
    transaction_check_interval_ms: int = 30_000
    transaction_check_max: int = 15

    # Shortest invisible duration a receive may ask for (the proxy's 10 s; tests go lower).
    invisible_duration_ms_min: int = 10_000
    # Long-polling time of a receive that names none, and the one push consumers are given.
    long_polling_timeout_ms: int = 20_000

    # Telemetry commands queued for one client before the oldest are dropped.
    telemetry_outbound_max: int = 1_024
    # gRPC inbound message limit: a 4 MiB body plus its envelope must fit.
    grpc_receive_message_bytes_max: int = 16 * 1024 * 1024

    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None

    # Prometheus metrics over HTTP (broker/metrics.py); None: not served. Port 0: a free one.
    metrics_host: str | None = None
    metrics_port: int = 0

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.listen_port <= 65535, "listen_port must be in 0..65535"),
            (0 <= self.metrics_port <= 65535, "metrics_port must be in 0..65535"),
            (self.advertised_host != "0.0.0.0", "advertised_host 0.0.0.0 cannot be dialled"),  # noqa: S104 - a comparison with the wildcard address, not a bind
            (1 <= self.default_topic_queue_nums <= 1024, "default_topic_queue_nums: 1..1024"),
            (self.wait_time_ms_in_send_queue > 0, "wait_time_ms_in_send_queue must be > 0"),
            (self.send_queue_capacity_max > 0, "send_queue_capacity_max must be > 0"),
            (self.send_workers > 0, "send_workers must be > 0"),
            (self.delay_ms_max > 0, "delay_ms_max must be > 0"),
            (self.timer_pending_max > 0, "timer_pending_max must be > 0"),
            (self.transaction_check_interval_ms > 0, "transaction_check_interval_ms must be > 0"),
            (self.transaction_check_max > 0, "transaction_check_max must be > 0"),
            (self.invisible_duration_ms_min > 0, "invisible_duration_ms_min must be > 0"),
            (
                1_000 <= self.long_polling_timeout_ms <= 20_000,
                "long_polling_timeout_ms must be in 1000..20000",
            ),
            (
                (self.tls_cert_file is None) == (self.tls_key_file is None),
                "tls_cert_file and tls_key_file go together",
            ),
        ]
        for ok, why in checks:
            if not ok:
                raise BrokerConfigError(why)

    @property
    def config_dir(self) -> Path:
        return self.store.store_path_root_dir / "config"

    @property
    def route_host(self) -> str:
        return self.advertised_host or self.listen_host
