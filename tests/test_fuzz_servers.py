"""A fuzz test of both servers: every RPC of a real ``rocketbox broker`` process
(apache.rocketmq.v2.MessagingService, rocketbox.admin.v1.BrokerAdmin, grpc.health.v1.Health)
and of a real ``rocketbox sidecar`` process (rocketbox.v1.SidecarService, OutboxAdminService,
Health, reflection),
unary and streaming alike, called with raw bytes through identity (de)serializers:

(a) random bytes; (b) a valid request of the method with a few bytes flipped, inserted, deleted
or cut off; (c) protobuf messages of the method's request type that hypothesis builds with
extreme values (empty and very long strings, control characters and other scripts, integer
bounds, unknown enum values, NaN, out-of-range Timestamp and Duration parts, nested messages).

Proves, for each server: no call is answered UNKNOWN; the process writes no traceback per
request (at most the guard's rate-limited lines: one per interval and kind; the broker none at
all, as no request makes one of its handlers fault); and after the fuzzing it is still running
and a valid send succeeds. Before the fuzzing, the sidecar answers bytes that are not protobuf,
and invalid UTF-8 in a string field, INVALID_ARGUMENT naming the request type on every method
(test_malformed_requests.py proves it of the broker). The number of examples is bounded so
that both take well under a minute.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketbox_api.admin.v1 import broker_admin_pb2 as apb
from rocketbox_api.admin.v1 import broker_admin_pb2_grpc
from rocketbox_api.rate_limited_log import LOG_INTERVAL_S_DEFAULT
from rocketbox_api.v1 import outbox_admin_pb2 as oapb
from rocketbox_api.v1 import sidecar_pb2 as api
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_malformed_requests import NOT_PROTOBUF, bad_utf8, raw_call
from tests.sidecar.sidecar_process import SidecarProcess, outcome, send

pytestmark = pytest.mark.slow

TOPIC = "Fuzz"
GROUP = "fuzz-group"
METADATA = (("x-mq-client-id", "fuzz-client"),)
UNARY_DEADLINE_S = 10.0
# Long enough for an answer, short enough that a long poll (capped 500 ms before the client's
# deadline) costs little: server streams are answered within ~0.3 s.
STREAM_DEADLINE_S = 0.8
RANDOM_EXAMPLES = 250
MUTATED_EXAMPLES = 500
GENERATED_EXAMPLES = 800
FAULT_LINE = "failed on a request"

BROKER_SERVICES = (
    spb.DESCRIPTOR.services_by_name["MessagingService"],
    apb.DESCRIPTOR.services_by_name["BrokerAdmin"],
    health_pb2.DESCRIPTOR.services_by_name["Health"],
)
SIDECAR_SERVICES = (
    api.DESCRIPTOR.services_by_name["SidecarService"],
    oapb.DESCRIPTOR.services_by_name["OutboxAdminService"],
    health_pb2.DESCRIPTOR.services_by_name["Health"],
    reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"],
)
# Streams that never end by themselves: one answer is enough.
ENDLESS = {"grpc.health.v1.Health.Watch"}


def identity(raw: bytes) -> bytes:
    return raw


# -- valid requests, the seeds of (b) -------------------------------------------------------------


def _wire_message() -> pb.Message:
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=pb.NORMAL)
    return pb.Message(topic=pb.Resource(name=TOPIC), system_properties=sp, body=b"fuzz")


def _broker_seeds() -> dict[str, Message]:
    topic, group = pb.Resource(name=TOPIC), pb.Resource(name=GROUP)
    queue = pb.MessageQueue(topic=topic, id=0)
    handle = "0.0.0000000000000000abcd"
    return {
        "QueryRoute": spb.QueryRouteRequest(topic=topic),
        "Heartbeat": spb.HeartbeatRequest(group=group, client_type=pb.PRODUCER),
        "SendMessage": spb.SendMessageRequest(messages=[_wire_message()]),
        "QueryAssignment": spb.QueryAssignmentRequest(topic=topic, group=group),
        "ReceiveMessage": spb.ReceiveMessageRequest(
            group=group,
            message_queue=queue,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=1,
            invisible_duration=Duration(seconds=30),
            long_polling_timeout=Duration(seconds=0),
        ),
        "AckMessage": spb.AckMessageRequest(
            group=group,
            topic=topic,
            entries=[spb.AckMessageEntry(message_id="M", receipt_handle=handle)],
        ),
        "ForwardMessageToDeadLetterQueue": spb.ForwardMessageToDeadLetterQueueRequest(
            group=group, topic=topic, receipt_handle=handle, message_id="M", delivery_attempt=1
        ),
        "PullMessage": spb.PullMessageRequest(
            group=group,
            message_queue=queue,
            offset=0,
            batch_size=1,
            long_polling_timeout=Duration(),
        ),
        "UpdateOffset": spb.UpdateOffsetRequest(group=group, message_queue=queue, offset=0),
        "GetOffset": spb.GetOffsetRequest(group=group, message_queue=queue),
        "QueryOffset": spb.QueryOffsetRequest(message_queue=queue, query_offset_policy=pb.END),
        "EndTransaction": spb.EndTransactionRequest(
            topic=topic, message_id="M", transaction_id="0" * 32, resolution=pb.COMMIT
        ),
        "Telemetry": spb.TelemetryCommand(
            settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[topic]))
        ),
        "NotifyClientTermination": spb.NotifyClientTerminationRequest(group=group),
        "ChangeInvisibleDuration": spb.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=handle, invisible_duration=Duration(seconds=10)
        ),
        "RecallMessage": spb.RecallMessageRequest(topic=topic, recall_handle="h"),
        "CreateTopic": apb.CreateTopicRequest(topic="FuzzNew", queue_nums=2),
        "DescribeTopic": apb.DescribeTopicRequest(topic=TOPIC),
        "DeleteTopic": apb.DeleteTopicRequest(topic="FuzzNew"),
        "GetMessage": apb.GetMessageRequest(message_id="0" * 32),
        "QueryMessage": apb.QueryMessageRequest(topic=TOPIC, key="k", max_num=4),
        "SetFlowControl": apb.SetFlowControlRequest(on=False, topic=TOPIC),
        "DescribeGroup": apb.DescribeGroupRequest(group=GROUP),
        "CreateGroup": apb.CreateGroupRequest(group="fuzz-new"),
        "ResetOffset": apb.ResetOffsetRequest(group=GROUP, topic=TOPIC),
        "Check": health_pb2.HealthCheckRequest(service=""),
        "Watch": health_pb2.HealthCheckRequest(service=""),
    }


def _sidecar_seeds() -> dict[str, Message]:
    m = api.Message(topic=TOPIC, body=b"fuzz", keys=["k"], user_properties={"p": "v"})
    return {
        "Send": api.SendRequest(message=m),
        "SendBatch": api.SendBatchRequest(messages=[m, m]),
        "SendStream": api.SendStreamRequest(request_id=1, message=m),
        "Check": health_pb2.HealthCheckRequest(service=""),
        "Watch": health_pb2.HealthCheckRequest(service=""),
        "ServerReflectionInfo": reflection_pb2.ServerReflectionRequest(list_services=""),
        "RetryNow": oapb.RetryNowRequest(selection=oapb.EntrySelection(message_ids=["x"])),
        "Requeue": oapb.RequeueRequest(selection=oapb.EntrySelection(all=True)),
        "Stats": oapb.StatsRequest(),
    }


# -- (c) protobuf messages with extreme values --------------------------------------------------

# Unicode's category of lone surrogates, which no UTF-8 string (protobuf's) can hold.
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
TEXT = st.text(alphabet=st.characters(blacklist_categories=SURROGATES), max_size=24)
EXTREME_TEXT = st.one_of(
    st.sampled_from(["", " ", "\t", "\x00", "*", "a||b", "a b", "|", "%DLQ%x", "%RETRY%g"]),
    st.sampled_from(["rmq_sys_x", "²³", "٣", "0.0.x", TOPIC, GROUP, "DELAY", "UNIQ_KEY"]),
    TEXT,
    st.sampled_from([63, 64, 65, 120, 121, 127, 128, 129, 512, 513, 4097, 70_000]).map("a".__mul__),
)
EXTREME_BYTES = st.one_of(st.binary(max_size=32), st.sampled_from([0, 1, 4096]).map(bytes))


def _ints(bits: int, signed: bool) -> st.SearchStrategy[int]:
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    edges = [
        v
        for v in (0, 1, -1, 2, 18, 19, 32, 33, 10**9, 2 * 10**9, 10**10, low, high)
        if low <= v <= high
    ]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_INT32: _ints(32, True),
    FieldDescriptor.TYPE_SINT32: _ints(32, True),
    FieldDescriptor.TYPE_SFIXED32: _ints(32, True),
    FieldDescriptor.TYPE_INT64: _ints(64, True),
    FieldDescriptor.TYPE_SINT64: _ints(64, True),
    FieldDescriptor.TYPE_SFIXED64: _ints(64, True),
    FieldDescriptor.TYPE_UINT32: _ints(32, False),
    FieldDescriptor.TYPE_FIXED32: _ints(32, False),
    FieldDescriptor.TYPE_UINT64: _ints(64, False),
    FieldDescriptor.TYPE_FIXED64: _ints(64, False),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_FLOAT: st.floats(width=32),
    FieldDescriptor.TYPE_DOUBLE: st.floats(),
    FieldDescriptor.TYPE_STRING: EXTREME_TEXT,
    FieldDescriptor.TYPE_BYTES: EXTREME_BYTES,
}
MESSAGE_DEPTH_MAX = 4


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None, field.full_name
        known = [v.number for v in field.enum_type.values]
        return st.sampled_from([*known, max(known) + 1, -1, 2**31 - 1])
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        assert field.message_type is not None, field.full_name
        return messages(field.message_type, depth - 1)
    return _SCALARS[field.type]


def messages(descriptor: Descriptor, depth: int = MESSAGE_DEPTH_MAX) -> st.SearchStrategy[Message]:
    """Messages of ``descriptor``'s type with any subset of fields set to extreme values."""
    from google.protobuf import message_factory  # noqa: PLC0415 - only this strategy needs it

    cls = message_factory.GetMessageClass(descriptor)
    if depth <= 0:
        return st.just(cls())
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        entry = field.message_type
        if field.type == FieldDescriptor.TYPE_MESSAGE and entry and entry.GetOptions().map_entry:
            key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
            optional[field.name] = st.dictionaries(
                _value(key, depth), _value(value, depth), max_size=3
            )
        elif field.is_repeated:
            optional[field.name] = st.lists(_value(field, depth), max_size=3)
        else:
            optional[field.name] = _value(field, depth)
    return st.fixed_dictionaries({}, optional=optional).map(lambda values: _build(cls, values))


def _build(cls: Callable[[], Message], values: dict[str, Any]) -> Message:
    message = cls()
    for name, value in values.items():
        field = getattr(message, name)
        try:
            if isinstance(value, dict):
                for k, v in value.items():
                    if isinstance(v, Message):
                        field[k].CopyFrom(v)
                    else:
                        field[k] = v
            elif isinstance(value, list):
                for v in value:
                    if isinstance(v, Message):
                        field.add().CopyFrom(v)
                    else:
                        field.append(v)
            elif isinstance(value, Message):
                field.CopyFrom(value)
            else:
                setattr(message, name, value)
        except (ValueError, TypeError):
            continue  # a value this field cannot hold (a closed enum): leave it unset
    return message


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        op = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and data:
            del data[at]
        elif op == "cut":
            del data[at:]
    return bytes(data)


# -- calling ------------------------------------------------------------------------------------


def call(channel: grpc.Channel, method: MethodDescriptor, frames: list[bytes]) -> grpc.StatusCode:
    """One call with ``frames`` (a unary request is the first); the status it ended with."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    make = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, False): channel.stream_unary,
        (True, True): channel.stream_stream,
    }[(method.client_streaming, method.server_streaming)]
    stub: Any = make(path, request_serializer=identity, response_deserializer=identity)
    request: Any = iter(frames) if method.client_streaming else frames[0]
    timeout = STREAM_DEADLINE_S if method.server_streaming else UNARY_DEADLINE_S
    try:
        answer = stub(request, metadata=METADATA, timeout=timeout)
        if method.server_streaming:
            for _ in answer:
                if method.full_name in ENDLESS:
                    answer.cancel()
                    break
    except grpc.RpcError as e:
        code: grpc.StatusCode = e.code()
        return code
    return grpc.StatusCode.OK


class Fuzzer:
    """Calls one server's methods and keeps the codes they were answered with."""

    def __init__(self, endpoint: str, services: tuple[Any, ...], seeds: dict[str, Message]):
        self.methods = [m for service in services for m in service.methods]
        self.seeds = {
            m.full_name: seeds.get(m.name, _empty(m)).SerializeToString() for m in self.methods
        }
        self.codes: dict[grpc.StatusCode, int] = {}
        self.unknown: list[tuple[str, bytes]] = []
        self._endpoint = endpoint

    @contextmanager
    def channel(self) -> Iterator[grpc.Channel]:
        with grpc.insecure_channel(self._endpoint) as channel:
            self._channel = channel
            yield channel

    def __call__(self, method: MethodDescriptor, frames: list[bytes]) -> None:
        code = call(self._channel, method, frames)
        self.codes[code] = self.codes.get(code, 0) + 1
        if code == grpc.StatusCode.UNKNOWN:
            self.unknown.append((method.full_name, frames[0][:200]))
            # Raised inside the property: hypothesis then shrinks it to a minimal example.
            raise AssertionError(f"{method.full_name} answered UNKNOWN to {frames!r:.300}")

    def run(self) -> None:
        methods = st.sampled_from(self.methods)
        frames = st.lists(st.binary(max_size=256), min_size=1, max_size=3)

        def budget(examples: int) -> settings:
            return settings(
                max_examples=examples,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            )

        @budget(RANDOM_EXAMPLES)
        @given(methods, frames)
        def random_bytes(method: MethodDescriptor, raw: list[bytes]) -> None:
            self(method, raw)

        @budget(MUTATED_EXAMPLES)
        @given(methods.flatmap(lambda m: st.tuples(st.just(m), mutated(self.seeds[m.full_name]))))
        def mutated_requests(case: tuple[MethodDescriptor, bytes]) -> None:
            method, raw = case
            self(method, [self.seeds[method.full_name], raw])
            self(method, [raw])

        @budget(GENERATED_EXAMPLES)
        @given(
            methods.flatmap(
                lambda m: st.tuples(
                    st.just(m), st.lists(messages(m.input_type), min_size=1, max_size=2)
                )
            )
        )
        def generated(case: tuple[MethodDescriptor, list[Message]]) -> None:
            method, requests = case
            self(method, [r.SerializeToString() for r in requests])

        with self.channel():
            random_bytes()
            mutated_requests()
            generated()


def _empty(method: MethodDescriptor) -> Message:
    from google.protobuf import message_factory  # noqa: PLC0415 - imported where the fuzzer builds messages, as protobuf's own examples do

    return message_factory.GetMessageClass(method.input_type)()


def tracebacks_allowed(elapsed_s: float) -> int:
    """The guard's fault lines (the only ones with a traceback) within ``elapsed_s``."""
    return 1 + math.floor(elapsed_s / LOG_INTERVAL_S_DEFAULT)


def assert_fuzzed(fuzzer: Fuzzer, output: str, elapsed_s: float) -> None:
    assert not fuzzer.unknown, f"answered UNKNOWN: {fuzzer.unknown[:5]} (codes {fuzzer.codes})"
    assert sum(fuzzer.codes.values()) > RANDOM_EXAMPLES + MUTATED_EXAMPLES, fuzzer.codes
    assert grpc.StatusCode.INVALID_ARGUMENT in fuzzer.codes, "undecodable requests were sent"
    assert output.count("Traceback") <= tracebacks_allowed(elapsed_s), output[-20_000:]
    assert output.count("refused an undecodable request") <= tracebacks_allowed(elapsed_s)


# -- the servers --------------------------------------------------------------------------------


def assert_undecodable_refused(endpoint: str, services: tuple[Any, ...]) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        for method in (m for service in services for m in service.methods):
            for raw in filter(None, [NOT_PROTOBUF, bad_utf8(method.input_type)]):
                with pytest.raises(grpc.RpcError) as refused:
                    raw_call(channel, method, raw)
                error: Any = refused.value
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (method.name, raw)
                assert f"could not be decoded as {method.input_type.full_name}" in error.details()


def flow_control_off(endpoint: str) -> None:
    """What the fuzzed SetFlowControl calls may have turned on, off again."""
    with grpc.insecure_channel(endpoint) as channel:
        admin = broker_admin_pb2_grpc.BrokerAdminStub(channel)
        left = admin.SetFlowControl(apb.SetFlowControlRequest(on=False), timeout=UNARY_DEADLINE_S)
        for topic in left.topics:
            admin.SetFlowControl(
                apb.SetFlowControlRequest(on=False, topic=topic), timeout=UNARY_DEADLINE_S
            )


def test_fuzzing_every_rpc_of_the_broker(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--auto-create-topic", "--topic", f"{TOPIC}:4:MIXED")
    try:
        fuzzer = Fuzzer(broker.endpoint, BROKER_SERVICES, _broker_seeds())
        started_s = time.monotonic()
        fuzzer.run()
        elapsed_s = time.monotonic() - started_s
        assert broker.running()
        flow_control_off(broker.endpoint)
        with grpc.insecure_channel(broker.endpoint) as channel:
            answer = service_pb2_grpc.MessagingServiceStub(channel).SendMessage(
                spb.SendMessageRequest(messages=[_wire_message()]),
                metadata=METADATA,
                timeout=UNARY_DEADLINE_S,
            )
        assert answer.status.code == Code.OK, answer.status
    finally:
        broker.stop()
    output = broker.output()
    assert_fuzzed(fuzzer, output, elapsed_s)
    assert FAULT_LINE not in output, "no request made a broker handler fault"
    assert "Traceback" not in output


def test_fuzzing_every_rpc_of_the_sidecar(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", "--auto-create-topic")
    try:
        sidecar = SidecarProcess(broker.endpoint, "memory://")
        try:
            assert_undecodable_refused(sidecar.endpoint, SIDECAR_SERVICES)
            fuzzer = Fuzzer(sidecar.endpoint, SIDECAR_SERVICES, _sidecar_seeds())
            started_s = time.monotonic()
            fuzzer.run()
            elapsed_s = time.monotonic() - started_s
            assert sidecar.running()
            with sidecar.client() as stub:
                result = send(stub, api.Message(topic=TOPIC, body=b"after the fuzzing"))
            assert outcome(result) == "stored", result
        finally:
            sidecar.stop()
    finally:
        broker.stop()
    assert_fuzzed(fuzzer, sidecar.output(), elapsed_s)
