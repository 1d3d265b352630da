"""Node apps reach a sidecar whose security is on (certificates made for the test,
tests/certificates.py):

- the official Node client (rocketmq-client-nodejs, ``sslEnabled``) sends through the RocketMQ
  front over TLS, trusting the test CA through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (its only way:
  docs/rocketmq-protocol.md §9);
- a plain gRPC client (@grpc/grpc-js) of rocketbox.v1 over mTLS with the bearer token is STORED;
  without its certificate the connection is refused; without the token it is UNAUTHENTICATED.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.certificates import Certificates, make_certificates
from tests.node.node_script import run_node_script
from tests.node.test_node_client import node_executable
from tests.sidecar.sidecar_process import BROKER_ARGS, SidecarProcess, wait_stored

pytestmark = pytest.mark.slow

NODE_DIR = Path(__file__).resolve().parent
TOPIC = "NodeSecure"
TOKEN = "the-node-test-token-0123456789abc"
SCRIPT_DEADLINE_S = 90.0


@pytest.fixture(scope="module")
def node() -> str:
    return node_executable()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("broker"), *BROKER_ARGS) as broker:
        yield broker


def tls_args(certs: Certificates) -> tuple[str, ...]:
    return ("--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key))


def test_the_official_node_client_sends_through_the_front_over_tls(
    node: str, certs: Certificates, broker: BrokerProcess, tmp_path: Path
) -> None:
    args = (*tls_args(certs), "--rocketmq-listen", "127.0.0.1:0")
    with SidecarProcess(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", *args) as sidecar:
        stdout, report = run_node_script(
            [node, str(NODE_DIR / "send_count.mjs"), sidecar.rocketmq_endpoint, TOPIC, "2",
             "--ssl"],
            SCRIPT_DEADLINE_S,
            env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca)},
        )  # fmt: skip
        receipts = [json.loads(line) for line in stdout.splitlines()]
        assert len(receipts) == 2, report
        for receipt in receipts:
            wait_stored(broker.endpoint, receipt["messageId"])


def send_tls(
    node: str, endpoint: str, certs: Certificates, client_cert: bool, token: str | None
) -> dict[str, Any]:
    command = [node, str(NODE_DIR / "send_tls.mjs"), endpoint, TOPIC, str(certs.ca)]
    if client_cert:
        command += [str(certs.client.cert), str(certs.client.key)]
    env = {"ROCKETBOX_SIDECAR_TOKEN": token or ""}
    stdout, report = run_node_script(command, SCRIPT_DEADLINE_S, env=env)
    lines = stdout.splitlines()
    assert len(lines) == 1, report
    answer: dict[str, Any] = json.loads(lines[0])
    return answer


def test_a_grpc_js_client_over_mtls_with_the_token(
    node: str, certs: Certificates, broker: BrokerProcess, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = (*tls_args(certs), "--tls-client-ca", str(certs.ca), "--token-file", str(token_file))
    with SidecarProcess(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", *args) as sidecar:
        stored = send_tls(node, sidecar.endpoint, certs, client_cert=True, token=TOKEN)
        assert stored.get("outcome") == "stored", stored
        wait_stored(broker.endpoint, stored["messageId"])

        no_certificate = send_tls(node, sidecar.endpoint, certs, client_cert=False, token=TOKEN)
        assert no_certificate["error"]["codeName"] == "UNAVAILABLE", no_certificate

        no_token = send_tls(node, sidecar.endpoint, certs, client_cert=True, token=None)
        assert no_token["error"]["codeName"] == "UNAUTHENTICATED", no_token
        assert "token" in no_token["error"]["details"]
