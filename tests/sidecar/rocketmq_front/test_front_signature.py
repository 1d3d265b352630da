"""What the RocketMQ front verifies, and the rule for starting it, in-process: the shared
SignatureVerifier (rocketbox_api/signing.py), the apps' credentials file, and front_refusal.

Proves:
- a signature made as the official clients make it (either hex case) passes for its access key;
  no metadata, a malformed value, an unknown access key, a missing date and a wrong secret are
  each refused saying so, never showing a secret;
- the signed date is read exactly: 300 s either side of the clock passes, 301 s does not, a
  time-zone offset (a local time stamped Z) is not forgiven and the refusal says to run in UTC,
  a date not in the clients' form is refused; a remembered signature is still held to the clock,
  and no longer counts once its secret changed;
- the credentials file takes access_key=/secret_key= pairs, one per app, and refuses a lone key,
  a secret before its key, a key given twice, a key a signature cannot carry, an empty file,
  each naming the file and the line and never a secret;
- the rule: with a token and the front on, a front protected by neither credentials nor client
  certificates is refused in one sentence naming every way out, unless --rocketmq-front-insecure
  is given; mTLS protects both; nothing is asked of a sidecar whose API is open; the front's
  options without the front, and the insecure choice beside a check, are refused.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rocketbox_api.credentials import Credentials
from rocketbox_api.signing import (
    SignatureRefusedError,
    SignatureVerifier,
    authorization_value,
    signed_at_s,
)
from sidecar.security import SecurityConfigError, front_refusal, read_front_credentials

SECRETS = {"orders-app": b"orders-secret-key"}
NOW_S = 1_800_000_000
NOW_DATE = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(NOW_S))


def verifier(secrets: dict[str, bytes] = SECRETS, now_s: float = NOW_S) -> SignatureVerifier:
    return SignatureVerifier(secrets.get, now_s=lambda: now_s, clock_owner="the sidecar")


def date_at(s: int) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(s))


def signed(date: str, access_key: str = "orders-app", secret: bytes = SECRETS["orders-app"]) -> str:
    return authorization_value(access_key, secret, date)


def refusal(v: SignatureVerifier, authorization: str, date: str) -> str:
    with pytest.raises(SignatureRefusedError) as refused:
        v.access_key_of(authorization, date)
    text = str(refused.value)
    assert "orders-secret-key" not in text
    return text


def test_a_signature_of_a_known_access_key_passes_in_either_hex_case() -> None:
    v = verifier()
    assert v.access_key_of(signed(NOW_DATE), NOW_DATE) == "orders-app"
    head, _, hex_signature = signed(NOW_DATE).rpartition("=")
    assert v.access_key_of(f"{head}={hex_signature.upper()}", NOW_DATE) == "orders-app"


@pytest.mark.parametrize(
    ("authorization", "date", "words"),
    [
        ("", NOW_DATE, "no credentials: the request has no authorization metadata"),
        ("Bearer some-token-of-an-api", NOW_DATE, "the algorithm must be MQv2-HMAC-SHA1"),
        (signed(NOW_DATE, access_key=""), NOW_DATE, "Credential (the access key) is missing"),
        (signed(NOW_DATE, access_key="stranger"), NOW_DATE, "access key 'stranger' is unknown"),
        (signed(NOW_DATE), "", "no x-mq-date-time metadata"),
        (
            signed(NOW_DATE, secret=b"wrong"),
            NOW_DATE,
            "the signature of access key 'orders-app' does not match (a wrong secret key?)",
        ),
    ],
)
def test_each_bad_signature_is_refused_saying_why(
    authorization: str, date: str, words: str
) -> None:
    assert words in refusal(verifier(), authorization, date)


@pytest.mark.parametrize("off_s", [-300, 300, 0])
def test_a_date_within_the_skew_either_way_passes(off_s: int) -> None:
    date = date_at(NOW_S + off_s)
    assert verifier().access_key_of(signed(date), date) == "orders-app"


@pytest.mark.parametrize(
    ("off_s", "words"),
    [
        (-301, "is 301 s behind the sidecar's clock, more than the 300 s allowed"),
        (301, "is 301 s ahead of the sidecar's clock"),
        # A client two hours east of UTC stamping its local time with a Z.
        (7200, "run it with TZ=UTC"),
        (-900, "is 900 s behind"),
    ],
)
def test_a_date_past_the_skew_is_refused_with_no_offset_forgiven(off_s: int, words: str) -> None:
    date = date_at(NOW_S + off_s)
    assert words in refusal(verifier(), signed(date), date)


@pytest.mark.parametrize("date", ["2026-01-01T00:00:00Z", "20261301T000000Z", "2026111T1200Z"])
def test_a_date_not_in_the_clients_form_is_refused(date: str) -> None:
    assert signed_at_s(date) is None
    assert "is not yyyyMMdd'T'HHmmss'Z'" in refusal(verifier(), signed(date), date)


def test_a_remembered_signature_is_held_to_the_clock_and_to_its_secret() -> None:
    clock = [float(NOW_S)]
    secrets = dict(SECRETS)
    v = SignatureVerifier(secrets.get, now_s=lambda: clock[0])
    value = signed(NOW_DATE)
    assert v.access_key_of(value, NOW_DATE) == "orders-app"
    clock[0] += 301
    assert "301 s behind" in refusal(v, value, NOW_DATE)
    clock[0] = NOW_S
    secrets["orders-app"] = b"rotated-secret"
    assert "does not match" in refusal(v, value, NOW_DATE)


def test_the_credentials_file_holds_one_pair_per_app(tmp_path: Path) -> None:
    path = tmp_path / "front.credentials"
    path.write_text(
        "# the apps of this pod\n"
        "access_key=orders-app\nsecret_key=orders-secret-key\n\n"
        "access_key = billing-app\nsecret_key = billing=secret\n"
    )
    assert read_front_credentials(path) == (
        Credentials("orders-app", "orders-secret-key"),
        Credentials("billing-app", "billing=secret"),
    )
    assert "orders-secret-key" not in repr(read_front_credentials(path))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "the file is empty"),
        ("# nothing\n\n", "no access_key= and secret_key= pair in it"),
        ("access_key=a\n", "line 1: access key 'a' has no secret_key= line"),
        ("access_key=a\naccess_key=b\nsecret_key=s3cr3t-value\n", "line 2: access key 'a' has"),
        ("secret_key=s3cr3t-value\naccess_key=a\n", "line 1: secret_key= before its access_key="),
        (
            "access_key=a\nsecret_key=s3cr3t-value\naccess_key=a\nsecret_key=s3cr3t-value\n",
            "line 3: access key 'a' is given twice",
        ),
        ("access_key=a/b\nsecret_key=s3cr3t-value\n", "line 1: an access key is 1 to 128"),
        ("access_key=a\nsecret_key=\n", "line 2: the secret key is empty"),
        ("user=a\n", "line 1: expected access_key=... or secret_key=..."),
    ],
)
def test_a_bad_credentials_file_is_refused_naming_its_line(
    tmp_path: Path, text: str, words: str
) -> None:
    path = tmp_path / "front.credentials"
    path.write_text(text)
    with pytest.raises(SecurityConfigError) as refused:
        read_front_credentials(path)
    assert f"--front-credentials-file {path}" in str(refused.value)
    assert words in str(refused.value)
    assert "s3cr3t-value" not in str(refused.value)


def rule(**given: bool) -> str | None:
    fields = dict.fromkeys(
        ("front_on", "api_token", "client_ca", "front_credentials", "front_insecure"), False
    )
    return front_refusal(**{**fields, **given})


def test_a_token_with_an_unprotected_front_is_refused_in_one_sentence() -> None:
    refused = rule(front_on=True, api_token=True)
    assert refused is not None
    assert "\n" not in refused
    assert refused.count(". ") == 0
    assert refused.startswith("the sidecar's API requires a token but its RocketMQ front")
    for option in (
        "--front-credentials-file",
        "--tls-client-ca",
        "--rocketmq-listen off",
        "--rocketmq-front-insecure",
    ):
        assert option in refused


@pytest.mark.parametrize(
    "given",
    [
        {"front_on": True, "api_token": True, "front_credentials": True},
        {"front_on": True, "api_token": True, "client_ca": True},
        {"front_on": True, "client_ca": True},
        {"front_on": True, "api_token": True, "front_insecure": True},
        {"front_on": True},
        {"front_on": True, "front_credentials": True},
        {"api_token": True},
    ],
)
def test_a_protected_front_an_open_api_or_the_named_choice_starts(given: dict[str, bool]) -> None:
    assert rule(**given) is None


def test_the_fronts_options_need_the_front_and_the_insecure_choice_stands_alone() -> None:
    off = rule(front_credentials=True, front_insecure=True)
    assert off is not None
    assert (
        "--front-credentials-file and --rocketmq-front-insecure are for the RocketMQ front" in off
    )
    both = rule(front_on=True, front_insecure=True, client_ca=True)
    assert both is not None
    assert "--rocketmq-front-insecure says the RocketMQ front checks no credentials" in both
    assert "--tls-client-ca makes it check them" in both
