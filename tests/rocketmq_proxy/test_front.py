"""The sidecar's RocketMQ front in front of a stand-in proxy, with the unmodified official Python
client. Proves:

- the official producer's NORMAL and FIFO sends to the front reach the proxy through the
  sidecar's intake, once each, under the producer's own message ids; each ``send`` returns the
  offset the proxy answered; a message group's messages share one queue of the proxy's choice;
- with the proxy SIGKILLed the producer's ``send`` still returns OK (offset -1: spooled), and
  once the proxy is back on its port each message is stored exactly once;
- a SimpleConsumer pointed at the front consumes what the proxy holds (its calls forwarded).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rocketmq import Message

from tests.rocketmq_proxy.sidecar_support import (
    delivered_resends,
    proxy_and_sidecar,
    wait_metric,
    wait_stored_once,
)
from tests.rocketmq_proxy.wire import consume, producer, simple_consumer

pytestmark = pytest.mark.slow

TOPIC = "Orders"
FIFO_TOPIC = "Fifo"
TOPICS = [TOPIC, f"{FIFO_TOPIC}:FIFO"]


def message(topic: str, body: bytes, group: str | None = None) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    if group is not None:
        m.message_group = group
    return m


def test_official_sends_through_the_front_are_stored_once_with_the_proxys_offsets(
    tmp_path: Path,
) -> None:
    with proxy_and_sidecar(tmp_path, TOPICS) as (proxy, sidecar):
        with producer(sidecar.front_endpoint, (TOPIC, FIFO_TOPIC)) as p:
            normal = [p.send(message(TOPIC, f"n{n}".encode())) for n in range(4)]
            fifo = [p.send(message(FIFO_TOPIC, f"f{n}".encode(), "order-7")) for n in range(4)]
        wait_stored_once(proxy, TOPIC, [r.message_id for r in normal])
        wait_stored_once(proxy, FIFO_TOPIC, [r.message_id for r in fifo])
        held = {m.message_id: m for m in proxy.stored()}
    for receipt in normal + fifo:
        assert receipt.offset == held[receipt.message_id].queue_offset
    places = {(held[r.message_id].broker_name, held[r.message_id].queue_id) for r in fifo}
    assert len(places) == 1
    assert [held[r.message_id].body for r in fifo] == [b"f0", b"f1", b"f2", b"f3"]


def test_official_sends_while_the_proxy_is_killed_are_ok_and_stored_once_after(
    tmp_path: Path,
) -> None:
    with proxy_and_sidecar(tmp_path, TOPICS) as (proxy, sidecar):
        with producer(sidecar.front_endpoint, (TOPIC,)) as p:
            up = p.send(message(TOPIC, b"up"))
            proxy.kill()
            down = [p.send(message(TOPIC, f"down {n}".encode())) for n in range(3)]
            assert [r.offset for r in down] == [-1, -1, -1]
            proxy.start()
            wait_metric(sidecar, delivered_resends, len(down), "the spooled sends delivered")
        wait_stored_once(proxy, TOPIC, [up.message_id, *(r.message_id for r in down)])


def test_a_simple_consumer_at_the_front_consumes_from_the_proxy(tmp_path: Path) -> None:
    with proxy_and_sidecar(tmp_path, TOPICS) as (proxy, sidecar):
        with producer(proxy.endpoint, (TOPIC,)) as p:
            sent = [p.send(message(TOPIC, f"c{n}".encode())).message_id for n in range(3)]
        with simple_consumer(sidecar.front_endpoint, "front-group", TOPIC) as c:
            got = consume(c, len(sent))
        acked = proxy.acked("front-group")
    assert sorted(m.message_id for m in got) == sorted(sent)
    assert len(acked) == len(sent)
