"""The broker's typed, frozen configuration (RocketMQ's BrokerConfig and ProxyConfig).

Built once by the CLI and passed down; the store's own settings stay in store/config.py.
"""

from __future__ import annotations

import enum
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

from broker.auth.authenticator import CLOCK_SKEW_S_DEFAULT, CLOCK_SKEW_S_MAX
from broker.errors import BrokerConfigError
from broker.store.config import MessageStoreConfig
from rocketbox_api.credentials import Credentials
from rocketbox_api.message_rules import DELIVERY_AHEAD_MS_MAX

MASTER_ID = 0  # RocketMQ's MixAll.MASTER_ID: broker id 0 is its group's master


class BrokerRole(enum.Enum):
    """RocketMQ's BrokerRole. ASYNC_MASTER answers a put after its own store; SYNC_MASTER only
    once a slave holds it too (HA replication, broker/ha); a SLAVE refuses writes and copies its
    master's commitlog byte for byte."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    store: MessageStoreConfig
    listen_host: str = "127.0.0.1"
    listen_port: int = 8081
    # What routes advertise: clients send every call after QueryRoute there. Defaults to the
    # listen address; never 0.0.0.0 (clients cannot dial it).
    advertised_host: str | None = None
    broker_name: str = "rocketbox-broker"  # the broker group: a master and its slaves share it

    # -- the cluster (RocketMQ's names and defaults) ----------------------------------------------
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = MASTER_ID  # 0: the master; >= 1: a slave
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    # NameServers the broker registers with, each on its own (they do not talk to each other).
    # Empty: a stand-alone broker whose routes name itself alone.
    namesrv_addr: tuple[str, ...] = ()
    # RocketMQ's registerNameServerPeriod: the NameServer drops a broker silent for 120 s.
    register_broker_interval_ms: int = 30_000
    # The master's HA listener, which its slaves connect to (RocketMQ's haListenPort); None: none.
    ha_listen_host: str | None = None
    ha_listen_port: int = 0
    # A slave's master HA address HOST:PORT (RocketMQ's haMasterAddress); None: learned from the
    # NameServer's answer to the slave's registration.
    ha_master_address: str | None = None
    # How often a slave copies its master's topic and group configs and consume progress
    # (RocketMQ's SlaveSynchronize).
    slave_sync_interval_ms: int = 10_000
    # HA replication (RocketMQ's haSendHeartbeatInterval, haHousekeepingInterval,
    # haTransferBatchSize, haMaxGapNotInSync): a slave reports its offset at least this often; a
    # connection silent this long is closed; bytes per transfer frame; and a SYNC_MASTER does not
    # wait for a slave further behind than this (it answers SLAVE_NOT_AVAILABLE at once).
    ha_send_heartbeat_interval_ms: int = 5_000
    ha_housekeeping_interval_ms: int = 20_000
    ha_transfer_batch_bytes: int = 32 * 1024
    ha_max_gap_not_in_sync_bytes: int = 256 * 1024 * 1024
    auto_create_topic_enable: bool = False
    default_topic_queue_nums: int = 8

    # Flow control (RocketMQ's BrokerFastFailure): a send that waited in the send queue longer
    # than this, or that finds the queue full, is answered TOO_MANY_REQUESTS.
    wait_time_ms_in_send_queue: int = 200
    send_queue_capacity_max: int = 10_000
    # Send workers draining the send queue; puts are short, SYNC_FLUSH waits overlap.
    send_workers: int = 64

    # Delayed messages: furthest delivery time accepted, and delayed messages held at once.
    delay_ms_max: int = DELIVERY_AHEAD_MS_MAX
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

    # Authentication and the ACL (broker/auth, docs/security.md). Off: every caller may do
    # everything, the local developer's default.
    auth_enabled: bool = False
    # The key the users' secret keys are encrypted with at rest; None: config/acl.key.
    auth_key_file: Path | None = None
    # How far a request's signed date may be from the broker's clock, either way
    # (broker/auth/authenticator.py says why nothing else is forgiven).
    auth_clock_skew_s: int = CLOCK_SKEW_S_DEFAULT
    # An admin user made (or whose secret is reset) at start, so that a new broker with auth on
    # can be administered: from a file or the environment, never a command-line value.
    auth_admin: Credentials | None = None

    # Prometheus metrics over HTTP (broker/metrics.py); None: not served. Port 0: a free one.
    metrics_host: str | None = None
    metrics_port: int = 0

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.listen_port <= 65535, "listen_port must be in 0..65535"),
            (0 <= self.metrics_port <= 65535, "metrics_port must be in 0..65535"),
            (0 <= self.ha_listen_port <= 65535, "ha_listen_port must be in 0..65535"),
            (self.broker_id >= 0, "broker_id must be >= 0"),
            (
                (self.broker_id == MASTER_ID) == (self.broker_role is not BrokerRole.SLAVE),
                "broker_id 0 is a master's (ASYNC_MASTER or SYNC_MASTER); a SLAVE has id >= 1",
            ),
            (
                self.broker_role is not BrokerRole.SYNC_MASTER or self.ha_listen_host is not None,
                "a SYNC_MASTER needs an HA listener (ha_listen_host) for its slaves",
            ),
            (self.register_broker_interval_ms > 0, "register_broker_interval_ms must be > 0"),
            (self.slave_sync_interval_ms > 0, "slave_sync_interval_ms must be > 0"),
            (
                0 < self.ha_send_heartbeat_interval_ms < self.ha_housekeeping_interval_ms,
                "ha_send_heartbeat_interval_ms must be > 0 and below ha_housekeeping_interval_ms",
            ),
            (
                4096 <= self.ha_transfer_batch_bytes <= 4 * 1024 * 1024,
                "ha_transfer_batch_bytes must be in 4096..4194304",
            ),
            (self.ha_max_gap_not_in_sync_bytes > 0, "ha_max_gap_not_in_sync_bytes must be > 0"),
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
            (
                0 <= self.auth_clock_skew_s <= CLOCK_SKEW_S_MAX,
                f"auth_clock_skew_s must be in 0..{CLOCK_SKEW_S_MAX} (a captured signature "
                "passes for twice the skew)",
            ),
        ]
        for ok, why in checks:
            if not ok:
                raise BrokerConfigError(why)

    @property
    def config_dir(self) -> Path:
        return self.store.store_path_root_dir / "config"

    @property
    def acl_key_file(self) -> Path:
        return self.auth_key_file or self.config_dir / "acl.key"

    @property
    def route_host(self) -> str:
        return self.advertised_host or self.listen_host

    @property
    def is_slave(self) -> bool:
        return self.broker_role is BrokerRole.SLAVE


def store_host_address(host: str) -> str:
    """``host`` as the IP address a record's store host holds: itself when it is one, else what
    the name resolves to (BrokerConfigError naming it when it does not)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0])
    except OSError as e:
        raise BrokerConfigError(f"advertised host {host!r} does not resolve: {e}") from e
