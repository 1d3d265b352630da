"""The sidecar bench's targets (one run, quiet machine, 1 KiB) and fixed settings."""

from __future__ import annotations

from typing import TypeVar

BACKENDS = ("rocksdb", "redis", "mysql")
# The targets (one run, quiet machine, 1 KiB).
UNARY_VS_DIRECT_MIN = 1.5
SIDECAR_US_MAX = {"Send": 300.0, "SendStream": 150.0, "SendBatch": 70.0}  # sidecar CPU/message
STREAM_RATE_MIN = 6_000
LIBRARY_RATE_MIN = 10_000
# Added latency (ms) at each paced rate, by percentile.
ADDED_LATENCY_MAX_MS = {300.0: {99: 1.0}, 1_000.0: {50: 1.5, 99: 2.0}}
DAPR_ADDED_P99_MS = 1.72
SPOOL_BATCHED_MIN = {"rocksdb": 10_000, "redis": 8_000, "mysql": 5_000}  # SendBatch, library
SPOOL_STREAM_MIN = 4_000
SPOOL_UNARY_VS_STORED_MIN = 0.9
# SendStream spooling with the broker down and the resend pool running as in production, against
# (a)'s SendStream storing with it up.
SPOOL_STREAM_VS_STORED_MIN = 0.8
THROTTLED_STREAM_MIN = 4_000
DRAIN_MIN = {"rocksdb": 9_000, "redis": 7_000, "mysql": 5_000}
OVERLOAD_FACTOR = 2.0
OVERLOAD_P99_MAX_MS = 50.0
# Below this share of the rate it was to offer, the bench's own CPU limited the overload row.
OVERLOAD_OFFERED_MIN = 0.9
# The overload sidecar's admission limits, an operator's choice for OVERLOAD_P99_MAX_MS: the
# calls inside and waiting in gRPC (64 + 32) drain within it at a small machine's unary rate. The
# sidecar's defaults (2,048 / 256) favour bursts and big batches over that bound.
OVERLOAD_INTAKE_IN_FLIGHT_MAX = 64
OVERLOAD_PENDING_CALLS_MAX = 32
RSS_MAX_MB = 200.0
BATCH = 32  # messages per SendBatch (and per raw SendMessage in (c)'s reference)
BATCH_WINDOW = 8  # SendBatch calls (raw SendMessage requests) in flight
SPOOL_SENDERS = 64
RAW_THREADS = 64
RAW_BATCH = 100
LATENCY_ROUNDS = 5
# (b)'s throttled rows keep the resend pool from competing with intake: its first resend is an
# hour away. Its broker-down rows run the pool as in production: an outage is probed, not resent.
NO_RESEND_ARGS = ("--backoff-initial-ms=3600000", "--backoff-max-ms=3600000")
DRAIN_POLL_MS = 50
# (e) the RocketMQ front: the official client through it vs straight to the broker.
FRONT_VS_DIRECT_MIN = 0.9
FRONT_RATE = 300.0  # msgs/s, paced
FRONT_ADDED_P99_MAX_MS = 2.0
FRONT_ROUNDS = 2  # throughput rounds per side, alternating
CONSUME_BATCH = 16  # messages per SimpleConsumer receive
T = TypeVar("T")
# Which rows need what may not have landed yet, by part.
FEATURES_BY_PART = {
    "a": ("--no-coalesce", "--intake-in-flight-max", "--pending-calls-max", "rocketbox_client"),
    "b": ("rocketbox_client",),
    "c": (),
    "d": ("--intake-in-flight-max", "--pending-calls-max", "rocketbox_client"),
    "e": ("--rocketmq-listen",),
}
