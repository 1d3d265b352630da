"""RocketMQ 5's request signature, as the official clients send it (shared/spec §7):

    authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                   Signature=<hex HMAC-SHA1(key=secret key, data=x-mq-date-time's value)>

The broker verifies it (broker/auth/), the sidecar signs its own requests with it. The Python
client writes the hex in lower case, the Node client in upper case: the signature is compared as
bytes, so case does not matter. Only the date is signed, so a signature proves the secret, not
the request: TLS is what keeps a request from being read or replayed on the wire.

This is a leaf module (no imports from broker or sidecar): both sides import it.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
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


__all__ = [
    "ALGORITHM",
    "AUTHORIZATION_HEADER",
    "DATE_TIME_FORMAT",
    "DATE_TIME_HEADER",
    "Authorization",
    "MalformedAuthorizationError",
    "authorization_value",
    "parse_authorization",
    "signature_hex",
]
