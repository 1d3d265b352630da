"""Inputs fuzzing found the broker accepting, and their kin in every RPC of
apache.rocketmq.v2.MessagingService, sent raw to a real ``rocketbox broker`` process.

Proves, one test per reported input: an AckMessage of 1,000 receipt handles of 10 KB is refused
INVALID_RECEIPT_HANDLE with an answer of a few hundred bytes (not 50 MB, over the broker's own
16 MiB limit), and more than ACK_ENTRIES_MAX entries BAD_REQUEST; a delivery time 10^10 s in
the past and Timestamp nanos of 2·10^9 are ILLEGAL_DELIVERY_TIME (a born_timestamp's nanos
BAD_REQUEST); queue_id -1 and 2^31-1 are BAD_REQUEST; a FIFO-typed message without a message
group is ILLEGAL_MESSAGE_GROUP. Then the rest of the review: more than SEND_MESSAGES_MAX
messages, receipt handles of ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue (and
one of Unicode digits), malformed durations and queue ids of ReceiveMessage, a long filter
expression or namespace, an unknown message type, resolution or offset policy, a DELAY level in
Unicode digits, Telemetry Settings without a valid group or over SETTINGS_BYTES_MAX. Each
refusal names the field; nothing is stored; no request made the broker fault (its guard logged
nothing) and it still serves a valid send.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.grpc_service.client_activity import SETTINGS_BYTES_MAX
from broker.grpc_service.request_limits import (
    ACK_ENTRIES_MAX,
    FILTER_EXPRESSION_LENGTH_MAX,
    RECEIPT_HANDLE_LENGTH_MAX,
    RESOURCE_NAMESPACE_LENGTH_MAX,
    SEND_MESSAGES_MAX,
)
from tests.broker.broker_process import BrokerProcess

pytestmark = pytest.mark.slow

CALL_DEADLINE_S = 30.0
METADATA = (("x-mq-client-id", "limits-test"),)
TOPIC = "Limits"
QUEUES = 4
GROUP = "limits-group"
KB = 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("limits"), "--topic", f"{TOPIC}:{QUEUES}:MIXED")
    yield b
    b.stop()
    assert "Traceback" not in b.output(), b.output()
    assert "failed on a request" not in b.output(), "no request made a handler fault"


@pytest.fixture(scope="module")
def stub(broker: BrokerProcess) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def call(stub: service_pb2_grpc.MessagingServiceStub, method: str, request: Any) -> Any:
    return getattr(stub, method)(request, metadata=METADATA, timeout=CALL_DEADLINE_S)


def wire(body: bytes = b"x", message_type: int = pb.NORMAL, **system: Any) -> pb.Message:
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=message_type)
    for name, value in system.items():
        field = getattr(sp, name)
        if hasattr(field, "CopyFrom"):
            field.CopyFrom(value)
        else:
            setattr(sp, name, value)
    return pb.Message(topic=pb.Resource(name=TOPIC), system_properties=sp, body=body)


def send(stub: service_pb2_grpc.MessagingServiceStub, *messages: pb.Message) -> Any:
    return call(stub, "SendMessage", spb.SendMessageRequest(messages=messages))


def refused(answer: Any, code: int, *words: str) -> None:
    assert answer.status.code == code, answer.status
    for word in words:
        assert word in answer.status.message, answer.status.message


def ack_request(handles: list[str]) -> spb.AckMessageRequest:
    return spb.AckMessageRequest(
        group=pb.Resource(name=GROUP),
        topic=pb.Resource(name=TOPIC),
        entries=[
            spb.AckMessageEntry(message_id=f"M{i}", receipt_handle=h) for i, h in enumerate(handles)
        ],
    )


# -- the reported inputs --------------------------------------------------------------------------


def test_an_ack_of_1000_handles_of_10_kb_gets_a_small_refusal(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    request = ack_request(["h" * 10 * KB] * 1000)
    assert request.ByteSize() > 10_000 * KB
    answer = call(stub, "AckMessage", request)
    refused(
        answer,
        Code.INVALID_RECEIPT_HANDLE,
        "entries[0].receipt_handle",
        str(RECEIPT_HANDLE_LENGTH_MAX),
    )
    assert answer.ByteSize() < KB, "the refusal does not echo the handles"
    too_many = call(stub, "AckMessage", ack_request(["0.0.abc"] * (ACK_ENTRIES_MAX + 1)))
    refused(too_many, Code.BAD_REQUEST, "entries", str(ACK_ENTRIES_MAX))
    assert too_many.ByteSize() < KB


def test_a_delivery_time_10_10_s_in_the_past_is_refused(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    past = Timestamp(seconds=int(time.time()) - 10**10)
    answer = send(stub, wire(message_type=pb.DELAY, delivery_timestamp=past))
    refused(answer, Code.ILLEGAL_DELIVERY_TIME, "delivery_timestamp")


def test_timestamp_nanos_of_2e9_are_refused(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    soon = Timestamp(seconds=int(time.time()) + 60, nanos=2 * 10**9)
    delayed = send(stub, wire(message_type=pb.DELAY, delivery_timestamp=soon))
    refused(delayed, Code.ILLEGAL_DELIVERY_TIME, "delivery_timestamp", "nanos")
    born = send(stub, wire(born_timestamp=Timestamp(seconds=int(time.time()), nanos=2 * 10**9)))
    refused(born, Code.BAD_REQUEST, "born_timestamp", "nanos")


@pytest.mark.parametrize("queue_id", [-1, 2**31 - 1])
def test_queue_ids_outside_the_topic_are_refused(
    stub: service_pb2_grpc.MessagingServiceStub, queue_id: int
) -> None:
    answer = send(stub, wire(queue_id=queue_id))
    refused(answer, Code.BAD_REQUEST, "system_properties.queue_id", f"0..{QUEUES - 1}")


def test_a_fifo_message_without_a_message_group_is_refused(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    refused(send(stub, wire(message_type=pb.FIFO)), Code.ILLEGAL_MESSAGE_GROUP, "message_group")
    grouped_normal = send(stub, wire(message_type=pb.NORMAL, message_group="g"))
    refused(grouped_normal, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "message_group")


# -- the rest of the review -----------------------------------------------------------------------


def test_more_than_send_messages_max_messages_get_one_small_refusal(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    answer = send(stub, *[wire() for _ in range(SEND_MESSAGES_MAX + 1)])
    refused(answer, Code.BAD_REQUEST, "messages", str(SEND_MESSAGES_MAX))
    assert not answer.entries
    many_topics = [wire() for _ in range(500)]
    for i, m in enumerate(many_topics):
        m.topic.name = f"T{i:03}" + "t" * 100
    mixed = send(stub, *many_topics)
    refused(mixed, Code.MESSAGE_CORRUPTED, "500 topics")
    assert mixed.ByteSize() < 500 * 2 * KB, "each entry's status is bounded"


@pytest.mark.parametrize(
    ("handle", "why"),
    [("h" * 10 * KB, str(RECEIPT_HANDLE_LENGTH_MAX)), ("²³.1.x", "ASCII"), ("", "empty")],
    ids=["10-kb", "unicode-digits", "empty"],
)
def test_malformed_receipt_handles_are_refused_by_every_rpc_taking_one(
    stub: service_pb2_grpc.MessagingServiceStub, handle: str, why: str
) -> None:
    group, topic = pb.Resource(name=GROUP), pb.Resource(name=TOPIC)
    refused(call(stub, "AckMessage", ack_request([handle])), Code.INVALID_RECEIPT_HANDLE, why)
    changed = call(
        stub,
        "ChangeInvisibleDuration",
        spb.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=handle, invisible_duration=Duration(seconds=5)
        ),
    )
    refused(changed, Code.INVALID_RECEIPT_HANDLE, "receipt_handle", why)
    assert changed.receipt_handle == (handle if len(handle) <= RECEIPT_HANDLE_LENGTH_MAX else "")
    forwarded = call(
        stub,
        "ForwardMessageToDeadLetterQueue",
        spb.ForwardMessageToDeadLetterQueueRequest(group=group, topic=topic, receipt_handle=handle),
    )
    refused(forwarded, Code.INVALID_RECEIPT_HANDLE, "receipt_handle", why)


def receive(stub: service_pb2_grpc.MessagingServiceStub, **fields: Any) -> pb.Status:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
        batch_size=1,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=0),
    )
    for name, value in fields.items():
        target = request
        *path, last = name.split(".")
        for part in path:
            target = getattr(target, part)
        field = getattr(target, last)
        if hasattr(field, "CopyFrom"):
            field.CopyFrom(value)
        else:
            setattr(target, last, value)
    frames = list(stub.ReceiveMessage(request, metadata=METADATA, timeout=CALL_DEADLINE_S))
    statuses = [f.status for f in frames if f.HasField("status")]
    assert len(statuses) == 1, frames
    status: pb.Status = statuses[0]
    return status


RECEIVE_REFUSALS = {
    "negative-poll": (
        {"long_polling_timeout": Duration(seconds=-5)},
        Code.ILLEGAL_POLLING_TIME,
        "long_polling_timeout",
    ),
    "invisible-nanos": (
        {"invisible_duration": Duration(seconds=30, nanos=2 * 10**9)},
        Code.ILLEGAL_INVISIBLE_TIME,
        "invisible_duration",
    ),
    "queue-id": ({"message_queue.id": QUEUES}, Code.BAD_REQUEST, "message_queue.id"),
    "namespace": (
        {"message_queue.topic.resource_namespace": "n" * 10 * KB},
        Code.ILLEGAL_TOPIC,
        "resource_namespace",
    ),
    "filter": (
        {"filter_expression.expression": "a||" * 2000},
        Code.ILLEGAL_FILTER_EXPRESSION,
        str(FILTER_EXPRESSION_LENGTH_MAX),
    ),
    "group": ({"group.name": "g" * 10 * KB}, Code.ILLEGAL_CONSUMER_GROUP, "group"),
}


@pytest.mark.parametrize(
    ("fields", "code", "named"), RECEIVE_REFUSALS.values(), ids=RECEIVE_REFUSALS.keys()
)
def test_receive_refuses_malformed_fields_naming_them(
    stub: service_pb2_grpc.MessagingServiceStub, fields: dict[str, Any], code: int, named: str
) -> None:
    status = receive(stub, **fields)
    assert status.code == code, status
    assert named in status.message
    assert len(status.message) <= 1024
    assert receive(stub).code == Code.MESSAGE_NOT_FOUND, "the same request made well is served"
    assert receive(stub, **{"message_queue.id": -1}).code == Code.MESSAGE_NOT_FOUND, "-1: all"


def test_a_namespace_too_long_to_echo_is_refused_by_query_route(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    topic = pb.Resource(name=TOPIC, resource_namespace="n" * 10 * KB)
    answer = call(stub, "QueryRoute", spb.QueryRouteRequest(topic=topic))
    refused(answer, Code.ILLEGAL_TOPIC, "resource_namespace", str(RESOURCE_NAMESPACE_LENGTH_MAX))
    assert not answer.message_queues


def test_unknown_enum_values_and_unicode_digits_are_refused_not_faults(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    refused(send(stub, wire(message_type=99)), Code.BAD_REQUEST, "message_type", "99")
    leveled = wire()
    leveled.user_properties["DELAY"] = "²"
    refused(send(stub, leveled), Code.ILLEGAL_DELIVERY_TIME, "DELAY")
    end = spb.EndTransactionRequest(
        topic=pb.Resource(name=TOPIC), message_id="M1", transaction_id="T" * 32, resolution=7
    )
    refused(call(stub, "EndTransaction", end), Code.BAD_REQUEST, "resolution 7")
    queue = pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0)
    policy = spb.QueryOffsetRequest(message_queue=queue, query_offset_policy=9)
    refused(call(stub, "QueryOffset", policy), Code.BAD_REQUEST, "query_offset_policy 9")
    bad_time = spb.QueryOffsetRequest(
        message_queue=queue, query_offset_policy=pb.TIMESTAMP, timestamp=Timestamp(seconds=10**15)
    )
    refused(call(stub, "QueryOffset", bad_time), Code.BAD_REQUEST, "timestamp")


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (pb.Settings(subscription=pb.Subscription(group=pb.Resource(name="bad group"))), "group"),
        (
            pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="t" * 100)] * 1000)),
            str(SETTINGS_BYTES_MAX),
        ),
    ],
    ids=["group", "size"],
)
def test_telemetry_refuses_settings_it_cannot_take_naming_why(
    broker: BrokerProcess, settings: pb.Settings, named: str
) -> None:
    with grpc.insecure_channel(broker.endpoint) as channel:
        stream = service_pb2_grpc.MessagingServiceStub(channel).Telemetry(
            iter([spb.TelemetryCommand(settings=settings)]),
            metadata=METADATA,
            timeout=CALL_DEADLINE_S,
        )
        with pytest.raises(grpc.RpcError) as ended:
            list(stream)
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in (ended.value.details() or "")


def test_nothing_refused_was_stored_and_a_valid_send_still_succeeds(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    routes = call(stub, "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)))
    assert routes.status.code == Code.OK
    answer = send(stub, wire(b"fine"))
    assert answer.status.code == Code.OK, answer.status
    assert [e.offset for e in answer.entries] == [0], "the first message stored on its queue"
