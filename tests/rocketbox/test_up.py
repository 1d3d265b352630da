"""`rocketbox up` is the whole embedded default in one process: the broker, the sidecar and a
RocksDB outbox under one data directory. An app sends through the sidecar, the official client
consumes from the broker, SIGINT stops everything with exit 0, and a restart over the same
directory still has every message. Its one metrics endpoint serves the broker's and the
sidecar's series. Its RocketMQ front takes the official Producer's sends, unmodified, with only
its endpoint changed.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from rocketbox_api.v1 import sidecar_pb2_grpc
from tests.broker.broker_process import SMALL_STORE_ARGS
from tests.prometheus import metrics_port, sample, scrape
from tests.rocketbox_process import RocketboxProcess, wait_until
from tests.sidecar.sidecar_process import message, outcome, send, wait_stored

pytestmark = pytest.mark.slow

SIDECAR_LINE = re.compile(r"^sidecar listening on [^\s]+:(\d+)")
BROKER_LINE = re.compile(r"broker listening on [^\s]+:(\d+)")
FRONT_LINE = re.compile(r"^sidecar RocketMQ front on [^\s]+:(\d+) ", re.MULTILINE)
METRICS_LINE = re.compile(r"^metrics on http://[^\s]+:(\d+)/metrics", re.MULTILINE)
RECEIVE_DEADLINE_S = 30.0


class Up(RocketboxProcess):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(
            "rocketbox up",
            SIDECAR_LINE,
            ["up", "--data-dir", str(data_dir), "--broker-listen", "127.0.0.1:0",
             "--sidecar-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--rocketmq-listen", "127.0.0.1:0", *SMALL_STORE_ARGS],
        )  # fmt: skip
        # The broker's line follows the sidecar's.
        self.wait_for(BROKER_LINE)
        [broker_port] = BROKER_LINE.findall(self.output())
        self.broker_endpoint = f"127.0.0.1:{broker_port}"
        self.metrics_port = metrics_port(self.output(), METRICS_LINE)
        [front_port] = FRONT_LINE.findall(self.output())
        self.front_endpoint = f"127.0.0.1:{front_port}"

    def wait_for(self, line: re.Pattern[str]) -> None:
        wait_until(lambda: line.search(self.output()), 30.0, f"{line.pattern} from up")

    def interrupt(self) -> int:
        self.signal(signal.SIGINT)
        return self.wait_exit(60)  # its output read to the end and its pipe closed


def send_through_the_front(endpoint: str) -> str:
    """One message from the official Producer pointed at ``endpoint``; its message id."""
    producer = Producer(ClientConfiguration(endpoint, Credentials()), ("Orders",))
    producer.startup()
    try:
        msg = Message()
        msg.topic = "Orders"
        msg.body = b"order through the RocketMQ front"
        message_id: str = producer.send(msg).message_id
    finally:
        producer.shutdown()
    return message_id


def test_up_sends_through_the_sidecar_and_keeps_everything_across_a_restart(
    tmp_path: Path,
) -> None:
    up = Up(tmp_path)
    try:
        with grpc.insecure_channel(up.endpoint) as channel:
            stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
            results = [send(stub, message("Orders", f"order {i}".encode())) for i in range(10)]
        assert {outcome(r) for r in results} == {"stored"}
        # One process, one scrape target: the broker's and the sidecar's series side by side.
        samples = scrape(up.metrics_port)
        stored = sample(samples, "rocketbox_sidecar_sends_total", state="STORED", cause="")
        puts = sample(
            samples, "rocketbox_broker_put_messages_total", topic="Orders", status="PUT_OK"
        )
        assert (stored, puts) == (10, 10)
        ids = [r.message_id for r in results] + [send_through_the_front(up.front_endpoint)]
        consumer = SimpleConsumer(
            ClientConfiguration(up.broker_endpoint, Credentials()),
            "UpReaders",
            {"Orders": FilterExpression("*")},
        )
        consumer.startup()
        try:
            received: dict[str, bytes] = {}
            deadline = time.monotonic() + RECEIVE_DEADLINE_S
            while len(received) < len(ids) and time.monotonic() < deadline:
                for m in consumer.receive(16, 15):
                    received[m.message_id] = m.body
                    consumer.ack(m)
        finally:
            consumer.shutdown()
        assert sorted(received) == sorted(ids)
        assert up.interrupt() == 0, up.output()
        assert "rocketbox stopped cleanly" in up.output()
    finally:
        up.kill()
    again = Up(tmp_path)
    try:
        for message_id in ids:
            assert len(wait_stored(again.broker_endpoint, message_id)) == 1
        assert (tmp_path / "outbox").is_dir(), "the RocksDB outbox lives under the data directory"
    finally:
        again.stop()
