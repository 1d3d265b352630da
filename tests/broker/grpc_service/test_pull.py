"""Offset-based consumption on the raw apache.rocketmq.v2 protocol (the official clients do not
call these RPCs): PullMessage, UpdateOffset, GetOffset, QueryOffset against a real broker.

Proves: a pull returns the messages from an offset and where to continue; a pull at the end
long-polls and wakes when a message arrives; a pull past the end says so and corrects the offset;
tag filters apply; QueryOffset answers first, last and by timestamp; a committed offset is
returned by GetOffset, also after the broker was killed with SIGKILL and restarted, so a pull
consumer resumes where it left off; a group without a commit gets NOT_FOUND.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.grpc_service.test_edges import send, wire_message
from tests.prometheus import sample, scrape

pytestmark = pytest.mark.slow

CALL_DEADLINE_S = 15.0
# Half the 10 s long poll below: a pull back before it was woken, not timed out.
WAKE_DEADLINE_S = 5.0
METADATA = (("x-mq-client-id", "pull-test"),)


def queue(topic: str, queue_id: int = 0) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


def pull(
    endpoint: str, topic: str, offset: int, batch: int = 32, poll_ms: int = 0, tag: str = "*"
) -> tuple[int, list[pb.Message], int]:
    """(status code, messages, next_offset) of one PullMessage."""
    request = spb.PullMessageRequest(
        group=pb.Resource(name="Pullers"),
        message_queue=queue(topic),
        offset=offset,
        batch_size=batch,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=tag),
        long_polling_timeout={"seconds": poll_ms // 1000, "nanos": (poll_ms % 1000) * 1_000_000},
    )
    code, messages, next_offset = -1, [], -1
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for frame in stub.PullMessage(request, metadata=METADATA, timeout=CALL_DEADLINE_S):
            kind = frame.WhichOneof("content")
            if kind == "status":
                code = frame.status.code
            elif kind == "message":
                messages.append(frame.message)
            else:
                next_offset = frame.next_offset
    return code, messages, next_offset


def stub_call(endpoint: str, method: str, request: object) -> object:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        return getattr(stub, method)(request, metadata=METADATA, timeout=CALL_DEADLINE_S)


def end_offset(endpoint: str) -> int:
    reply = stub_call(
        endpoint,
        "QueryOffset",
        spb.QueryOffsetRequest(message_queue=queue("Log"), query_offset_policy=pb.END),
    )
    assert isinstance(reply, spb.QueryOffsetResponse)
    return int(reply.offset)


def test_pull_reads_from_an_offset_and_long_polls_at_the_end(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Log:1", metrics=True)
    try:
        send(
            broker.endpoint,
            [
                wire_message("Log", f"e{i}".encode(), tag="even" if i % 2 == 0 else "odd")
                for i in range(10)
            ],
        )
        # A send is answered once the commitlog has it; its consume-queue entry follows.
        wait_until(lambda: end_offset(broker.endpoint) == 10, 5, "all ten dispatched")
        code, messages, next_offset = pull(broker.endpoint, "Log", 0, batch=4)
        assert code == Code.OK
        assert [m.body for m in messages] == [b"e0", b"e1", b"e2", b"e3"]
        assert next_offset == 4
        assert all(m.system_properties.body_encoding == pb.IDENTITY for m in messages)

        code, messages, next_offset = pull(broker.endpoint, "Log", 0, tag="odd")
        assert [m.body for m in messages] == [b"e1", b"e3", b"e5", b"e7", b"e9"]
        assert next_offset == 10

        code, messages, next_offset = pull(broker.endpoint, "Log", 50)
        assert (code, messages, next_offset) == (Code.MESSAGE_NOT_FOUND, [], 10)

        woke: list[tuple[int, list[pb.Message], int]] = []
        waiter = threading.Thread(
            target=lambda: woke.append(pull(broker.endpoint, "Log", 10, poll_ms=10_000))
        )
        waiter.start()
        # Seen waiting in the broker first, then back well before its 10 s poll is up: woken (a
        # pull whose poll runs out looks once more, so only the time tells the two apart).
        wait_until(
            lambda: sample(
                scrape(broker.metrics_port), "rocketbox_broker_long_polls_waiting", topic="Log",
                group="",
            ) == 1,
            CALL_DEADLINE_S,
            "the pull waiting at the end of the queue",
        )  # fmt: skip
        send(broker.endpoint, [wire_message("Log", b"late")])
        waiter.join(WAKE_DEADLINE_S)
        assert not waiter.is_alive(), f"not woken: still waiting {WAKE_DEADLINE_S} s after"
        code, messages, next_offset = woke[0]
        assert (code, [m.body for m in messages], next_offset) == (Code.OK, [b"late"], 11)
    finally:
        broker.stop()


def test_query_offset_answers_first_last_and_by_timestamp(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Log:1")
    try:
        send(broker.endpoint, [wire_message("Log", b"before")])
        wait_until(lambda: end_offset(broker.endpoint) == 1, 5, "the first dispatched")
        _, messages, _ = pull(broker.endpoint, "Log", 0)
        first_store_ms = messages[0].system_properties.store_timestamp.seconds * 1000 + (
            messages[0].system_properties.store_timestamp.nanos // 1_000_000
        )
        wait_until(lambda: time.time() * 1000 > first_store_ms + 5, 5, "the clock to move on")
        send(broker.endpoint, [wire_message("Log", b"after")])
        wait_until(lambda: end_offset(broker.endpoint) == 2, 5, "the second dispatched")
        _, both, _ = pull(broker.endpoint, "Log", 0)
        second_ms = both[1].system_properties.store_timestamp

        def query(policy: int, ts: object = None) -> int:
            req = spb.QueryOffsetRequest(message_queue=queue("Log"), query_offset_policy=policy)
            if ts is not None:
                req.timestamp.CopyFrom(ts)
            reply = stub_call(broker.endpoint, "QueryOffset", req)
            assert isinstance(reply, spb.QueryOffsetResponse)
            assert reply.status.code == Code.OK, reply.status
            return int(reply.offset)

        assert query(pb.BEGINNING) == 0
        assert query(pb.END) == 2
        assert query(pb.TIMESTAMP, second_ms) == 1
    finally:
        broker.stop()


def committed(endpoint: str, group: str) -> spb.GetOffsetResponse:
    reply = stub_call(
        endpoint,
        "GetOffset",
        spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=queue("Log")),
    )
    assert isinstance(reply, spb.GetOffsetResponse)
    return reply


def test_committed_offsets_survive_a_sigkill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Log:1")
    try:
        assert committed(broker.endpoint, "Readers").status.code == Code.NOT_FOUND
        reply = stub_call(
            broker.endpoint,
            "UpdateOffset",
            spb.UpdateOffsetRequest(
                group=pb.Resource(name="Readers"), message_queue=queue("Log"), offset=7
            ),
        )
        assert isinstance(reply, spb.UpdateOffsetResponse)
        assert reply.status.code == Code.OK
        got = committed(broker.endpoint, "Readers")
        assert (got.status.code, got.offset) == (Code.OK, 7)
        offsets_file = tmp_path / "config" / "pull_offsets.json"
        wait_until(
            lambda: (
                offsets_file.exists()
                and json.loads(offsets_file.read_text()).get("Readers@Log") == {"0": 7}
            ),
            5,
            "the commit written to disk",
        )
    finally:
        broker.kill()
    broker = BrokerProcess(tmp_path)
    try:
        got = committed(broker.endpoint, "Readers")
        assert (got.status.code, got.offset) == (Code.OK, 7)
        bad = stub_call(
            broker.endpoint,
            "UpdateOffset",
            spb.UpdateOffsetRequest(
                group=pb.Resource(name="Readers"), message_queue=queue("Log", 5), offset=1
            ),
        )
        assert isinstance(bad, spb.UpdateOffsetResponse)
        assert bad.status.code == Code.BAD_REQUEST
        assert "message_queue.id" in bad.status.message
    finally:
        broker.stop()
