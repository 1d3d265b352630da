"""The stand-in answers as an Apache RocketMQ 5 proxy does, so that what rocketbox does against
it is what it would do against a real cluster. Proves, against the stand-in's own process:

- QueryRoute: two brokers (broker-a, broker-b) of the topic's queues, READ_WRITE, broker id 0,
  each at the host the client asked and the stand-in's port, accepting the topic's type; an
  unknown topic is TOPIC_NOT_FOUND;
- SendMessage picks the queue itself (the addressed one is ignored): a round robin over both
  brokers, a message group always on one queue, a request's messages together at consecutive
  offsets; each entry OK with the message id and the queue offset stored;
- refusals as the proxy words them, nothing stored: unknown topic, empty and too large bodies,
  a message type the topic does not take, no message id, a system property key, no client id;
  flow control answers TOO_MANY_REQUESTS until switched off;
- only the public MessagingService is served: EndTransaction, QueryAssignment, PullMessage and
  the rest, rocketbox's BrokerAdmin (GetMessage) and server reflection are UNIMPLEMENTED;
- Telemetry answers the official producer's Settings with the proxy's values, the official
  producer and SimpleConsumer send and consume through it (MD5 digests, receipt handles), and
  ReceiveMessage streams as the proxy's writer does: status, messages, delivery timestamp;
  nothing: MESSAGE_NOT_FOUND; before the client's Settings: INTERNAL_SERVER_ERROR; a deadline
  too short to poll: ILLEGAL_POLLING_TIME;
- receipt handles: ChangeInvisibleDuration gives a new one and the old is invalid; a group the
  stand-in must know first is CONSUMER_GROUP_NOT_FOUND;
- SIGKILL and restart keep every answered message and the port.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from rocketmq import Message
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from tests.rocketmq_proxy import RocketMQProxy, rocketmq_proxy
from tests.rocketmq_proxy.wire import (
    CALL_DEADLINE_S,
    METADATA,
    consume,
    consumer_settings,
    producer,
    raw_message,
    receive,
    send,
    simple_consumer,
    stub,
    telemetry,
)

pytestmark = pytest.mark.slow

QUEUES = 3
TOPICS = ["Orders", f"Fifo:FIFO:{QUEUES}", f"Plain:NORMAL:{QUEUES}", "Mixed:MIXED"]
BODY_BYTES_MAX = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocketMQProxy]:
    with rocketmq_proxy(tmp_path_factory.mktemp("proxy"), TOPICS) as p:
        yield p


def message_id(n: int) -> str:
    return f"01AABBCCDDEEFF0000{n:016X}"


def test_the_route_is_two_brokers_of_the_topics_queues_at_the_proxys_address(
    proxy: RocketMQProxy,
) -> None:
    asked = definition_pb2.Endpoints(
        scheme=definition_pb2.IPv4, addresses=[definition_pb2.Address(host="127.0.0.1", port=1)]
    )
    with stub(proxy.endpoint) as s:
        route = s.QueryRoute(
            service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name="Fifo"), endpoints=asked
            ),
            timeout=CALL_DEADLINE_S,
            metadata=METADATA,
        )
        missing = s.QueryRoute(
            service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="Nowhere")),
            timeout=CALL_DEADLINE_S,
            metadata=METADATA,
        )
    assert route.status.code == Code.OK
    queues = {(q.broker.name, q.id) for q in route.message_queues}
    assert queues == {(b, i) for b in ("broker-a", "broker-b") for i in range(QUEUES)}
    for q in route.message_queues:
        assert q.permission == definition_pb2.READ_WRITE
        assert q.broker.id == 0
        assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [
            ("127.0.0.1", proxy.port)
        ]
        assert list(q.accept_message_types) == [definition_pb2.FIFO]
    assert missing.status.code == Code.TOPIC_NOT_FOUND
    assert not missing.message_queues


def test_the_proxy_picks_the_queue_not_the_one_the_client_addressed(proxy: RocketMQProxy) -> None:
    ids = [message_id(100 + n) for n in range(2 * 2 * QUEUES)]
    answers = [send(proxy.endpoint, raw_message("Plain", i, queue_id=2)) for i in ids]
    stored = {m.message_id: m for m in proxy.stored("Plain")}
    for i, answer in zip(ids, answers, strict=True):
        [entry] = answer.entries
        assert (answer.status.code, entry.status.code) == (Code.OK, Code.OK)
        assert entry.message_id == i
        assert entry.offset == stored[i].queue_offset
        assert entry.transaction_id == ""
    # A round robin over both brokers' queues: each queue twice, whatever was addressed.
    places = [(stored[i].broker_name, stored[i].queue_id) for i in ids]
    assert sorted(set(places)) == [(b, q) for b in ("broker-a", "broker-b") for q in range(QUEUES)]
    assert all(places.count(p) == 2 for p in places)


def test_a_message_group_stays_on_one_queue_and_a_request_on_one_queue(
    proxy: RocketMQProxy,
) -> None:
    grouped = [message_id(200 + n) for n in range(5)]
    for n, i in enumerate(grouped):
        m = raw_message("Fifo", i, queue_id=n, message_group="order-7")
        m.system_properties.message_type = definition_pb2.FIFO
        assert send(proxy.endpoint, m).status.code == Code.OK
    batch = [message_id(300 + n) for n in range(4)]
    answer = send(proxy.endpoint, *(raw_message("Plain", i) for i in batch))
    assert answer.status.code == Code.OK
    assert [e.message_id for e in answer.entries] == batch
    by_id = {m.message_id: m for m in proxy.stored()}
    assert len({(by_id[i].broker_name, by_id[i].queue_id) for i in grouped}) == 1
    offsets = [by_id[i].queue_offset for i in grouped]
    assert offsets == list(range(offsets[0], offsets[0] + len(grouped)))
    assert len({(by_id[i].broker_name, by_id[i].queue_id) for i in batch}) == 1
    assert [e.offset for e in answer.entries] == [by_id[i].queue_offset for i in batch]
    assert [by_id[i].queue_offset for i in batch] == list(
        range(by_id[batch[0]].queue_offset, by_id[batch[0]].queue_offset + len(batch))
    )


@pytest.mark.parametrize(
    ("build", "code"),
    [
        (lambda i: raw_message("Nowhere", i), Code.TOPIC_NOT_FOUND),
        (lambda i: raw_message("Plain", i, body=b""), Code.MESSAGE_BODY_EMPTY),
        (
            lambda i: raw_message("Plain", i, body=b"x" * (BODY_BYTES_MAX + 1)),
            Code.MESSAGE_BODY_TOO_LARGE,
        ),
        (
            lambda i: raw_message("Plain", i, message_group="g"),
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (lambda i: raw_message("Plain", ""), Code.ILLEGAL_MESSAGE_ID),
        (lambda i: raw_message("Plain", i, tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
        (lambda i: raw_message("bad topic", i), Code.ILLEGAL_TOPIC),
    ],
    ids=["unknown-topic", "empty", "too-large", "type", "no-id", "tag", "topic-name"],
)
def test_a_refused_send_names_the_rule_and_stores_nothing(
    proxy: RocketMQProxy, build: object, code: int
) -> None:
    before = len(proxy.stored())
    m = build(message_id(400 + code % 100))  # type: ignore[operator]  # the lambdas above
    answer = send(proxy.endpoint, m)
    assert answer.status.code == code, answer.status
    assert not answer.entries
    assert len(proxy.stored()) == before


def test_a_reserved_property_key_and_a_missing_client_id_are_refused(
    proxy: RocketMQProxy,
) -> None:
    m = raw_message("Plain", message_id(500))
    m.user_properties["UNIQ_KEY"] = "mine"
    assert send(proxy.endpoint, m).status.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    with stub(proxy.endpoint) as s:
        answer = s.SendMessage(
            service_pb2.SendMessageRequest(messages=[raw_message("Plain", message_id(501))]),
            timeout=CALL_DEADLINE_S,
        )
    assert answer.status.code == Code.CLIENT_ID_REQUIRED
    assert message_id(501) not in {m.message_id for m in proxy.stored()}


def test_flow_control_answers_too_many_requests_until_switched_off(proxy: RocketMQProxy) -> None:
    proxy.set_flow_control(True)
    try:
        throttled = send(proxy.endpoint, raw_message("Plain", message_id(600)))
    finally:
        proxy.set_flow_control(False)
    assert throttled.status.code == Code.TOO_MANY_REQUESTS
    assert "system busy" in throttled.status.message
    assert send(proxy.endpoint, raw_message("Plain", message_id(601))).status.code == Code.OK
    ids = {m.message_id for m in proxy.stored("Plain")}
    assert message_id(600) not in ids
    assert message_id(601) in ids


def test_only_the_public_messaging_rpcs_are_served(proxy: RocketMQProxy) -> None:
    unserved = {
        "EndTransaction": service_pb2.EndTransactionRequest(),
        "QueryAssignment": service_pb2.QueryAssignmentRequest(),
        "ForwardMessageToDeadLetterQueue": service_pb2.ForwardMessageToDeadLetterQueueRequest(),
        "RecallMessage": service_pb2.RecallMessageRequest(),
        "UpdateOffset": service_pb2.UpdateOffsetRequest(),
    }
    with grpc.insecure_channel(proxy.endpoint) as channel:
        s = service_pb2_grpc.MessagingServiceStub(channel)
        for name, request in unserved.items():
            with pytest.raises(grpc.RpcError) as raised:
                getattr(s, name)(request, timeout=CALL_DEADLINE_S, metadata=METADATA)
            assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED, name
        with pytest.raises(grpc.RpcError) as pulled:
            list(s.PullMessage(service_pb2.PullMessageRequest(), timeout=CALL_DEADLINE_S))
        assert pulled.value.code() == grpc.StatusCode.UNIMPLEMENTED
        admin = broker_admin_pb2_grpc.BrokerAdminStub(channel)
        with pytest.raises(grpc.RpcError) as lookup:
            admin.GetMessage(
                broker_admin_pb2.GetMessageRequest(message_id=message_id(100)),
                timeout=CALL_DEADLINE_S,
            )
        assert lookup.value.code() == grpc.StatusCode.UNIMPLEMENTED
        reflection: Any = reflection_pb2_grpc.ServerReflectionStub(channel)
        with pytest.raises(grpc.RpcError) as reflected:
            list(
                reflection.ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                    timeout=CALL_DEADLINE_S,
                )
            )
        assert reflected.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_telemetry_answers_a_producer_with_the_proxys_settings(proxy: RocketMQProxy) -> None:
    settings = definition_pb2.Settings(client_type=definition_pb2.PRODUCER)
    settings.publishing.topics.add(name="Plain")
    settings.publishing.max_body_size = 128 * 1024 * 1024
    with telemetry(proxy.endpoint, settings) as reply:
        assert reply.status.code == Code.OK
        assert reply.WhichOneof("command") == "settings"
        merged = reply.settings
        assert merged.publishing.max_body_size == BODY_BYTES_MAX
        assert merged.publishing.validate_message_type
        assert [t.name for t in merged.publishing.topics] == ["Plain"]
        assert merged.backoff_policy.max_attempts == 3
        assert merged.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
        assert not merged.metric.on


def test_the_official_client_sends_and_consumes_through_it(proxy: RocketMQProxy) -> None:
    with producer(proxy.endpoint, ("Orders",)) as p:
        receipts = []
        for n in range(3):
            m = Message()
            m.topic = "Orders"
            m.body = f"order {n}".encode()
            m.tag = "Created"
            m.keys = f"order-{n}"
            receipts.append(p.send(m))
    stored = {m.message_id: m for m in proxy.stored("Orders")}
    for r in receipts:
        assert r.offset == stored[r.message_id].queue_offset
    with simple_consumer(proxy.endpoint, "official", "Orders") as c:
        got = consume(c, len(receipts))
    assert sorted(m.message_id for m in got) == sorted(r.message_id for r in receipts)
    for m in got:
        assert not m.corrupted
        assert m.tag == "Created"
        assert m.delivery_attempt == 1
    assert len(proxy.acked("official")) == len(receipts)


def receive_request(group: str, topic: str) -> service_pb2.ReceiveMessageRequest:
    request = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group),
        message_queue=definition_pb2.MessageQueue(
            topic=definition_pb2.Resource(name=topic),
            broker=definition_pb2.Broker(name="broker-a"),
        ),
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.TAG, expression="*"),
        batch_size=32,
    )
    request.invisible_duration.seconds = 30
    request.long_polling_timeout.seconds = 5
    return request


def test_receive_streams_status_messages_and_a_timestamp(proxy: RocketMQProxy) -> None:
    ids = [message_id(700 + n) for n in range(4)]
    answer = send(proxy.endpoint, *(raw_message("Mixed", i) for i in ids))
    broker = {m.message_id: m.broker_name for m in proxy.stored("Mixed")}[ids[0]]
    request = receive_request("shape", "Mixed")
    request.message_queue.broker.name = broker
    with telemetry(proxy.endpoint, consumer_settings("shape", "Mixed")) as reply:
        assert reply.status.code == Code.OK
        assert reply.settings.subscription.receive_batch_size == 32
        assert reply.settings.backoff_policy.max_attempts == 17
        frames = receive(proxy.endpoint, request)
        empty = receive(proxy.endpoint, request)
    kinds = [f.WhichOneof("content") for f in frames]
    assert kinds == ["status", "message", "message", "message", "message", "delivery_timestamp"]
    assert frames[0].status.code == Code.OK
    messages = [f.message for f in frames[1:-1]]
    assert [m.system_properties.message_id for m in messages] == ids
    for m, entry in zip(messages, answer.entries, strict=True):
        system = m.system_properties
        assert system.queue_offset == entry.offset
        assert system.body_encoding == definition_pb2.IDENTITY
        assert system.body_digest.type == definition_pb2.MD5
        assert system.receipt_handle
        assert system.delivery_attempt == 1
    assert [f.WhichOneof("content") for f in empty] == ["status", "delivery_timestamp"]
    assert empty[0].status.code == Code.MESSAGE_NOT_FOUND


def test_receive_is_refused_before_settings_and_without_time_to_poll(proxy: RocketMQProxy) -> None:
    request = receive_request("early", "Mixed")
    before = receive(proxy.endpoint, request)
    assert [f.WhichOneof("content") for f in before] == ["status", "delivery_timestamp"]
    assert before[0].status.code == Code.INTERNAL_SERVER_ERROR
    request.long_polling_timeout.seconds = 10
    with telemetry(proxy.endpoint, consumer_settings("early", "Mixed")):
        short = receive(proxy.endpoint, request, timeout_s=3.0)
    assert short[0].status.code == Code.ILLEGAL_POLLING_TIME


def ack(endpoint: str, group: str, topic: str, handle: str) -> service_pb2.AckMessageResponse:
    with stub(endpoint) as s:
        return s.AckMessage(
            service_pb2.AckMessageRequest(
                group=definition_pb2.Resource(name=group),
                topic=definition_pb2.Resource(name=topic),
                entries=[service_pb2.AckMessageEntry(message_id="x", receipt_handle=handle)],
            ),
            timeout=CALL_DEADLINE_S,
            metadata=METADATA,
        )


def test_a_changed_invisible_duration_replaces_the_receipt_handle(proxy: RocketMQProxy) -> None:
    send(proxy.endpoint, raw_message("Orders", message_id(800)))
    group = "handles"
    with telemetry(proxy.endpoint, consumer_settings(group, "Orders")):
        found = []
        for broker in ("broker-a", "broker-b"):
            request = receive_request(group, "Orders")
            request.message_queue.broker.name = broker
            found += [f.message for f in receive(proxy.endpoint, request) if f.HasField("message")]
    [first] = [m for m in found if m.system_properties.message_id == message_id(800)]
    old = first.system_properties.receipt_handle
    with stub(proxy.endpoint) as s:
        changed = s.ChangeInvisibleDuration(
            service_pb2.ChangeInvisibleDurationRequest(
                group=definition_pb2.Resource(name=group),
                topic=definition_pb2.Resource(name="Orders"),
                receipt_handle=old,
                message_id=message_id(800),
                invisible_duration=Duration(seconds=30),
            ),
            timeout=CALL_DEADLINE_S,
            metadata=METADATA,
        )
    assert changed.status.code == Code.OK
    assert changed.receipt_handle not in ("", old)
    assert ack(proxy.endpoint, group, "Orders", old).status.code == Code.INVALID_RECEIPT_HANDLE
    assert (
        ack(proxy.endpoint, group, "Orders", "made-up").status.code == Code.INVALID_RECEIPT_HANDLE
    )
    assert ack(proxy.endpoint, group, "Orders", changed.receipt_handle).status.code == Code.OK


def test_a_group_it_must_know_first_is_consumer_group_not_found(tmp_path: Path) -> None:
    with rocketmq_proxy(tmp_path, ["Orders"], groups=["known"], auto_create_group=False) as p:
        with telemetry(p.endpoint, consumer_settings("unknown", "Orders")):
            unknown = receive(p.endpoint, receive_request("unknown", "Orders"))
        with telemetry(p.endpoint, consumer_settings("known", "Orders")):
            known = receive(p.endpoint, receive_request("known", "Orders"))
    assert unknown[0].status.code == Code.CONSUMER_GROUP_NOT_FOUND
    assert "unknown" in unknown[0].status.message
    assert known[0].status.code == Code.MESSAGE_NOT_FOUND


def test_sigkill_and_restart_keep_every_answered_message_and_the_port(tmp_path: Path) -> None:
    with rocketmq_proxy(tmp_path, ["Orders"]) as p:
        port = p.port
        answers = [send(p.endpoint, raw_message("Orders", message_id(900 + n))) for n in range(5)]
        assert {a.status.code for a in answers} == {Code.OK}
        p.kill()
        with pytest.raises(grpc.RpcError) as down:
            send(p.endpoint, raw_message("Orders", message_id(999)))
        assert down.value.code() == grpc.StatusCode.UNAVAILABLE
        p.start()
        assert p.port == port
        after = send(p.endpoint, raw_message("Orders", message_id(950)))
        stored = p.stored("Orders")
    assert [m.message_id for m in stored] == [message_id(900 + n) for n in range(5)] + [
        message_id(950)
    ]
    [entry] = after.entries
    # Offsets carry on where the killed process left them.
    assert entry.offset == stored[-1].queue_offset
    places = {(m.broker_name, m.queue_id, m.queue_offset) for m in stored}
    assert len(places) == len(stored)
