"""What a scenario's load sends, drawn from its seed: every message's id, topic, FIFO group and
the API that carries it.

Promises:
- the same seed and message count give the same plan (ids, topics, groups, lanes), except for
  the id's seconds field, which is the plan's start time as in RocketMQ's V1 layout;
- every message id is unique within the plan (its counter is the message's index);
- a FIFO group's messages all travel in one *lane* (one sequential Send worker, or one SendBatch
  worker whose batches go one after another), numbered 0, 1, 2 … in the order that lane sends
  them, so the consumer-side check can tell their order. SendStream carries plain messages only:
  the API promises request order for SendBatch and for sequential Sends, not for a stream.
"""

from __future__ import annotations

import enum
import random
import time
from dataclasses import dataclass

# The topics every scenario's broker creates (BROKER_TOPIC_ARGS) and the load sends to.
PLAIN_TOPIC = "ChaosPlain"
FIFO_TOPIC = "ChaosFifo"
TOPIC_QUEUES = 4
BROKER_TOPIC_ARGS = (
    "--topic", f"{PLAIN_TOPIC}:{TOPIC_QUEUES}:NORMAL",
    "--topic", f"{FIFO_TOPIC}:{TOPIC_QUEUES}:FIFO",
)  # fmt: skip

EPOCH_2021_S = 1_609_459_200
# Share of the messages that belong to a FIFO group, and how many groups they spread over.
FIFO_SHARE = 0.2
FIFO_GROUPS = 24
BODY_BYTES = 256
MESSAGES_MAX = 10_000_000


class Api(enum.StrEnum):
    SEND = "Send"
    SEND_BATCH = "SendBatch"
    SEND_STREAM = "SendStream"


@dataclass(frozen=True, slots=True)
class Lanes:
    """How many concurrent callers each API has: Send workers, SendBatch workers (each with at
    most ``batch_messages_max`` messages a call) and streams (each with at most
    ``stream_in_flight_max`` requests unanswered)."""

    send_workers: int = 32
    batch_workers: int = 4
    batch_messages_max: int = 100
    streams: int = 2
    stream_in_flight_max: int = 256

    def count(self, api: Api) -> int:
        return {
            Api.SEND: self.send_workers,
            Api.SEND_BATCH: self.batch_workers,
            Api.SEND_STREAM: self.streams,
        }[api]


@dataclass(frozen=True, slots=True)
class PlannedMessage:
    index: int
    message_id: str
    topic: str
    api: Api
    lane: int
    # FIFO messages only: the group and the message's place in it (0, 1, 2 … in send order).
    group: str | None = None
    group_seq: int = -1

    def body(self) -> bytes:
        head = f"chaos {self.index} {self.message_id} {self.group or '-'} {self.group_seq} "
        return head.ljust(BODY_BYTES, ".").encode()


@dataclass(frozen=True, slots=True)
class Plan:
    seed: str
    lanes: Lanes
    messages: tuple[PlannedMessage, ...]

    def lane(self, api: Api, lane: int) -> list[PlannedMessage]:
        return [m for m in self.messages if m.api is api and m.lane == lane]

    @property
    def topics(self) -> tuple[str, ...]:
        return (PLAIN_TOPIC, FIFO_TOPIC)


def make_plan(seed: str, messages: int, lanes: Lanes | None = None) -> Plan:
    """``messages`` messages drawn from ``seed`` (a scenario passes its name with the run's seed,
    so scenarios differ)."""
    if not 1 <= messages <= MESSAGES_MAX:
        raise ValueError(f"messages: {messages}; must be 1..{MESSAGES_MAX}")
    lanes = lanes or Lanes()
    rng = random.Random(seed)
    node = rng.getrandbits(64)
    seconds = max(0, int(time.time()) - EPOCH_2021_S) & 0xFFFFFFFF
    # Even groups go by Send, odd ones by SendBatch; each group keeps one lane.
    group_api = {g: Api.SEND if g % 2 == 0 else Api.SEND_BATCH for g in range(FIFO_GROUPS)}
    group_lane = {g: rng.randrange(lanes.count(group_api[g])) for g in range(FIFO_GROUPS)}
    group_next = dict.fromkeys(range(FIFO_GROUPS), 0)
    planned = []
    for index in range(messages):
        message_id = f"01{node:016X}{seconds:08X}{index:08X}"
        if rng.random() < FIFO_SHARE:
            g = rng.randrange(FIFO_GROUPS)
            planned.append(
                PlannedMessage(
                    index, message_id, FIFO_TOPIC, group_api[g], group_lane[g],
                    group=f"group-{g:02d}", group_seq=group_next[g],
                )
            )  # fmt: skip
            group_next[g] += 1
        else:
            api = rng.choice(list(Api))
            planned.append(
                PlannedMessage(index, message_id, PLAIN_TOPIC, api, rng.randrange(lanes.count(api)))
            )
    return Plan(seed, lanes, tuple(planned))
