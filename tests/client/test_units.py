"""The client's parts that need no sidecar:

- stamped message ids are RocketMQ V1-shaped, unique, and carry this process's random node (not
  the MAC and pid an app shares with its sidecar in a pod);
- the sidecar's answers convert to Stored, Spooled, or the RejectedError subclass of their code,
  with the field and the retry-after;
- the batching limits refuse values outside their bounds, naming the limit;
- the client refuses a non-positive timeout and negative retries.
"""

from __future__ import annotations

import re

import grpc
import pytest
from google.protobuf import duration_pb2

from rocketbox_client import (
    Client,
    InvalidMessageError,
    Message,
    RejectedError,
    ResourceExhaustedError,
    Spooled,
    Stored,
    TopicNotFoundError,
    UnavailableError,
)
from rocketbox_client._proto import sidecar_pb2 as api
from rocketbox_client.batching import BatchingLimits
from rocketbox_client.converter import from_result, to_proto
from rocketbox_client.message_id import GENERATOR, MessageIdGenerator

V1 = re.compile(r"^01[0-9A-F]{32}$")


def test_stamped_ids_are_v1_shaped_unique_and_name_a_random_node() -> None:
    ids = [GENERATOR.next_id() for _ in range(10_000)]
    assert all(V1.match(i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert {i[:18] for i in ids} == {ids[0][:18]}, "one node per process"
    assert MessageIdGenerator().next_id()[:18] != ids[0][:18], "the node is drawn, not the MAC"


def test_a_message_converts_with_its_stamped_id() -> None:
    m = to_proto(
        Message("Orders", b"x", tag="t", keys=("k1", "k2"), message_group="g",
                delivery_time_ms=1_700_000_000_123, properties={"p": "v"}),
        "ID-1",
    )  # fmt: skip
    assert (m.topic, m.body, m.tag, list(m.keys), m.message_group) == (
        "Orders", b"x", "t", ["k1", "k2"], "g",
    )  # fmt: skip
    assert m.delivery_time.ToMilliseconds() == 1_700_000_000_123
    assert dict(m.user_properties) == {"p": "v"}
    assert m.message_id == "ID-1"
    bare = to_proto(Message("Orders", b"x"), "ID-2")
    assert not bare.HasField("tag")
    assert not bare.HasField("message_group")
    assert not bare.HasField("delivery_time")


def test_answers_convert_to_results_and_errors() -> None:
    stored = from_result(api.SendResult(message_id="A", stored=api.Stored(
        broker_name="b", queue_id=1, queue_offset=7, durable=True, attempts=2,
    )))  # fmt: skip
    assert stored == Stored("A", "b", 1, 7, durable=True, attempts=2)
    spooled_pb = api.SendResult(message_id="B", spooled=api.Spooled(
        cause=api.SPOOL_CAUSE_FIFO_FENCE, detail="behind 1", maybe_stored=True,
    ))  # fmt: skip
    spooled_pb.spooled.next_attempt_time.FromMilliseconds(5_000)
    assert from_result(spooled_pb) == Spooled("B", "FIFO_FENCE", "behind 1", 5_000, True)

    def rejected(code: grpc.StatusCode, retry_after_ms: int = 0) -> object:
        r = api.Rejection(code=code.value[0], field="body", reason="is empty")
        if retry_after_ms:
            r.retry_after.CopyFrom(duration_pb2.Duration(seconds=retry_after_ms // 1000))
        return from_result(api.SendResult(message_id="C", rejected=r))

    invalid = rejected(grpc.StatusCode.INVALID_ARGUMENT)
    assert isinstance(invalid, InvalidMessageError)
    assert (invalid.field, invalid.reason, invalid.message_id) == ("body", "is empty", "C")
    assert isinstance(rejected(grpc.StatusCode.NOT_FOUND), TopicNotFoundError)
    full = rejected(grpc.StatusCode.RESOURCE_EXHAUSTED, 2_000)
    assert isinstance(full, ResourceExhaustedError)
    assert full.retry_after_ms == 2_000
    assert isinstance(rejected(grpc.StatusCode.UNAVAILABLE), UnavailableError)
    unknown = rejected(grpc.StatusCode.INTERNAL)
    assert type(unknown) is RejectedError
    assert not unknown.retriable


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        ({"batch_messages_max": 1_001}, "batch_messages_max"),
        ({"batch_messages_max": 0}, "batch_messages_max"),
        ({"batch_bytes_max": 16 * 1024 * 1024 + 1}, "batch_bytes_max"),
        ({"batches_in_flight_max": 0}, "batches_in_flight_max"),
        ({"buffer_messages_max": 0}, "buffer_messages_max"),
        ({"linger_ms": -1}, "linger_ms"),
    ],
)
def test_batching_limits_out_of_bounds_are_refused(limits: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        BatchingLimits(**limits)  # type: ignore[arg-type]  # wrong types on purpose: the refusal is what is tested


def test_client_arguments_out_of_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        Client("127.0.0.1:1", timeout_s=0)
    with pytest.raises(ValueError, match="unavailable_retries_max"):
        Client("127.0.0.1:1", unavailable_retries_max=-1)
    with pytest.raises(ValueError, match="retry_backoff_ms"):
        Client("127.0.0.1:1", retry_backoff_ms=0)
