"""RocketMQ 5's request signature, as the official clients send it (docs/rocketmq-protocol.md §7):

    authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                   Signature=<hex HMAC-SHA1(key=secret key, data=x-mq-date-time's value)>

The broker verifies it (broker/auth/), the sidecar signs its own requests with it, and the
sidecar's RocketMQ front verifies its apps' with SignatureVerifier. The Python client writes the
hex in lower case, the Node client in upper case: the signature is compared as bytes, so case
does not matter. Only the date is signed, so a signature proves the secret, not the request: TLS
is what keeps a request from being read or replayed on the wire.

The clock bound (SignatureVerifier): the signed date, read exactly as written (UTC), is at most
``clock_skew_s`` from the verifier's clock, before or after; no time-zone offset is forgiven,
since each forgiven offset would be another window in which a captured signature passes. The
official Python client stamps its *local* time with a ``Z``: it must run with ``TZ=UTC``, and a
refusal of its date says so.

This is a leaf module (no imports from broker or sidecar): both sides import it.
"""

from __future__ import annotations

import binascii
import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

AUTHORIZATION_HEADER = "authorization"
DATE_TIME_HEADER = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
# The one signed header the clients name.
SIGNED_HEADERS = DATE_TIME_HEADER
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
# An authorization value longer than this is refused unread: an access key is ~20-64
# characters and a SHA-1 signature 40 hex digits.
AUTHORIZATION_CHARS_MAX = 512
SIGNATURE_BYTES = 20  # SHA-1's digest
# How far a signed date may be from the verifier's clock, either way: RocketMQ's own default.
CLOCK_SKEW_S_DEFAULT = 300
# The official clients' form, and no other: strptime alone would take one-digit fields too.
DATE_TIME_PATTERN = re.compile(r"[0-9]{8}T[0-9]{6}Z")
# Parsed dates (one per second a client signs in) and good signatures kept by a verifier.
DATES_CACHED_MAX = 4096
SIGNATURES_CACHED_MAX = 4096


def signature_hex(secret_key: bytes, date_time: str) -> str:
    return hmac.new(secret_key, date_time.encode(), hashlib.sha1).hexdigest()


def authorization_value(access_key: str, secret_key: bytes, date_time: str) -> str:
    """The ``authorization`` metadata value the official Python client sends."""
    return (
        f"{ALGORITHM} Credential={access_key}, SignedHeaders={SIGNED_HEADERS}, "
        f"Signature={signature_hex(secret_key, date_time)}"
    )


@dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signature: bytes = b""

    def matches(self, secret_key: bytes, date_time: str) -> bool:
        expected = hmac.new(secret_key, date_time.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(expected, self.signature)


class MalformedAuthorizationError(ValueError):
    """The ``authorization`` value is not RocketMQ's form; the message says which part."""


def parse_authorization(value: str) -> Authorization:
    """``Credential``'s first ``/``-separated part is the access key (as RocketMQ's proxy reads
    it); the signature's hex may be either case."""
    if len(value) > AUTHORIZATION_CHARS_MAX:
        raise MalformedAuthorizationError(f"longer than {AUTHORIZATION_CHARS_MAX} characters")
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise MalformedAuthorizationError(f"the algorithm must be {ALGORITHM}")
    parts: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, part_value = part.strip().partition("=")
        if sep:
            parts[key] = part_value.strip()
    access_key = parts.get("Credential", "").split("/", 1)[0]
    if not access_key:
        raise MalformedAuthorizationError("Credential (the access key) is missing or empty")
    if parts.get("SignedHeaders", "").lower() != SIGNED_HEADERS:
        raise MalformedAuthorizationError(f"SignedHeaders must be {SIGNED_HEADERS}")
    try:
        signature = binascii.unhexlify(parts.get("Signature", ""))
    except (binascii.Error, ValueError):
        raise MalformedAuthorizationError("Signature is not hexadecimal") from None
    if len(signature) != SIGNATURE_BYTES:
        raise MalformedAuthorizationError("Signature is not a 40-digit HMAC-SHA1")
    return Authorization(access_key, signature)


def signed_at_s(date_time: str) -> int | None:
    """The epoch second ``date_time`` names, read as the clients write it (UTC); None when it is
    not that form."""
    if DATE_TIME_PATTERN.fullmatch(date_time) is None:
        return None
    try:
        return calendar.timegm(time.strptime(date_time, DATE_TIME_FORMAT))
    except ValueError:  # a month 13, a second 61
        return None


class SignatureRefusedError(ValueError):
    """A request whose signature does not prove an access key; says why, never a secret."""


class SignatureVerifier:
    """Checks a request's ``authorization`` and ``x-mq-date-time`` against the secret keys of
    ``secret_of`` (None: an unknown access key), and its date against the clock (module
    docstring). A signature already verified for a date is remembered, with the secret it was
    verified with: a client's calls within one second cost a lookup and a comparison, not an
    HMAC, and a secret changed since no longer counts. ``clock_owner`` names the clock in a
    refusal ("the sidecar")."""

    def __init__(
        self,
        secret_of: Callable[[str], bytes | None],
        clock_skew_s: int = CLOCK_SKEW_S_DEFAULT,
        now_s: Callable[[], float] = time.time,
        clock_owner: str = "the server",
    ) -> None:
        assert clock_skew_s >= 0, clock_skew_s
        self._secret_of = secret_of
        self._clock_skew_s = clock_skew_s
        self._now_s = now_s
        self._clock_owner = clock_owner
        self._dates: dict[str, int | None] = {}
        self._verified: dict[tuple[str, str], tuple[str, bytes]] = {}

    def access_key_of(self, authorization: str, date_time: str) -> str:
        """The access key whose secret signed the request; SignatureRefusedError otherwise."""
        verified = self._verified.get((authorization, date_time))
        if verified is None:
            verified = self._verify(authorization, date_time)
        elif self._secret_of(verified[0]) != verified[1]:
            del self._verified[(authorization, date_time)]
            verified = self._verify(authorization, date_time)
        self._check_date(date_time)
        return verified[0]

    def _verify(self, value: str, date_time: str) -> tuple[str, bytes]:
        if not value:
            raise SignatureRefusedError(
                f"no credentials: the request has no {AUTHORIZATION_HEADER} metadata"
            )
        try:
            authorization = parse_authorization(value)
        except MalformedAuthorizationError as e:
            raise SignatureRefusedError(f"malformed {AUTHORIZATION_HEADER} metadata: {e}") from None
        access_key = authorization.access_key
        secret = self._secret_of(access_key)
        if secret is None:
            raise SignatureRefusedError(f"access key {access_key[:64]!r} is unknown")
        if not date_time:
            raise SignatureRefusedError(f"no {DATE_TIME_HEADER} metadata: it is what is signed")
        if not authorization.matches(secret, date_time):
            raise SignatureRefusedError(
                f"the signature of access key {access_key!r} does not match (a wrong secret key?)"
            )
        if len(self._verified) >= SIGNATURES_CACHED_MAX:
            self._verified.clear()
        self._verified[(value, date_time)] = (access_key, secret)
        return access_key, secret

    def _check_date(self, date_time: str) -> None:
        if date_time in self._dates:
            signed_s = self._dates[date_time]
        else:
            signed_s = signed_at_s(date_time)
            if len(self._dates) >= DATES_CACHED_MAX:
                self._dates.clear()
            self._dates[date_time] = signed_s
        if signed_s is None:
            raise SignatureRefusedError(
                f"{DATE_TIME_HEADER} {date_time[:32]!r} is not yyyyMMdd'T'HHmmss'Z'"
            )
        off_s = signed_s - self._now_s()
        if abs(off_s) > self._clock_skew_s:
            raise SignatureRefusedError(
                f"{DATE_TIME_HEADER} {date_time} is {abs(off_s):.0f} s "
                f"{'ahead of' if off_s > 0 else 'behind'} {self._clock_owner}'s clock, more "
                f"than the {self._clock_skew_s} s allowed (the date is UTC: the official "
                "Python client stamps its local time, so run it with TZ=UTC)"
            )


__all__ = [
    "ALGORITHM",
    "AUTHORIZATION_HEADER",
    "CLOCK_SKEW_S_DEFAULT",
    "DATE_TIME_FORMAT",
    "DATE_TIME_HEADER",
    "Authorization",
    "MalformedAuthorizationError",
    "SignatureRefusedError",
    "SignatureVerifier",
    "authorization_value",
    "parse_authorization",
    "signature_hex",
    "signed_at_s",
]
