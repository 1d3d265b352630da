"""A request too large is refused as the invalid request it is, never as "full, retry later":

- Send, SendBatch and a SendStream message over the API's limits (4 MiB of body a message,
  ``send_batch_bytes_max`` of bodies a batch), even far over them (past the 17 MiB that used to
  be gRPC's receive cap), are answered INVALID_ARGUMENT with google.rpc.BadRequest naming the
  size and the limit; a stream goes on after such an answer;
- a request over the sidecar's gRPC receive cap (SidecarConfig.grpc_receive_bytes_max) is refused
  by gRPC's core itself with RESOURCE_EXHAUSTED before any handler runs: the client library
  raises RequestTooLargeError for it, which is not retriable.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rocketbox_api.message_rules import BODY_BYTES_MAX
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_client import Client, InvalidMessageError, Message, RequestTooLargeError, _rpc
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import ProducerConfig
from tests.broker.broker_process import BrokerProcess
from tests.sidecar.sidecar_process import CALL_DEADLINE_S, SidecarProcess, message, outcome, send

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
# Past the old receive cap (send_batch_bytes_max + 1 MiB = 17 MiB), under the new one.
FAR_OVER_BYTES = 20 * MIB
DEFAULTS = SidecarConfig(ProducerConfig(access_points=(Endpoint("127.0.0.1", 1),)), "memory://")


@pytest.fixture
def sidecar(broker: BrokerProcess, tmp_path: Path) -> Iterator[SidecarProcess]:
    s = SidecarProcess(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}")
    yield s
    s.stop()


def bad_request(error: grpc.RpcError) -> error_details_pb2.BadRequest:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]  # a grpc.RpcError raised by a call is also a grpc.Call
    assert status is not None, error
    bad = error_details_pb2.BadRequest()
    assert any(d.Unpack(bad) for d in status.details), status
    return bad


@pytest.mark.parametrize("body_bytes", [BODY_BYTES_MAX + 1, FAR_OVER_BYTES])
def test_send_over_the_body_limit_is_invalid_argument_naming_size_and_limit(
    sidecar: SidecarProcess, body_bytes: int
) -> None:
    with sidecar.client() as stub, pytest.raises(grpc.RpcError) as raised:
        send(stub, message("Orders", b"x" * body_bytes))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violation = bad_request(raised.value).field_violations[0]
    assert violation.field == "body"
    assert f"{body_bytes} bytes" in violation.description
    assert str(BODY_BYTES_MAX) in violation.description


def test_send_batch_over_its_byte_limit_is_invalid_argument_naming_size_and_limit(
    sidecar: SidecarProcess,
) -> None:
    limit = DEFAULTS.send_batch_bytes_max
    bodies = [b"x" * BODY_BYTES_MAX] * 5  # 20 MiB: past the limit and the old receive cap
    request = api.SendBatchRequest(messages=[message("Orders", b) for b in bodies])
    with sidecar.client() as stub, pytest.raises(grpc.RpcError) as raised:
        stub.SendBatch(request, timeout=CALL_DEADLINE_S)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violation = bad_request(raised.value).field_violations[0]
    assert violation.field == "messages"
    assert f"{sum(map(len, bodies))} bytes" in violation.description
    assert str(limit) in violation.description


def test_a_stream_message_over_the_limit_is_rejected_and_the_stream_goes_on(
    sidecar: SidecarProcess,
) -> None:
    requests: queue.Queue[api.SendStreamRequest | None] = queue.Queue()

    def request_iterator() -> Iterator[api.SendStreamRequest]:
        while (r := requests.get()) is not None:
            yield r

    with sidecar.client() as stub:
        responses = stub.SendStream(request_iterator(), timeout=CALL_DEADLINE_S)
        over = message("Orders", b"x" * FAR_OVER_BYTES)
        requests.put(api.SendStreamRequest(request_id=1, message=over))
        first = next(responses)
        requests.put(api.SendStreamRequest(request_id=2, message=message("Orders", b"fits")))
        second = next(responses)
        requests.put(None)
    assert first.request_id == 1
    assert outcome(first.result) == "rejected"
    rejected = first.result.rejected
    assert rejected.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert rejected.field == "body"
    assert f"{FAR_OVER_BYTES} bytes" in rejected.reason
    assert str(BODY_BYTES_MAX) in rejected.reason
    assert second.request_id == 2
    assert outcome(second.result) == "stored"


def test_over_the_receive_cap_the_client_raises_a_non_retriable_error(
    sidecar: SidecarProcess,
) -> None:
    cap = DEFAULTS.grpc_receive_bytes_max
    too_large = b"x" * (cap + 1)
    # Raw gRPC: the sidecar's core refuses it before any handler runs.
    with sidecar.client() as stub, pytest.raises(grpc.RpcError) as refused:
        send(stub, message("Orders", too_large))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Received message larger than max" in (refused.value.details() or "")
    # The client's own send cap is the sidecar's (off here, so the sidecar's refusal is read).
    for options in ((), (("grpc.max_send_message_length", -1),)):
        with Client(sidecar.endpoint, channel_options=options) as client:
            with pytest.raises(InvalidMessageError) as invalid:  # under the cap: the sidecar's
                client.send(Message("Orders", b"x" * FAR_OVER_BYTES))
            assert type(invalid.value) is InvalidMessageError
            assert invalid.value.field == "body"
            with pytest.raises(RequestTooLargeError) as raised:
                client.send(Message("Orders", too_large))
        error = raised.value
        assert not error.retriable, options
        assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED  # gRPC's own refusal
        assert str(cap) in str(error)
        assert "can never pass" in str(error)


def test_the_receive_cap_lies_above_every_valid_request() -> None:
    c = DEFAULTS
    assert c.grpc_receive_bytes_max > c.send_batch_bytes_max + c.send_batch_entries_max * 16 * 1024
    assert c.grpc_receive_bytes_max > 17 * MIB  # the old cap, which refused 17 MiB requests
    assert c.grpc_receive_bytes_max == _rpc.REQUEST_BYTES_MAX  # the client sends what passes
