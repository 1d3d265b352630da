"""Both Prometheus endpoints count what happened. Traffic goes through a real sidecar to a real
broker (stored, then refused by forced flow control, then consumed in part by the official
client), and each counter on each endpoint moves by exactly its share: the broker's puts, put
latency, fsyncs, flow-control rejections and consumer lag; the sidecar's answers by state and
cause.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from rocketbox_api.v1 import sidecar_pb2 as api
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import metrics_port, sample, scrape
from tests.sidecar.sidecar_process import (
    BROKER_ARGS,
    SidecarProcess,
    message,
    outcome,
    send,
    set_flow_control,
    wait_stored,
)

pytestmark = pytest.mark.slow

BROKER_METRICS_LINE = re.compile(r"^metrics on http://[^\s]+:(\d+)/metrics", re.MULTILINE)
SIDECAR_METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")
DEADLINE_S = 30.0
STORED_N = 5
THROTTLED_N = 2
ACKED_N = 3
# Longer than the test: the messages received and not acked stay in flight throughout.
INVISIBLE_S = 120


def receive_all(endpoint: str, group: str, n: int) -> list[object]:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()), group, {"Orders": FilterExpression("*")}
    )
    consumer.startup()
    received: dict[str, object] = {}
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < n and time.monotonic() < deadline:
            for m in consumer.receive(16, INVISIBLE_S):
                received[m.message_id] = m
        assert len(received) == n, f"received {len(received)} of {n}"
        for m in list(received.values())[:ACKED_N]:
            consumer.ack(m)
    finally:
        consumer.shutdown()
    return list(received.values())


def test_both_endpoints_count_the_traffic(tmp_path: Path) -> None:
    # SYNC_FLUSH: every put waits for an fsync, so the flush histogram must have moved.
    broker = BrokerProcess(
        tmp_path / "broker", *BROKER_ARGS, "--flush=SYNC_FLUSH", "--metrics-listen=127.0.0.1:0"
    )
    sidecar: SidecarProcess | None = None
    try:
        broker_port = metrics_port(broker.output(), BROKER_METRICS_LINE)
        before = scrape(broker_port)
        for reason in ("forced", "send_queue_full", "send_queue_wait", "timer_full"):
            name = "rocketbox_broker_flow_control_rejections_total"
            assert sample(before, name, reason=reason) == 0, "every reason is exported from 0"
        assert sample(before, "rocketbox_broker_put_seconds_count") == 0
        sidecar = SidecarProcess(
            broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", "--metrics-listen=127.0.0.1:0",
            # The throttled messages stay spooled while the test looks.
            "--backoff-initial-ms=600000", "--backoff-max-ms=600000",
        )  # fmt: skip
        sidecar_port = metrics_port(sidecar.output(), SIDECAR_METRICS_LINE)
        with sidecar.client() as stub:
            stored = [send(stub, message("Orders", f"order {i}".encode())) for i in range(STORED_N)]
            assert {outcome(r) for r in stored} == {"stored"}
            set_flow_control(broker.endpoint, True)
            throttled = [send(stub, message("Orders")) for _ in range(THROTTLED_N)]
            set_flow_control(broker.endpoint, False)
        cause = api.SPOOL_CAUSE_THROTTLED
        assert [(outcome(r), r.spooled.cause) for r in throttled] == [("spooled", cause)] * 2
        for r in stored:
            wait_stored(broker.endpoint, r.message_id)

        b = scrape(broker_port)
        puts = sample(b, "rocketbox_broker_put_messages_total", topic="Orders", status="PUT_OK")
        assert puts == STORED_N
        # One SendMessage per Send: the sidecar's producer sends them one by one.
        assert sample(b, "rocketbox_broker_put_seconds_count") == STORED_N
        name = "rocketbox_broker_flow_control_rejections_total"
        # A THROTTLED answer is never retried at once: one refusal per throttled message.
        assert sample(b, name, reason="forced") == THROTTLED_N
        assert sample(b, name, reason="send_queue_full") == 0
        assert sample(b, "rocketbox_broker_flush_seconds_count") >= 1
        assert sample(b, "rocketbox_broker_commitlog_flushed_phy_offset") == sample(
            b, "rocketbox_broker_commitlog_max_phy_offset"
        ), "SYNC_FLUSH: everything appended is on disk"

        s = scrape(sidecar_port)
        assert sample(s, "rocketbox_sidecar_sends_total", state="STORED", cause="") == STORED_N
        assert sample(s, "rocketbox_sidecar_sends_total", state="SPOOLED", cause="THROTTLED") == (
            THROTTLED_N
        )
        assert sample(s, "rocketbox_outbox_put_seconds_count") == THROTTLED_N

        receive_all(broker.endpoint, "MetricsReaders", STORED_N)
        lag = ("rocketbox_broker_consumer_lag", "MetricsReaders")

        def lag_settled() -> bool:
            b = scrape(broker_port)
            return (
                sample(b, lag[0], group=lag[1], topic="Orders") == STORED_N - ACKED_N
                and sample(b, "rocketbox_broker_consumer_inflight", group=lag[1], topic="Orders")
                == STORED_N - ACKED_N
            )

        wait_until(lag_settled, DEADLINE_S, "lag and in-flight of the two unacked messages")
    finally:
        if sidecar is not None:
            sidecar.stop()
        broker.stop()
