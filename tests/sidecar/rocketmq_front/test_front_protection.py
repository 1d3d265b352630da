"""The RocketMQ front of a sidecar whose API is protected, with real broker and sidecar processes
and the official Python client. Proves:

- with a token and the apps' access keys (--front-credentials-file), a raw SendMessage with no
  credentials, an unknown access key, a wrong signature or a stale date is answered
  UNAUTHORIZED saying why, and nothing of it is stored or spooled; the official Producer with an
  app's credentials is stored, and a SimpleConsumer with them receives through the front (its
  calls forwarded as they came); the official Producer with a wrong secret is refused;
- with a token and mTLS (--tls-client-ca) the front starts without credentials: a caller with
  the CA's client certificate sends unsigned, one without a certificate is not served;
- `rocketbox sidecar` and `rocketbox up` with a token and an unprotected front refuse to start
  (exit 2) with one sentence naming the ways out; `rocketbox up` with a token and the apps'
  access keys starts, refuses an unsigned send and stores the official Producer's;
- --rocketmq-front-insecure starts that front, says so in a WARNING line, and it takes an
  unsigned send.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, service_pb2, service_pb2_grpc

from rocketbox_api.signing import authorization_value
from tests.broker.broker_process import SMALL_STORE_ARGS, BrokerProcess
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import message, producer
from tests.certificates import make_certificates
from tests.prometheus import sample, scrape
from tests.rocketbox_process import RocketboxProcess, rocketbox_cli, wait_until
from tests.sidecar.rocketmq_front.front_process import BROKER_FRONT_ARGS, DEADLINE_S, FrontSidecar
from tests.sidecar.rocketmq_front.front_send_process import raw_message, raw_metadata, raw_stub
from tests.sidecar.sidecar_process import (
    BROKER_ARGS,
    CALL_DEADLINE_S,
    ROCKETMQ_FRONT_LINE,
    stored_copies,
    wait_stored,
)

pytestmark = pytest.mark.slow

TOKEN = "the-sidecar-token-of-this-test-0123"
APP = ("orders-app", "orders-app-secret")
OTHER_APP = ("billing-app", "billing-app-secret")
TOPIC = "Orders"
SENDS = "rocketbox_sidecar_sends_total"
REFUSED = "the sidecar's API requires a token but its RocketMQ front (--rocketmq-listen)"
UP_READY_LINE = re.compile(r"^sidecar listening on [^\s]+:(\d+)")
UP_BROKER_LINE = re.compile(r"broker listening on [^\s]+:(\d+)")


def utc_date(offset_s: int = 0) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() + offset_s))


@dataclass
class Protected:
    broker: BrokerProcess
    sidecar: FrontSidecar

    def sends(self) -> float:
        return sample(scrape(self.sidecar.metrics_port), SENDS)


def security_files(directory: Path) -> tuple[Path, Path]:
    token = directory / "token"
    token.write_text(f"{TOKEN}\n")
    credentials = directory / "front.credentials"
    credentials.write_text(
        f"access_key={APP[0]}\nsecret_key={APP[1]}\n"
        f"access_key={OTHER_APP[0]}\nsecret_key={OTHER_APP[1]}\n"
    )
    return token, credentials


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Protected]:
    data = tmp_path_factory.mktemp("protected")
    token, credentials = security_files(data)
    with BrokerProcess(data / "broker", *BROKER_FRONT_ARGS) as broker:
        args = ("--token-file", str(token), "--front-credentials-file", str(credentials))
        sidecar = FrontSidecar(broker.endpoint, f"rocksdb://{data / 'outbox'}", *args)
        try:
            yield Protected(broker, sidecar)
        finally:
            sidecar.stop()


def raw_send(
    stub: service_pb2_grpc.MessagingServiceStub,
    message_id: str,
    signature: tuple[str, str] | None,
) -> service_pb2.SendMessageResponse:
    """One NORMAL message, with ``signature`` (authorization, date) or no credentials at all."""
    metadata = raw_metadata()
    if signature is not None:
        metadata += (("authorization", signature[0]), ("x-mq-date-time", signature[1]))
    response: service_pb2.SendMessageResponse = stub.SendMessage(
        service_pb2.SendMessageRequest(messages=[raw_message(TOPIC, message_id)]),
        timeout=CALL_DEADLINE_S,
        metadata=metadata,
    )
    return response


def signed(access_key: str, secret: str, date: str) -> tuple[str, str]:
    return authorization_value(access_key, secret.encode(), date), date


def test_unauthenticated_sends_are_refused_and_nothing_is_stored(protected: Protected) -> None:
    base = f"UNSIGNED-{time.time_ns()}"
    now = utc_date()
    cases = {
        "none": (None, "no credentials: the request has no authorization metadata"),
        "unknown": (signed("stranger", "any-secret", now), "access key 'stranger' is unknown"),
        "wrong": (
            signed(APP[0], "not-its-secret", now),
            f"the signature of access key '{APP[0]}' does not match",
        ),
        "stale": (signed(*APP, utc_date(-600)), "behind the sidecar's clock"),
    }
    sends_before = protected.sends()
    with raw_stub(protected.sidecar.front_endpoint) as stub:
        for name, (signature, words) in cases.items():
            response = raw_send(stub, f"{base}-{name}", signature)
            assert response.status.code == Code.UNAUTHORIZED, (name, response)
            assert "the sidecar's RocketMQ front refused the call" in response.status.message
            assert words in response.status.message, name
            assert APP[1] not in response.status.message
        # The same stub, signed: the refusals were the credentials', not the request's.
        good = raw_send(stub, f"{base}-signed", signed(*APP, utc_date()))
    assert good.status.code == Code.OK, good
    wait_stored(protected.broker.endpoint, f"{base}-signed")
    assert protected.sends() == sends_before + 1, "only the signed send reached the intake"
    for name in cases:
        assert stored_copies(protected.broker.endpoint, f"{base}-{name}") == [], name
    assert APP[1] not in protected.sidecar.output()


def test_the_official_client_with_an_apps_credentials_sends_and_consumes(
    protected: Protected,
) -> None:
    front = protected.sidecar.front_endpoint
    with producer(front, (TOPIC,), credentials=APP) as p:
        sent = {p.send(message(TOPIC, b"signed %d" % i)).message_id for i in range(3)}
    for message_id in sent:
        wait_stored(protected.broker.endpoint, message_id)
    # Forwarded calls (route, assignment, receive, ack) are verified and passed on as they came.
    with simple_consumer(front, "protected-readers", TOPIC, 2, credentials=OTHER_APP) as c:
        received = {m.message_id for m in receive_all(c, len(sent))}
    assert sent <= received


def test_the_official_client_with_a_wrong_secret_is_refused(
    protected: Protected, caplog: pytest.LogCaptureFixture
) -> None:
    sends_before = protected.sends()
    # Its first call, QueryRoute, is refused: the client logs the status and raises.
    with (
        producer(protected.sidecar.front_endpoint, (TOPIC,), credentials=(APP[0], "wrong")) as p,
        pytest.raises(Exception, match="route"),
    ):
        p.send(message(TOPIC, b"never stored"))
    assert f"{Code.UNAUTHORIZED}, the sidecar's RocketMQ front refused the call" in caplog.text
    assert protected.sends() == sends_before


def test_mtls_protects_the_front_without_credentials(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    token, _ = security_files(tmp_path)
    args = (
        "--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key),
        "--tls-client-ca", str(certs.ca), "--token-file", str(token),
    )  # fmt: skip
    with BrokerProcess(tmp_path / "broker", *BROKER_ARGS) as broker:
        sidecar = FrontSidecar(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", *args)
        try:
            front = sidecar.front_endpoint
            client = grpc.ssl_channel_credentials(
                certs.ca.read_bytes(), certs.client.key.read_bytes(), certs.client.cert.read_bytes()
            )
            with grpc.secure_channel(front, client) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                assert raw_send(stub, "MTLS-unsigned", None).status.code == Code.OK
            wait_stored(broker.endpoint, "MTLS-unsigned")
            anonymous = grpc.ssl_channel_credentials(certs.ca.read_bytes())
            with grpc.secure_channel(front, anonymous) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                with pytest.raises(grpc.RpcError) as refused:
                    raw_send(stub, "MTLS-anonymous", None)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            sidecar.stop()
        assert stored_copies(broker.endpoint, "MTLS-anonymous") == []


@pytest.mark.parametrize("command", ["sidecar", "up"])
def test_a_token_with_an_unprotected_front_refuses_to_start(tmp_path: Path, command: str) -> None:
    token, _ = security_files(tmp_path)
    if command == "sidecar":
        args = ("sidecar", "--broker", "127.0.0.1:1", "--outbox", "memory://",
                "--listen", "127.0.0.1:0", "--rocketmq-listen", "127.0.0.1:0")  # fmt: skip
    else:  # the front is on by default
        args = ("up", "--data-dir", str(tmp_path / "up"), "--broker-listen", "127.0.0.1:0",
                "--sidecar-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")  # fmt: skip
    done = rocketbox_cli(*args, "--token-file", str(token))
    assert done.returncode == 2, done.stdout + done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert REFUSED in error
    assert error.count(": ") == 2, "one sentence: 'Error: ' and the one colon before the ways out"
    for option in ("--front-credentials-file", "--tls-client-ca", "--rocketmq-front-insecure"):
        assert option in error
    assert not (tmp_path / "up").exists(), "nothing was started"


def test_up_with_a_token_and_the_apps_keys_serves_a_protected_front(tmp_path: Path) -> None:
    token, credentials = security_files(tmp_path)
    up = RocketboxProcess(
        "rocketbox up",
        UP_READY_LINE,
        ["up", "--data-dir", str(tmp_path / "up"), "--broker-listen", "127.0.0.1:0",
         "--sidecar-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
         "--rocketmq-listen", "127.0.0.1:0", "--token-file", str(token),
         "--front-credentials-file", str(credentials), *SMALL_STORE_ARGS],
    )  # fmt: skip
    try:
        [front_port] = [m.group(1) for m in map(ROCKETMQ_FRONT_LINE.search, up.lines) if m]
        # The broker's line follows the sidecar's.
        wait_until(lambda: UP_BROKER_LINE.search(up.output()), DEADLINE_S, "up's broker line")
        [broker_port] = UP_BROKER_LINE.findall(up.output())
        front, broker = f"127.0.0.1:{front_port}", f"127.0.0.1:{broker_port}"
        with raw_stub(front) as stub:
            assert raw_send(stub, "UP-unsigned", None).status.code == Code.UNAUTHORIZED
        with producer(front, (TOPIC,), credentials=APP) as p:
            message_id = p.send(message(TOPIC, b"through up's front")).message_id
        wait_stored(broker, message_id)
        assert stored_copies(broker, "UP-unsigned") == []
    finally:
        up.stop()


def test_the_insecure_front_chosen_by_name_starts_warns_and_takes_unsigned_sends(
    tmp_path: Path,
) -> None:
    token, _ = security_files(tmp_path)
    args = ("--token-file", str(token), "--rocketmq-front-insecure")
    with BrokerProcess(tmp_path / "broker", *BROKER_ARGS) as broker:
        sidecar = FrontSidecar(broker.endpoint, "memory://", *args)
        try:
            with raw_stub(sidecar.front_endpoint) as stub:
                assert raw_send(stub, "INSECURE-unsigned", None).status.code == Code.OK
            wait_stored(broker.endpoint, "INSECURE-unsigned")
        finally:
            sidecar.stop()
    warnings = [
        line
        for line in sidecar.lines
        if " WARNING " in line and "the RocketMQ front checks no credentials" in line
    ]
    assert len(warnings) == 1, sidecar.output()
    assert "--rocketmq-front-insecure" in warnings[0]
