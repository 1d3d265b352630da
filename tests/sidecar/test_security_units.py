"""The sidecar's security in this process (sidecar/security.py, sidecar/channels.py,
rocketbox/sidecar_security_options.py). It proves:

- every request to the broker carries RocketMQ's signature of its date, which the broker's own
  recomputation (hmac) accepts, and the date it signs is the one sent;
- a broker answer UNAUTHORIZED or FORBIDDEN spools the message under that cause (not rejected,
  not retried at once), and the resend pool delivers it once the broker takes it again;
- TLS files that cannot be used stop the start with an error naming the option: missing, not
  PEM, a key that is not the certificate's; a client CA without a certificate is refused;
- the token comes from its file or ROCKETBOX_SIDECAR_TOKEN, too short or unusable ones are
  refused naming where they came from, and the CLI reads broker credentials from a file or the
  environment, naming the file or the variable when they are wrong;
- no secret shows in the repr of the config, the credentials or the TLS material, nor in --help.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from pathlib import Path

import pytest
from click.testing import CliRunner

from outbox import EntryState, SpoolCause
from rocketbox.cli import main
from rocketbox_api.credentials import Credentials
from rocketbox_api.signing import parse_authorization
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.intake import Spooled
from sidecar.producer import ProducerConfig
from sidecar.security import SecurityConfigError, ServerTls, read_token
from tests.certificates import make_certificates
from tests.sidecar.in_process import RETRY_TIMES_WHEN_SEND_FAILED, core, message, wait_for
from tests.sidecar.scripted_broker import Answer

SECRET = "s3cret-key-of-the-sidecar"
CREDENTIALS = Credentials("sidecar-app", SECRET)
TOKEN = "a-token-of-thirty-two-characters"


def test_every_request_carries_the_signature_of_its_date() -> None:
    async def run() -> None:
        async with core(pool_running=False, credentials=CREDENTIALS) as c:
            await c.intake.accept(message(1))
            await c.intake.accept(message(2))
            assert len(c.broker.metadata) >= 1
            for sent in c.broker.metadata:
                date = sent["x-mq-date-time"]
                authorization = parse_authorization(sent["authorization"])
                assert authorization.access_key == "sidecar-app"
                expected = hmac.new(SECRET.encode(), date.encode(), hashlib.sha1).hexdigest()
                assert sent["authorization"].endswith(f"Signature={expected}")
                assert authorization.matches(SECRET.encode(), date)

    asyncio.run(run())


def test_an_unsigned_sidecar_sends_no_authorization() -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            await c.intake.accept(message(1))
            assert "authorization" not in c.broker.metadata[0]

    asyncio.run(run())


@pytest.mark.parametrize(
    ("answer", "cause"),
    [(Answer.UNAUTHORIZED, SpoolCause.UNAUTHORIZED), (Answer.FORBIDDEN, SpoolCause.FORBIDDEN)],
)
def test_an_auth_refusal_spools_under_its_cause_and_drains_once_accepted(
    answer: Answer, cause: SpoolCause
) -> None:
    async def run() -> None:
        async with core(pool_running=False) as c:
            c.broker.answer_next(*[answer] * (1 + RETRY_TIMES_WHEN_SEND_FAILED))
            m = message(1)
            spooled = await c.intake.accept(m)
            assert isinstance(spooled, Spooled)
            assert spooled.entry.cause is cause
            assert spooled.entry.maybe_stored is False
            assert len(c.broker.requests) == 1, "not retried at once: the broker refused us"
            assert c.entry(m.message_id).last_error.startswith(cause.value)
        async with core(pool_running=True) as c:
            c.broker.answer_next(answer)  # still refused once, then fixed
            m = message(2)
            assert isinstance(await c.intake.accept(m), Spooled)
            await wait_for(lambda: c.entry(m.message_id).state is EntryState.DELIVERED, "the drain")
            assert c.broker.store_log == [m.message_id]

    asyncio.run(run())


def test_unusable_tls_files_are_named_by_their_option(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    with pytest.raises(SecurityConfigError, match=r"--tls-cert .*missing.pem"):
        ServerTls.read(tmp_path / "missing.pem", certs.server.key, None)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    with pytest.raises(SecurityConfigError, match=r"--tls-client-ca .*no PEM certificate"):
        ServerTls.read(certs.server.cert, certs.server.key, not_pem)
    with pytest.raises(SecurityConfigError, match=r"--tls-key .*not the key of the certificate"):
        ServerTls.read(certs.server.cert, certs.client.key, None)
    with pytest.raises(SecurityConfigError, match=r"--tls-key .*not an unencrypted PEM"):
        ServerTls.read(certs.server.cert, certs.server.cert, None)
    tls = ServerTls.read(certs.server.cert, certs.server.key, certs.ca)
    assert "PRIVATE" not in repr(tls)
    assert tls.client_ca is not None


def test_tls_options_go_together() -> None:
    producer = ProducerConfig(access_points=(Endpoint("127.0.0.1", 1),))
    with pytest.raises(ValueError, match="go together"):
        SidecarConfig(producer, "memory://", tls_cert_file=Path("c.pem"))
    with pytest.raises(ValueError, match="needs tls_cert_file"):
        SidecarConfig(producer, "memory://", tls_client_ca_file=Path("ca.pem"))
    with pytest.raises(ValueError, match="--broker-tls"):
        ProducerConfig(access_points=(Endpoint("127.0.0.1", 1),), tls_ca_file=Path("ca.pem"))


def test_the_token_comes_from_its_file_or_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    assert read_token(token_file, {"ROCKETBOX_SIDECAR_TOKEN": "ignored-when-a-file-is-given"}) \
        == TOKEN  # fmt: skip
    assert read_token(None, {"ROCKETBOX_SIDECAR_TOKEN": TOKEN}) == TOKEN
    assert read_token(None, {}) is None
    with pytest.raises(SecurityConfigError, match=r"ROCKETBOX_SIDECAR_TOKEN: .*at least 16"):
        read_token(None, {"ROCKETBOX_SIDECAR_TOKEN": "short"})
    token_file.write_text("tökën-not-ascii-but-long-enough\n")
    with pytest.raises(SecurityConfigError, match=rf"--token-file {token_file}: .*ASCII"):
        read_token(token_file, {})
    with pytest.raises(SecurityConfigError, match=r"--token-file .*nothing"):
        read_token(tmp_path / "nothing", {})


def test_no_secret_in_reprs() -> None:
    config = SidecarConfig(
        ProducerConfig(access_points=(Endpoint("127.0.0.1", 1),), credentials=CREDENTIALS),
        "memory://",
        api_token=TOKEN,
    )
    assert TOKEN not in repr(config)
    assert SECRET not in repr(config)
    assert "sidecar-app" in repr(config), "the access key is no secret: it names the user"


def sidecar_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``rocketbox sidecar`` refusing its options before anything starts; its output."""
    result = CliRunner().invoke(
        main,
        ["sidecar", "--broker", "127.0.0.1:1", "--outbox", f"rocksdb://{tmp_path / 'o'}", *args],
        env=env,
    )
    assert result.exit_code == 2, result.output
    return result.output


def test_the_cli_names_the_credentials_file_or_variable(tmp_path: Path) -> None:
    bad = tmp_path / "broker-credentials"
    bad.write_text(f"access_key=sidecar-app\nsecret={SECRET}\n")
    said = sidecar_cli(tmp_path, "--broker-credentials-file", str(bad))
    assert str(bad) in said
    assert "line 2" in said
    assert SECRET not in said
    said = sidecar_cli(tmp_path, env={"ROCKETBOX_BROKER_ACCESS_KEY": "sidecar-app"})
    assert "ROCKETBOX_BROKER_SECRET_KEY is not set" in said
    said = sidecar_cli(tmp_path, env={"ROCKETBOX_SIDECAR_TOKEN": "short"})
    assert "ROCKETBOX_SIDECAR_TOKEN" in said
    said = sidecar_cli(tmp_path, "--tls-cert", str(tmp_path / "none.pem"))
    assert "--tls-cert" in said


def test_help_shows_no_secret_value() -> None:
    env = {"ROCKETBOX_SIDECAR_TOKEN": TOKEN, "ROCKETBOX_BROKER_SECRET_KEY": SECRET}
    result = CliRunner().invoke(main, ["sidecar", "--help"], env=env)
    assert result.exit_code == 0
    assert TOKEN not in result.output
    assert SECRET not in result.output
    for option in ("--tls-cert", "--tls-client-ca", "--token-file", "--broker-credentials-file"):
        assert option in result.output
