"""The broker's other edges: TLS, the standard gRPC health service, and multi-message
SendMessage requests on the raw protocol.

- With ``--tls-cert/--tls-key`` the official client connects with ``tls_enable=True`` (trusting
  the test's self-signed certificate through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, as
  docs/rocketmq-protocol.md §9 says) and a plaintext client cannot.
- ``grpc.health.v1.Health/Check`` answers SERVING for the server and the messaging service.
- A request with several messages gets one result entry each, with its own queue offset; a
  request with one bad message is refused whole with the message's code, and nothing of it is
  stored; an empty request is MESSAGE_CORRUPTED.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.broker.broker_process import REPO_ROOT, BrokerProcess
from tests.broker.grpc_service.test_producer import stored
from tests.grpc_health import HealthStub

pytestmark = pytest.mark.slow

CALL_DEADLINE_S = 10.0

SEND_ONE = textwrap.dedent(
    """
    import sys
    from rocketmq import ClientConfiguration, Credentials, Message, Producer
    endpoint, tls = sys.argv[1], sys.argv[2] == "tls"
    p = Producer(ClientConfiguration(endpoint, Credentials()), ("Secure",), tls_enable=tls)
    p.startup()
    try:
        m = Message()
        m.topic = "Secure"
        m.body = b"over tls"
        print("SENT", p.send(m).message_id, flush=True)
    except Exception as e:
        print("FAILED", type(e).__name__, e, flush=True)
    finally:
        p.shutdown()
    """
)


def make_certificate(directory: Path) -> tuple[Path, Path]:
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def client_send(endpoint: str, tls: bool, cert: Path) -> str:
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)}
    done = subprocess.run(
        [sys.executable, "-c", SEND_ONE, endpoint, "tls" if tls else "plain"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("SENT", "FAILED"))]
    assert lines, done.stdout + done.stderr
    return lines[-1]


def test_tls_broker_serves_a_tls_client_and_refuses_plaintext(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    data = tmp_path / "data"
    broker = BrokerProcess(
        data, "--topic", "Secure:2", "--tls-cert", str(cert), "--tls-key", str(key)
    )
    try:
        secure = client_send(broker.endpoint, tls=True, cert=cert)
        plain = client_send(broker.endpoint, tls=False, cert=cert)
    finally:
        broker.stop()
    assert secure.startswith("SENT"), secure
    assert plain.startswith("FAILED"), plain
    with stored(data) as store:
        assert store.look_message_by_id(secure.split()[1], "Secure") is not None


def test_health_service_answers_serving(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path)
    try:
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = HealthStub(channel)
            for service in ("", "apache.rocketmq.v2.MessagingService"):
                reply = stub.Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=CALL_DEADLINE_S
                )
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        broker.stop()


def test_a_dead_letter_queue_not_created_yet_is_topic_not_found(tmp_path: Path) -> None:
    """Found by the fuzzer: a consumer asking for %DLQ%<group> before anything was
    dead-lettered made the broker try to auto-create a system topic (a handler fault)."""
    broker = BrokerProcess(tmp_path, "--auto-create-topic")
    try:
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            reply = stub.QueryAssignment(
                spb.QueryAssignmentRequest(
                    topic=pb.Resource(name="%DLQ%NoSuchGroup"),
                    group=pb.Resource(name="NoSuchGroup"),
                ),
                metadata=(("x-mq-client-id", "edge-test"),),
                timeout=CALL_DEADLINE_S,
            )
        assert reply.status.code == Code.TOPIC_NOT_FOUND, reply.status
        assert "%DLQ%NoSuchGroup" in reply.status.message
    finally:
        broker.stop()
    assert "failed on a request" not in broker.output()


def wire_message(topic: str, body: bytes, **system: object) -> pb.Message:
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=pb.NORMAL)
    for name, value in system.items():
        setattr(sp, name, value)
    return pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=body)


def send(endpoint: str, messages: list[pb.Message]) -> spb.SendMessageResponse:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply: spb.SendMessageResponse = stub.SendMessage(
            spb.SendMessageRequest(messages=messages),
            metadata=(("x-mq-client-id", "edge-test"),),
            timeout=CALL_DEADLINE_S,
        )
        return reply


def test_multi_message_requests_get_one_entry_each_or_are_refused_whole(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Batch:1")
    try:
        good = [wire_message("Batch", f"m{i}".encode()) for i in range(3)]
        reply = send(broker.endpoint, good)
        assert reply.status.code == Code.OK
        assert [e.message_id for e in reply.entries] == [
            m.system_properties.message_id for m in good
        ]
        assert [e.offset for e in reply.entries] == [0, 1, 2]

        bad_batch = [wire_message("Batch", b"fine"), wire_message("Batch", b"bad", tag="a|b")]
        refused = send(broker.endpoint, bad_batch)
        assert refused.status.code == Code.ILLEGAL_MESSAGE_TAG
        assert "tag" in refused.status.message
        assert len(refused.entries) == 2

        assert send(broker.endpoint, []).status.code == Code.MESSAGE_CORRUPTED
        mixed = [wire_message("Batch", b"a"), wire_message("Other", b"b")]
        assert send(broker.endpoint, mixed).status.code == Code.MESSAGE_CORRUPTED
        empty_body = send(broker.endpoint, [wire_message("Batch", b"")])
        assert empty_body.status.code == Code.MESSAGE_BODY_EMPTY
    finally:
        broker.stop()
    with stored(tmp_path) as store:
        assert store.get_max_offset_in_queue("Batch", 0) == 3, "the refused batch left nothing"
