"""What the stand-in brokers hold when the v2 endpoint is the stand-in RocketMQ 5 proxy
(tests/rocketmq_proxy): the messages it stored, read from its data directory in store order,
each on the broker (broker-a, broker-b) and queue the proxy chose. A DELAY message whose time
had not come when it was first read is held as waiting (under the timer topic)."""

from __future__ import annotations

import time

from tests.rocketmq_proxy import RocketMQProxy
from tests.rocketmq_remoting.standin import HeldMessage


class HeldByProxy:
    def __init__(self, proxy: RocketMQProxy) -> None:
        self._proxy = proxy
        self._held: list[HeldMessage] = []

    def __call__(self) -> list[HeldMessage]:
        now_ms = int(time.time() * 1000)
        for m in self._proxy.stored()[len(self._held) :]:
            waiting = m.message_type == "DELAY" and (m.delivery_timestamp_ms or 0) > now_ms
            self._held.append(
                HeldMessage(
                    m.topic, m.message_id, m.queue_id, m.queue_offset, m.store_timestamp_ms,
                    m.broker_name, waiting, m.body,
                )
            )  # fmt: skip
        return self._held
