"""Who sent a request: its ``authorization`` metadata checked against the users
(docs/rocketmq-protocol.md §7).

A request is authenticated when its access key names a user, its signature is the HMAC-SHA1 of
its ``x-mq-date-time`` under that user's secret key, and that date is within ``clock_skew_s`` of
the broker's clock, before or after, read exactly as written (``yyyyMMdd'T'HHmmss'Z'``, UTC), and
nothing else is forgiven. The check is rocketbox_api/signing.py's SignatureVerifier, the same the
sidecar's RocketMQ front applies to its apps.

A signature covers only the date, so the bound is how long a captured one can be replayed (twice
the skew at most); TLS is what keeps one from being captured. No whole-hour or quarter-hour
offset is taken off for a client that stamps its local time with a ``Z`` (the official Python
client does): each such offset would open another window in which an old signature passes. That
client must run with ``TZ=UTC``; the refusal says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from broker.auth.acl import User
from broker.auth.errors import UnauthenticatedError
from rocketbox_api.signing import (
    AUTHORIZATION_HEADER,
    CLOCK_SKEW_S_DEFAULT,
    DATE_TIME_HEADER,
    SignatureRefusedError,
    SignatureVerifier,
)

# A captured signature passes for twice the skew: the bound keeps that under a quarter hour.
CLOCK_SKEW_S_MAX = 449

__all__ = ["CLOCK_SKEW_S_DEFAULT", "CLOCK_SKEW_S_MAX", "Authenticator"]


class Authenticator:
    def __init__(
        self,
        users: Mapping[str, User],
        clock_skew_s: int = CLOCK_SKEW_S_DEFAULT,
        now_s: Callable[[], float] = time.time,
    ) -> None:
        assert 0 <= clock_skew_s <= CLOCK_SKEW_S_MAX, clock_skew_s
        self._users = users
        self._verifier = SignatureVerifier(self._secret_of, clock_skew_s, now_s, "the broker")

    def _secret_of(self, access_key: str) -> bytes | None:
        user = self._users.get(access_key)
        return None if user is None else user.secret_key

    def user_of(self, metadata: Mapping[str, str]) -> User:
        """The request's user; UnauthenticatedError saying what is wrong (never the secret)."""
        try:
            access_key = self._verifier.access_key_of(
                metadata.get(AUTHORIZATION_HEADER, ""), metadata.get(DATE_TIME_HEADER, "")
            )
        except SignatureRefusedError as e:
            raise UnauthenticatedError(str(e)) from None
        user = self._users.get(access_key)
        if user is None:  # verified against a user that is gone: none is, in one thread
            raise UnauthenticatedError(f"access key {access_key!r} is unknown")
        return user
