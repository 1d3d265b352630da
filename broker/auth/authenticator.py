"""Who sent a request: its ``authorization`` metadata checked against the users (spec §7).

A request is authenticated when its access key names a user, its signature is the HMAC-SHA1 of
its ``x-mq-date-time`` under that user's secret key, and that date is near the broker's clock.

The clock bound: the signed date, read exactly as written (``yyyyMMdd'T'HHmmss'Z'``, UTC), is at
most ``clock_skew_s`` from the broker's clock, before or after, and nothing else is forgiven. A
signature covers only the date, so the bound is how long a captured one can be replayed (twice
the skew at most); TLS is what keeps one from being captured. No whole-hour or quarter-hour
offset is taken off for a client that stamps its local time with a ``Z`` (the official Python
client does): each such offset would open another window in which an old signature passes. That
client must run with its clock's zone set to UTC (``TZ=UTC``); the refusal says so.

Parsed dates are kept (DATES_CACHED_MAX, one per second a client signs in), as is each
access key's last good signature for a date: a client's calls within one second then cost a
dictionary lookup and a comparison, not an HMAC.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable, Mapping

from broker.auth.acl import User
from broker.auth.errors import UnauthenticatedError
from rocketbox_api.signing import (
    AUTHORIZATION_HEADER,
    DATE_TIME_FORMAT,
    DATE_TIME_HEADER,
    MalformedAuthorizationError,
    parse_authorization,
)

CLOCK_SKEW_S_DEFAULT = 300
# A captured signature passes for twice the skew: the bound keeps that under a quarter hour.
CLOCK_SKEW_S_MAX = 449
# The official clients' form, and no other: strptime alone would take one-digit fields too.
DATE_TIME_PATTERN = re.compile(r"[0-9]{8}T[0-9]{6}Z")
DATES_CACHED_MAX = 4096
SIGNATURES_CACHED_MAX = 4096


class Authenticator:
    def __init__(
        self,
        users: Mapping[str, User],
        clock_skew_s: int = CLOCK_SKEW_S_DEFAULT,
        now_s: Callable[[], float] = time.time,
    ) -> None:
        assert 0 <= clock_skew_s <= CLOCK_SKEW_S_MAX, clock_skew_s
        self._users = users
        self._clock_skew_s = clock_skew_s
        self._now_s = now_s
        self._dates: dict[str, int] = {}
        # (authorization value, date) → the user it was verified for: a user changed or deleted
        # since is another object, so the entry no longer counts.
        self._verified: dict[tuple[str, str], User] = {}

    def user_of(self, metadata: Mapping[str, str]) -> User:
        """The request's user; UnauthenticatedError saying what is wrong (never the secret)."""
        value = metadata.get(AUTHORIZATION_HEADER, "")
        date = metadata.get(DATE_TIME_HEADER, "")
        verified = self._verified.get((value, date))
        if (
            verified is not None
            and self._users.get(verified.access_key) is verified
            and self._date_ok(date)
        ):
            return verified
        if not value:
            raise UnauthenticatedError("no credentials: the request has no authorization metadata")
        try:
            authorization = parse_authorization(value)
        except MalformedAuthorizationError as e:
            raise UnauthenticatedError(f"malformed authorization metadata: {e}") from None
        user = self._users.get(authorization.access_key)
        if user is None:
            raise UnauthenticatedError(f"access key {authorization.access_key[:64]!r} is unknown")
        if not date:
            raise UnauthenticatedError(f"no {DATE_TIME_HEADER} metadata: it is what is signed")
        if not authorization.matches(user.secret_key, date):
            raise UnauthenticatedError(
                f"the signature of access key {user.access_key!r} does not match "
                "(a wrong secret key?)"
            )
        if not self._date_ok(date):
            raise UnauthenticatedError(
                f"{DATE_TIME_HEADER} {date[:32]!r} is not a UTC time (yyyyMMdd'T'HHmmss'Z') "
                f"within {self._clock_skew_s} s of the broker's clock (a Python client stamps "
                "its local time: run it with TZ=UTC)"
            )
        if len(self._verified) >= SIGNATURES_CACHED_MAX:
            self._verified.clear()
        self._verified[(value, date)] = user
        return user

    def _date_ok(self, date: str) -> bool:
        """Whether ``date`` is the official form and within the skew of now, either way."""
        signed_s = self._dates.get(date)
        if signed_s is None:
            if DATE_TIME_PATTERN.fullmatch(date) is None:
                return False
            try:
                signed_s = calendar.timegm(time.strptime(date, DATE_TIME_FORMAT))
            except ValueError:
                return False
            if len(self._dates) >= DATES_CACHED_MAX:
                self._dates.clear()
            self._dates[date] = signed_s
        return abs(signed_s - self._now_s()) <= self._clock_skew_s
