"""The Settings a proxy answers on the Telemetry stream: the client's own, with the proxy's values.

A producer gets the proxy's send back-off (3 attempts, exponential from 10 ms to 1 s, times 2),
``publishing.max_body_size`` (4 MiB) and ``validate_message_type``; a consumer its group's
values (``receive_batch_size`` 32, ``long_polling_timeout`` the proxy's longest poll, ``fifo``
when the group consumes orderly, ``retryMaxTimes + 1`` attempts and the group's customized
back-off). Metrics stay off: ``metric.on`` would send the clients' OTLP exporters to us.
"""

from __future__ import annotations

from google.protobuf import duration_pb2
from rocketmq.grpc_protocol import definition_pb2

from tests.rocketmq_proxy.config import BODY_BYTES_MAX, RECEIVE_BATCH_MAX, RETRY_MAX_TIMES

PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1_000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
# SubscriptionGroupConfig's default CustomizedRetryPolicy: the delay before each redelivery.
CONSUMER_BACKOFF_S = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)


def _duration_ms(ms: int) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromMilliseconds(ms)
    return d


def producer_settings(client: definition_pb2.Settings) -> definition_pb2.Settings:
    merged = definition_pb2.Settings()
    merged.CopyFrom(client)
    policy = merged.backoff_policy
    policy.max_attempts = PRODUCER_MAX_ATTEMPTS
    policy.exponential_backoff.initial.CopyFrom(_duration_ms(PRODUCER_BACKOFF_INITIAL_MS))
    policy.exponential_backoff.max.CopyFrom(_duration_ms(PRODUCER_BACKOFF_MAX_MS))
    policy.exponential_backoff.multiplier = PRODUCER_BACKOFF_MULTIPLIER
    merged.publishing.validate_message_type = True
    merged.publishing.max_body_size = BODY_BYTES_MAX
    merged.metric.on = False
    return merged


def consumer_settings(
    client: definition_pb2.Settings, orderly: bool, long_polling_max_ms: int
) -> definition_pb2.Settings:
    merged = definition_pb2.Settings()
    merged.CopyFrom(client)
    subscription = merged.subscription
    subscription.receive_batch_size = RECEIVE_BATCH_MAX
    subscription.long_polling_timeout.CopyFrom(_duration_ms(long_polling_max_ms))
    subscription.fifo = orderly
    policy = merged.backoff_policy
    policy.max_attempts = RETRY_MAX_TIMES + 1
    policy.customized_backoff.next.extend(_duration_ms(s * 1000) for s in CONSUMER_BACKOFF_S)
    merged.metric.on = False
    return merged
