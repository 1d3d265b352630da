"""A real sidecar with its security on, reached by the rocketbox client library, the official
RocketMQ Python client, and a plain gRPC client; certificates made for the test (tests/
certificates.py). It proves:

- over mTLS with a token, the sync and the async client with the CA, their certificate and the
  token are STORED; without a client certificate, with one of another CA, or in plaintext the
  connection is refused; a missing or wrong token is UNAUTHENTICATED, naming no token; the
  outbox admin service asks for the token too; health answers without one, on the app port
  (over mTLS) and on the plaintext --health-listen port;
- the RocketMQ front over TLS: the official Python client, trusting the test CA, sends through it;
- the sidecar reaches a broker serving TLS with a private CA (--broker-tls-ca);
- a TLS key that is not the certificate's stops the start, naming --tls-key.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from rocketbox_api.v1 import outbox_admin_pb2, outbox_admin_pb2_grpc
from rocketbox_client import (
    AsyncClient,
    Client,
    Message,
    Stored,
    TlsConfig,
    UnauthenticatedError,
    UnavailableError,
)
from tests.broker.broker_process import BrokerProcess
from tests.certificates import Certificates, make_certificates
from tests.grpc_health import HealthStub
from tests.rocketbox_process import REPO_ROOT
from tests.sidecar.sidecar_process import BROKER_ARGS, SidecarProcess, wait_stored

pytestmark = pytest.mark.slow

TOKEN = "the-sidecar-token-of-this-test-0123"
TOPIC = "Secure"
CALL_TIMEOUT_S = 15.0
# Refusals are not retried for long: a refused handshake is UNAVAILABLE, which the client retries.
REFUSED_TIMEOUT_S = 3.0
SCRIPT_DEADLINE_S = 60.0


@dataclass
class Secured:
    certs: Certificates
    broker: BrokerProcess
    sidecar: SidecarProcess  # mTLS and a token, health on a plaintext port of its own

    @property
    def health_endpoint(self) -> str:
        for line in reversed(self.sidecar.lines):
            if line.startswith("sidecar health on "):
                return "127.0.0.1:" + line.split(":")[-1].strip()
        raise AssertionError(f"no health line:\n{self.sidecar.output()}")

    def tls(self, client: bool = True) -> TlsConfig:
        if not client:
            return TlsConfig.from_files(self.certs.ca)
        return TlsConfig.from_files(self.certs.ca, self.certs.client.cert, self.certs.client.key)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data = tmp_path_factory.mktemp("secured")
    certs = make_certificates(data / "certs")
    token_file = data / "token"
    token_file.write_text(f"{TOKEN}\n")
    with BrokerProcess(data / "broker", *BROKER_ARGS) as broker:
        args = (
            "--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key),
            "--tls-client-ca", str(certs.ca), "--token-file", str(token_file),
            "--health-listen", "127.0.0.1:0",
        )  # fmt: skip
        with SidecarProcess(broker.endpoint, f"rocksdb://{data / 'outbox'}", *args) as sidecar:
            yield Secured(certs, broker, sidecar)


def test_the_client_with_its_certificate_and_the_token_is_stored(secured: Secured) -> None:
    with Client(secured.sidecar.endpoint, tls=secured.tls(), token=TOKEN) as client:
        result = client.send(Message(TOPIC, b"over mTLS"), timeout_s=CALL_TIMEOUT_S)
    assert isinstance(result, Stored)
    wait_stored(secured.broker.endpoint, result.message_id)

    async def send_async() -> object:
        async with AsyncClient(secured.sidecar.endpoint, tls=secured.tls(), token=TOKEN) as c:
            return await c.send(Message(TOPIC, b"async over mTLS"), timeout_s=CALL_TIMEOUT_S)

    assert isinstance(asyncio.run(send_async()), Stored)


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate", "plaintext"])
def test_a_client_without_a_trusted_certificate_is_refused(secured: Secured, who: str) -> None:
    certs = secured.certs
    tls: TlsConfig | None = {
        "no certificate": secured.tls(client=False),
        "another CA's certificate": TlsConfig.from_files(
            certs.ca, certs.stranger.cert, certs.stranger.key
        ),
        "plaintext": None,
    }[who]
    with (
        Client(secured.sidecar.endpoint, tls=tls, token=TOKEN) as client,
        pytest.raises(UnavailableError),
    ):
        client.send(Message(TOPIC, b"refused"), timeout_s=REFUSED_TIMEOUT_S)


@pytest.mark.parametrize("token", [None, "a-wrong-token-of-enough-length"])
def test_a_missing_or_wrong_token_is_unauthenticated(secured: Secured, token: str | None) -> None:
    with (
        Client(secured.sidecar.endpoint, tls=secured.tls(), token=token) as client,
        pytest.raises(UnauthenticatedError) as refused,
    ):
        client.send(Message(TOPIC, b"no token"), timeout_s=CALL_TIMEOUT_S)
    assert "token" in str(refused.value)
    assert TOKEN not in str(refused.value)
    if token is not None:
        assert token not in str(refused.value)
    assert TOKEN not in secured.sidecar.output()


def _secure_channel(secured: Secured) -> grpc.Channel:
    certs = secured.certs
    return grpc.secure_channel(
        secured.sidecar.endpoint,
        grpc.ssl_channel_credentials(
            certs.ca.read_bytes(), certs.client.key.read_bytes(), certs.client.cert.read_bytes()
        ),
    )


def test_the_outbox_admin_service_asks_for_the_token_and_health_does_not(
    secured: Secured,
) -> None:
    with _secure_channel(secured) as channel:
        admin = outbox_admin_pb2_grpc.OutboxAdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            admin.Stats(outbox_admin_pb2.StatsRequest(), timeout=CALL_TIMEOUT_S)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        admin.Stats(
            outbox_admin_pb2.StatsRequest(),
            timeout=CALL_TIMEOUT_S,
            metadata=(("authorization", f"Bearer {TOKEN}"),),
        )
        health = HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(secured.health_endpoint) as plain:
        answer = HealthStub(plain).Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_the_rocketmq_front_over_tls_serves_the_official_python_client(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    with BrokerProcess(tmp_path / "broker", *BROKER_ARGS) as broker:
        args = (
            "--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key),
            "--rocketmq-listen", "127.0.0.1:0",
        )  # fmt: skip
        outbox = f"rocksdb://{tmp_path / 'outbox'}"
        with SidecarProcess(broker.endpoint, outbox, *args) as sidecar:
            done = subprocess.run(
                [sys.executable, "-m", "tests.sidecar.official_tls_send",
                 sidecar.rocketmq_endpoint, TOPIC],
                cwd=REPO_ROOT, capture_output=True, text=True, timeout=SCRIPT_DEADLINE_S,
                env={**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca)},
                check=False,
            )  # fmt: skip
            assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
            message_id = done.stdout.strip().splitlines()[-1]
            wait_stored(broker.endpoint, message_id)


def test_the_sidecar_verifies_a_broker_of_a_private_ca(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    broker_tls = ("--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key))
    with BrokerProcess(tmp_path / "broker", *BROKER_ARGS, *broker_tls) as broker:
        outbox = f"rocksdb://{tmp_path / 'outbox'}"
        with (
            SidecarProcess(broker.endpoint, outbox, "--broker-tls-ca", str(certs.ca)) as sidecar,
            Client(sidecar.endpoint) as client,
        ):
            result = client.send(Message(TOPIC, b"to a TLS broker"), timeout_s=CALL_TIMEOUT_S)
            assert isinstance(result, Stored)


def test_a_key_that_is_not_the_certificates_stops_the_start(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox", "sidecar", "--broker", "127.0.0.1:1",
         "--outbox", f"rocksdb://{tmp_path / 'outbox'}", "--listen", "127.0.0.1:0",
         "--tls-cert", str(certs.server.cert), "--tls-key", str(certs.client.key)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=SCRIPT_DEADLINE_S, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--tls-key" in done.stderr
    assert "not the key of the certificate" in done.stderr
    assert "PRIVATE KEY" not in done.stderr + done.stdout


def test_rocketbox_send_reads_the_ca_and_the_token_from_the_environment(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = ("--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key),
            "--token-file", str(token_file))  # fmt: skip
    with (
        BrokerProcess(tmp_path / "broker", *BROKER_ARGS) as broker,
        SidecarProcess(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", *args) as sidecar,
    ):
        env = {**os.environ, "ROCKETBOX_SIDECAR": sidecar.endpoint,
               "ROCKETBOX_SIDECAR_TLS_CA": str(certs.ca)}  # fmt: skip

        def send(token: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "rocketbox", "send", TOPIC, "from the CLI"],
                cwd=REPO_ROOT, capture_output=True, text=True, timeout=SCRIPT_DEADLINE_S,
                env={**env, "ROCKETBOX_SIDECAR_TOKEN": token}, check=False,
            )  # fmt: skip

        sent = send(TOKEN)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "STORED" in sent.stdout
        refused = send("")
        assert refused.returncode != 0
        assert "token" in refused.stdout + refused.stderr
