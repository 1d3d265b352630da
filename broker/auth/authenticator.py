"""Who sent a request: its ``authorization`` metadata checked against the users (spec §7).

A request is authenticated when its access key names a user, its signature is the HMAC-SHA1 of
its ``x-mq-date-time`` under that user's secret key, and that date is near the broker's clock.

The clock bound: the official Python client stamps its *local* time with a ``Z`` (spec §7), so a
client in another time zone is off by whole quarter hours (every zone offset is one, within
±14 h). The broker removes the nearest such offset and requires what is left to be at most
``clock_skew_s`` (under half a quarter hour, or every time of day would pass). A signature
covers only the date, whatever the bound: TLS is what keeps one from being replayed.

Parsed dates are kept (DATES_CACHED_MAX, one per second a client signs in), as is each
access key's last good signature for a date: a client's calls within one second then cost a
dictionary lookup and a comparison, not an HMAC.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Mapping

from broker.auth.acl import User
from broker.auth.errors import UnauthenticatedError
from rocketbox_api.signing import (
    AUTHORIZATION_HEADER,
    DATE_TIME_HEADER,
    MalformedAuthorizationError,
    parse_authorization,
)

QUARTER_HOUR_S = 15 * 60
TIME_ZONE_OFFSET_S_MAX = 14 * 3600
CLOCK_SKEW_S_DEFAULT = 300
CLOCK_SKEW_S_MAX = QUARTER_HOUR_S // 2 - 1
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
                f"{DATE_TIME_HEADER} {date[:32]!r} is more than {self._clock_skew_s} s from "
                "the broker's clock (a time zone's whole-quarter-hour offset aside)"
            )
        if len(self._verified) >= SIGNATURES_CACHED_MAX:
            self._verified.clear()
        self._verified[(value, date)] = user
        return user

    def _date_ok(self, date: str) -> bool:
        signed_s = self._dates.get(date)
        if signed_s is None:
            try:
                signed_s = calendar.timegm(time.strptime(date, "%Y%m%dT%H%M%SZ"))
            except ValueError:
                return False
            if len(self._dates) >= DATES_CACHED_MAX:
                self._dates.clear()
            self._dates[date] = signed_s
        off_s = signed_s - self._now_s()
        if abs(off_s) > TIME_ZONE_OFFSET_S_MAX + self._clock_skew_s:
            return False
        zone_offset_s = round(off_s / QUARTER_HOUR_S) * QUARTER_HOUR_S
        return abs(off_s - zone_offset_s) <= self._clock_skew_s
