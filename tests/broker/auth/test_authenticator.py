"""Request authentication (broker/auth/authenticator.py) against signatures made by the official
Python client's own signing code: a good signature passes in either hex case; a wrong secret, an
unknown or missing access key, a malformed header, a missing date and a date beyond the skew
bound are refused, each saying why and never quoting the secret; a date is held to the skew
alone, so one off by whole quarter hours (local time stamped Z, or an old signature replayed)
is refused; a user changed since a signature was verified is checked afresh."""

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
        (signed(date_at(420)), "420 s ahead of the broker's clock, more than the 300 s"),
        (signed(date_at(-20 * 3600)), "72000 s behind the broker's clock"),
        (signed("2026112T812000Z"), "is not yyyyMMdd'T'HHmmss'Z'"),
        (signed(date_at(0).replace("Z", "+0000")), "is not yyyyMMdd'T'HHmmss'Z'"),
    ],
)
def test_a_bad_request_is_refused_saying_why(metadata: dict[str, str], why: str) -> None:
    with pytest.raises(UnauthenticatedError, match=why) as refused:
        authenticator().user_of(metadata)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("skew_s", [-300, -120, 0, 120, 300])
def test_a_date_within_the_skew_passes_at_its_edges(skew_s: int) -> None:
    assert authenticator().user_of(signed(date_at(skew_s))).access_key == "app"


@pytest.mark.parametrize(
    "offset_s", [-301, 301, 15 * 60, -15 * 60 + 120, 5.5 * 3600, -8 * 3600, 14 * 3600, 45 * 60]
)
def test_whole_quarter_hours_off_are_refused_with_the_hint(offset_s: float) -> None:
    now_s = [float(NOW_S)]
    checker = Authenticator(USERS, 300, now_s=lambda: now_s[0])
    with pytest.raises(UnauthenticatedError, match="run it with TZ=UTC"):
        checker.user_of(signed(date_at(offset_s)))
    # A signature remembered as good is held to the clock again on each use.
    metadata = signed(date_at(0))
    assert checker.user_of(metadata).access_key == "app"
    now_s[0] -= offset_s
    with pytest.raises(UnauthenticatedError, match="more than the 300 s allowed"):
        checker.user_of(metadata)


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
