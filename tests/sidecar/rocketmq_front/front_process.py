"""A real broker and a real sidecar serving the RocketMQ front, and the official Python client's
producer and consumers pointed at an endpoint, for the front's tests.

The sidecar is started with ``--rocketmq-listen 127.0.0.1:0`` and ``--metrics-listen
127.0.0.1:0``; the ports they bound are the ones their banner lines name (``sidecar RocketMQ
front on HOST:PORT``: sidecar_process.py reads it; ``sidecar metrics on HOST:PORT``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    SimpleConsumer,
)

from tests.broker.broker_process import BrokerProcess
from tests.rocketbox_process import wait_until
from tests.sidecar.sidecar_process import BROKER_ARGS, SidecarProcess

METRICS_LINE = re.compile(r"^sidecar metrics on [^\s]+:(\d+)")
DEADLINE_S = 30.0
INVISIBLE_S = 2
# Short invisible times and polls, and transactions checked back within a second.
BROKER_FRONT_ARGS = (
    *BROKER_ARGS,
    "--invisible-duration-min-ms=1000",
    "--long-polling-timeout-ms=2000",
    "--transaction-timeout-ms=500",
    "--transaction-check-interval-ms=300",
)


class FrontSidecar(SidecarProcess):
    """A sidecar serving the RocketMQ front and metrics, each on a free port."""

    def __init__(self, broker_endpoint: str, outbox_url: str, *args: str) -> None:
        super().__init__(
            broker_endpoint, outbox_url, "--rocketmq-listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0", *args,
        )  # fmt: skip
        self.metrics_port = self._banner_port(METRICS_LINE, "the metrics")

    def _banner_port(self, line: re.Pattern[str], what: str) -> int:
        found: list[int] = []

        def printed() -> bool:
            found.extend(int(m.group(1)) for m in map(line.search, self.lines) if m)
            return bool(found)

        wait_until(printed, DEADLINE_S, f"the sidecar's banner line of {what}")
        return found[0]

    @property
    def front_endpoint(self) -> str:
        return self.rocketmq_endpoint


@contextmanager
def broker_and_front(
    data_dir: Path, *broker_args: str
) -> Iterator[tuple[BrokerProcess, FrontSidecar]]:
    broker = BrokerProcess(data_dir / "broker", *BROKER_FRONT_ARGS, *broker_args)
    try:
        sidecar = FrontSidecar(broker.endpoint, f"rocksdb://{data_dir / 'outbox'}")
        try:
            yield broker, sidecar
        finally:
            sidecar.stop()
    finally:
        broker.stop()


def config(endpoint: str, namespace: str = "") -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(), namespace)


@contextmanager
def simple_consumer(
    endpoint: str, group: str, topic: str, await_s: int = 1, namespace: str = ""
) -> Iterator[SimpleConsumer]:
    c = SimpleConsumer(
        config(endpoint, namespace), group, {topic: FilterExpression("*")}, await_duration=await_s
    )
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()


def message(topic: str, body: bytes, group: str | None = None) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    if group is not None:
        m.message_group = group
    return m
