"""The consumer side of the chaos suite's check: every message of the load's topics read back
through the broker's consumer protocol, as a consumer sees them.

It reads with apache.rocketmq.v2 PullMessage, queue by queue, from the queue's first offset
(QueryOffset BEGINNING) to its end (QueryOffset END): a pull consumer that starts at the
beginning and reads everything, in queue order. The queues come from QueryRoute, as any client
finds them. So what it sees went through the broker's dispatch (consume queues rebuilt by
recovery after a crash), not the commitlog scan the reconciliation reads: two independent views.

Promise: ``Consumed.queues`` holds every queue's message ids in queue-offset order, and
``copies`` how many times each id was read; a queue that cannot be read to its end within the
deadline raises ``ConsumeError``.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

import grpc
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

CONSUMER_GROUP = "chaos-checker"
METADATA = (("x-mq-client-id", "chaos-checker"),)
# The broker's limit on one pull (RECEIVE_BATCH_MAX).
PULL_BATCH_MAX = 32
CALL_DEADLINE_S = 15.0
CONSUME_DEADLINE_S_DEFAULT = 300.0
READABLE = (pb.READ, pb.READ_WRITE)


class ConsumeError(Exception):
    """The broker could not be read to the end of a queue."""


@dataclass(frozen=True, slots=True)
class ConsumedMessage:
    message_id: str
    topic: str
    queue_id: int
    queue_offset: int


@dataclass(slots=True)
class Consumed:
    # (topic, queue id) → the messages in queue-offset order.
    queues: dict[tuple[str, int], list[ConsumedMessage]] = field(default_factory=dict)
    copies: collections.Counter[str] = field(default_factory=collections.Counter)
    without_id: int = 0

    @property
    def messages(self) -> int:
        return sum(len(q) for q in self.queues.values())


def consume_all(
    endpoint: str, topics: tuple[str, ...], deadline_s: float = CONSUME_DEADLINE_S_DEFAULT
) -> Consumed:
    """Every message of ``topics`` at the broker at ``endpoint``, in queue order."""
    end_at = time.monotonic() + deadline_s
    consumed = Consumed()
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for topic in topics:
            for queue_id in _queue_ids(stub, topic):
                messages = _read_queue(stub, topic, queue_id, end_at)
                consumed.queues[(topic, queue_id)] = messages
                for m in messages:
                    if m.message_id:
                        consumed.copies[m.message_id] += 1
                    else:
                        consumed.without_id += 1
    return consumed


def _queue_ids(stub: service_pb2_grpc.MessagingServiceStub, topic: str) -> list[int]:
    reply = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
        metadata=METADATA,
        timeout=CALL_DEADLINE_S,
    )
    if reply.status.code != Code.OK:
        raise ConsumeError(f"QueryRoute {topic}: {Code.Name(reply.status.code)} {reply.status}")
    return sorted({q.id for q in reply.message_queues if q.permission in READABLE})


def _offset(stub: service_pb2_grpc.MessagingServiceStub, mq: pb.MessageQueue, policy: int) -> int:
    reply = stub.QueryOffset(
        spb.QueryOffsetRequest(message_queue=mq, query_offset_policy=policy),
        metadata=METADATA,
        timeout=CALL_DEADLINE_S,
    )
    if reply.status.code != Code.OK:
        raise ConsumeError(
            f"QueryOffset {mq.topic.name}/{mq.id}: {Code.Name(reply.status.code)} "
            f"{reply.status.message}"
        )
    return int(reply.offset)


def _read_queue(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, queue_id: int, end_at: float
) -> list[ConsumedMessage]:
    mq = pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)
    offset = _offset(stub, mq, pb.BEGINNING)
    end = _offset(stub, mq, pb.END)
    out: list[ConsumedMessage] = []
    while offset < end:
        if time.monotonic() > end_at:
            raise ConsumeError(f"{topic}/{queue_id}: read to offset {offset} of {end} in time")
        request = spb.PullMessageRequest(
            group=pb.Resource(name=CONSUMER_GROUP),
            message_queue=mq,
            offset=offset,
            batch_size=PULL_BATCH_MAX,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            long_polling_timeout={"seconds": 0},
        )
        code, next_offset = -1, -1
        for frame in stub.PullMessage(request, metadata=METADATA, timeout=CALL_DEADLINE_S):
            kind = frame.WhichOneof("content")
            if kind == "status":
                code = frame.status.code
                if code not in (Code.OK, Code.MESSAGE_NOT_FOUND):
                    raise ConsumeError(
                        f"PullMessage {topic}/{queue_id} at {offset}: {Code.Name(code)} "
                        f"{frame.status.message}"
                    )
            elif kind == "message":
                sp = frame.message.system_properties
                out.append(ConsumedMessage(sp.message_id, topic, queue_id, sp.queue_offset))
            else:
                next_offset = frame.next_offset
        if next_offset <= offset:
            raise ConsumeError(
                f"PullMessage {topic}/{queue_id} at {offset}: no progress "
                f"({Code.Name(code) if code >= 0 else 'no status'}, next_offset {next_offset})"
            )
        offset = next_offset
    return out
