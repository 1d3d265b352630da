"""Request authentication (broker/auth/authenticator.py) against signatures made by the official
Python client's own signing code: a good signature passes in either hex case; a wrong secret, an
unknown or missing access key, a malformed header, a missing date and a date beyond the skew
bound are refused, each saying why and never quoting the secret; a client stamping local time
in another time zone passes; a user changed since a signature was verified is checked afresh."""

from __future__ import annotations

import calendar
import time

import pytest
from rocketmq.v5.util.signature import Signature

from broker.auth.acl import User
from broker.auth.authenticator import Authenticator
from broker.auth.errors import UnauthenticatedError

NOW_S = calendar.timegm((2026, 11, 28, 12, 0, 0, 0, 0, 0))
SECRET = "app-secret-key"
USERS = {"app": User("app", SECRET.encode())}


def date_at(offset_s: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(NOW_S + offset_s))


def signed(date: str, secret: str = SECRET, access_key: str = "app") -> dict[str, str]:
    signature = Signature.sign(secret, date)
    return {
        "x-mq-date-time": date,
        "authorization": f"MQv2-HMAC-SHA1 Credential={access_key}, "
        f"SignedHeaders=x-mq-date-time, Signature={signature}",
    }


def authenticator(users: dict[str, User] | None = None, skew_s: int = 300) -> Authenticator:
    return Authenticator(USERS if users is None else users, skew_s, now_s=lambda: NOW_S)


def test_a_good_signature_passes_in_either_hex_case() -> None:
    metadata = signed(date_at(0))
    assert authenticator().user_of(metadata).access_key == "app"
    upper = dict(metadata, authorization=metadata["authorization"].replace(
        metadata["authorization"].rsplit("=", 1)[1],
        metadata["authorization"].rsplit("=", 1)[1].upper()))  # fmt: skip
    assert authenticator().user_of(upper).access_key == "app"


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ({}, "no credentials"),
        (signed(date_at(0), secret="wrong-secret"), "does not match"),
        (signed(date_at(0), access_key="ghost"), "'ghost' is unknown"),
        ({"authorization": "Basic abc", "x-mq-date-time": date_at(0)}, "algorithm"),
        (
            {"authorization": signed(date_at(0))["authorization"]},
            "no x-mq-date-time",
        ),
        (
            {
                "authorization": "MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, "
                "Signature=zz",
                "x-mq-date-time": date_at(0),
            },
            "not hexadecimal",
        ),
        (signed(date_at(420)), "more than 300 s"),
        (signed(date_at(-20 * 3600)), "more than 300 s"),
    ],
)
def test_a_bad_request_is_refused_saying_why(metadata: dict[str, str], why: str) -> None:
    with pytest.raises(UnauthenticatedError, match=why) as refused:
        authenticator().user_of(metadata)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("zone_offset_s", [5.5 * 3600, -8 * 3600, 14 * 3600, 45 * 60])
def test_local_time_stamped_z_passes_within_the_skew(zone_offset_s: float) -> None:
    assert authenticator().user_of(signed(date_at(zone_offset_s + 120))).access_key == "app"
    with pytest.raises(UnauthenticatedError):
        authenticator().user_of(signed(date_at(zone_offset_s + 400)))


def test_a_changed_secret_is_checked_afresh_even_for_a_signature_seen_before() -> None:
    users = dict(USERS)
    checker = authenticator(users)
    metadata = signed(date_at(0))
    assert checker.user_of(metadata).access_key == "app"
    users["app"] = User("app", b"the-new-secret")
    with pytest.raises(UnauthenticatedError, match="does not match"):
        checker.user_of(metadata)
    del users["app"]
    with pytest.raises(UnauthenticatedError, match="unknown"):
        checker.user_of(metadata)
