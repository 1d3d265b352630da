"""NamesrvConfig: the NameServer's settings (RocketMQ's NamesrvConfig and NettyServerConfig names
and defaults), built once by the CLI and passed down frozen."""

from __future__ import annotations

from dataclasses import dataclass

from namesrv.errors import NamesrvConfigError

# RocketMQ's NameServer port.
NAMESRV_PORT_DEFAULT = 9876
# How often the NameServer looks for brokers gone silent (RocketMQ's
# scanNotActiveBrokerInterval).
SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS_DEFAULT = 10_000
# A broker silent this long is dropped (RocketMQ's BROKER_CHANNEL_EXPIRED_TIME): four of its
# default 30 s registration periods.
BROKER_CHANNEL_EXPIRED_TIME_MS_DEFAULT = 120_000
# Brokers the route table holds at most: a registration of one more is refused.
BROKERS_MAX_DEFAULT = 4096
# A registration carries every topic of the broker: 65,536 topics of ~150 bytes each.
GRPC_RECEIVE_MESSAGE_BYTES_MAX = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = NAMESRV_PORT_DEFAULT
    metrics_host: str | None = None  # None: no metrics endpoint
    metrics_port: int = 0
    scan_not_active_broker_interval_ms: int = SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS_DEFAULT
    broker_channel_expired_time_ms: int = BROKER_CHANNEL_EXPIRED_TIME_MS_DEFAULT
    brokers_max: int = BROKERS_MAX_DEFAULT

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.listen_port <= 65535, "listen_port must be in 0..65535"),
            (0 <= self.metrics_port <= 65535, "metrics_port must be in 0..65535"),
            (
                self.scan_not_active_broker_interval_ms > 0,
                "scan_not_active_broker_interval_ms must be > 0",
            ),
            (self.broker_channel_expired_time_ms > 0, "broker_channel_expired_time_ms must be > 0"),
            (self.brokers_max > 0, "brokers_max must be > 0"),
        ]
        for ok, why in checks:
            if not ok:
                raise NamesrvConfigError(why)
