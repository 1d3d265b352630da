"""No secret leaks: one full run with every kind of secret rocketbox handles, and every output of it
grepped for each of them.

The run: a private Redis with a password (the outbox URL carries it); ``rocketbox broker --auth``
with its bootstrap admin from a file and Prometheus metrics; users made with ``rocketbox acl``
(secrets on standard input); a sidecar signing with its own credentials, requiring a bearer
token, writing an ack ledger and serving metrics; sends with the right token and refused ones
(a wrong token, a wrong secret through the official client, an unknown Redis password through
``rocketbox outbox``); ``--help`` of every command with every secret in the environment; the
reconciliation over the run's data (the outbox read through its URL).

The outputs: both servers' logs, every command's output and error, both metrics pages, every
refusal's message, ``--help`` texts, and the reconciliation's output and report files.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import click
import grpc
import pytest
from click.testing import CliRunner
from rocketmq import ClientConfiguration, Credentials, Producer

from chaos.processes import FAST_RESEND_ARGS, SIDECAR_METRICS_LINE, SIDECAR_READY_LINE
from rocketbox.cli import main
from rocketbox.envvars import commands_of
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_producer import message
from tests.rocketbox_process import REPO_ROOT, RocketboxProcess
from tests.services import free_port, start_private_redis

pytestmark = pytest.mark.slow

ADMIN = ("leak-admin", "Admin-Secret-1f2e3d4c5b")
APP = ("leak-app", "App-Secret-9a8b7c6d5e")
WRONG = "Wrong-Secret-0f1e2d3c4b"
TOKEN = "Bearer-Token-5a6b7c8d9e0f1a2b"
WRONG_TOKEN = "Wrong-Token-1b2c3d4e5f6a7b8c"
REDIS_PASSWORD = "Redis-Password-7e6d5c4b3a"
SECRETS = (ADMIN[1], APP[1], WRONG, TOKEN, WRONG_TOKEN, REDIS_PASSWORD)
RECONCILE_DEADLINE_S = 600.0
CALL_DEADLINE_S = 30.0


class Outputs:
    """Every text the run produced, by where it came from."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def add(self, where: str, text: str) -> None:
        self.texts[where] = self.texts.get(where, "") + text

    def leaks(self) -> list[str]:
        return [
            f"{where} shows secret #{SECRETS.index(secret)}"
            for where, text in self.texts.items()
            for secret in SECRETS
            if secret in text
        ]


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = start_private_redis(port, tmp_path, password=REDIS_PASSWORD)
    try:
        yield f"redis://:{REDIS_PASSWORD}@127.0.0.1:{port}/0?prefix=leak"
    finally:
        proc.terminate()
        proc.wait(timeout=CALL_DEADLINE_S)


def cli(outputs: Outputs, where: str, args: list[str], env: dict[str, str], stdin: str = "") -> int:
    result = CliRunner().invoke(main, args, env=env, input=stdin)
    outputs.add(where, result.output + (result.stderr if result.stderr_bytes else ""))
    outputs.add(where, repr(result.exception) if result.exception else "")
    return result.exit_code


def every_command(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in commands_of(group).items():
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from every_command(command, (*path, name))


def help_texts(outputs: Outputs, redis_url: str) -> None:
    """--help of every command, every secret in the environment it reads."""
    env = {
        "ROCKETBOX_SIDECAR_TOKEN": TOKEN,
        "ROCKETBOX_ACCESS_KEY": ADMIN[0],
        "ROCKETBOX_SECRET_KEY": ADMIN[1],
        "ROCKETBOX_AUTH_ADMIN_ACCESS_KEY": ADMIN[0],
        "ROCKETBOX_AUTH_ADMIN_SECRET_KEY": ADMIN[1],
        "ROCKETBOX_BROKER_ACCESS_KEY": APP[0],
        "ROCKETBOX_BROKER_SECRET_KEY": APP[1],
        "ROCKETBOX_OUTBOX": redis_url,
        "ROCKETBOX_SIDECAR_OUTBOX": redis_url,
        "ROCKETBOX_UP_OUTBOX": redis_url,
    }
    for path in [(), *every_command(main)]:
        cli(outputs, f"rocketbox {' '.join(path)} --help", [*path, "--help"], env)


def sends(outputs: Outputs, sidecar: RocketboxProcess, broker: BrokerProcess) -> None:
    with grpc.insecure_channel(sidecar.endpoint) as channel:
        stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
        request = api.SendRequest(message=api.Message(topic="Orders", body=b"with the token"))
        answer = stub.Send(
            request, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=CALL_DEADLINE_S
        )
        assert answer.result.WhichOneof("outcome") == "stored", answer
        with pytest.raises(grpc.RpcError) as refused:
            stub.Send(
                request,
                metadata=(("authorization", f"Bearer {WRONG_TOKEN}"),),
                timeout=CALL_DEADLINE_S,
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        outputs.add("the wrong token's refusal", str(refused.value.details()))
    producer = Producer(ClientConfiguration(broker.endpoint, Credentials(APP[0], WRONG)), ())
    producer.startup()
    try:
        with pytest.raises(Exception) as wrong_secret:  # noqa: PT011 - the client's own class
            producer.send(message("Orders", b"wrong secret"))
        outputs.add("the wrong secret's refusal", str(wrong_secret.value))
    finally:
        producer.shutdown()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
        text: str = page.read().decode()
        return text


def reconcile(outputs: Outputs, tmp_path: Path, redis_url: str, ledger: Path) -> None:
    out = tmp_path / "reconciliation"
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox", "reconcile", "--commitlog", str(tmp_path / "broker"),
         "--outbox", redis_url, "--acks", str(ledger), "--master", "local[1]", "--out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=RECONCILE_DEADLINE_S, check=False,
    )  # fmt: skip
    outputs.add("rocketbox reconcile", done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".html"):
            outputs.add(f"the report's {path.name}", path.read_text(errors="replace"))


def test_no_secret_in_any_output_of_a_full_run(tmp_path: Path, redis_url: str) -> None:
    outputs = Outputs()
    (tmp_path / "admin.credentials").write_text(f"access_key={ADMIN[0]}\nsecret_key={ADMIN[1]}\n")
    (tmp_path / "app.credentials").write_text(f"access_key={APP[0]}\nsecret_key={APP[1]}\n")
    (tmp_path / "token").write_text(TOKEN)
    ledger = tmp_path / "acks.jsonl"
    broker = BrokerProcess(tmp_path / "broker", "--auth", "--auth-admin-file",
                           str(tmp_path / "admin.credentials"), "--topic", "Orders:2",
                           metrics=True)  # fmt: skip
    sidecar: RocketboxProcess | None = None
    try:
        admin_env = {"ROCKETBOX_ACCESS_KEY": ADMIN[0], "ROCKETBOX_SECRET_KEY": ADMIN[1]}
        for args in (
            ["acl", "user", "create", APP[0], "--secret-file", "-"],
            ["acl", "grant", APP[0], "Topic:Orders", "--action", "PUB"],
            ["acl", "user", "list"],
            ["acl", "list"],
        ):
            code = cli(outputs, "rocketbox " + " ".join(args), [*args, "--broker",
                       broker.endpoint], admin_env, stdin=APP[1])  # fmt: skip
            assert code == 0, outputs.texts
        cli(outputs, "rocketbox acl (wrong secret)", ["acl", "list", "--broker", broker.endpoint],
            {**admin_env, "ROCKETBOX_SECRET_KEY": WRONG})  # fmt: skip
        sidecar = RocketboxProcess(
            "sidecar", SIDECAR_READY_LINE,
            ["sidecar", "--broker", broker.endpoint, "--outbox", redis_url,
             "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--broker-credentials-file", str(tmp_path / "app.credentials"),
             "--token-file", str(tmp_path / "token"), "--ack-ledger", str(ledger),
             *FAST_RESEND_ARGS],
            SIDECAR_METRICS_LINE,
        )  # fmt: skip
        sends(outputs, sidecar, broker)
        outputs.add("the broker's metrics", scrape(broker.metrics_port))
        outputs.add("the sidecar's metrics", scrape(sidecar.metrics_port))
        cli(outputs, "rocketbox outbox stats", ["outbox", "stats", "--outbox", redis_url], {})
        wrong_url = redis_url.replace(REDIS_PASSWORD, WRONG)
        cli(outputs, "rocketbox outbox stats (wrong password)",
            ["outbox", "stats", "--outbox", wrong_url], {})  # fmt: skip
    finally:
        if sidecar is not None:
            sidecar.stop()
            outputs.add("the sidecar's log", sidecar.output())
        broker.stop()
        outputs.add("the broker's log", broker.output())
    help_texts(outputs, redis_url)
    reconcile(outputs, tmp_path, redis_url, ledger)
    assert len(outputs.texts) > 20, sorted(outputs.texts)
    assert outputs.leaks() == []
