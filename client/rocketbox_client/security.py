"""How the client proves itself to a sidecar that asks: TLS (``TlsConfig``: the CA to verify
the sidecar with, and a client certificate when the sidecar requires one, mTLS) and a bearer
token (sent as ``authorization: Bearer <token>`` on every call). Neither is ever shown: the
key and the token stay out of every repr and error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

AUTHORIZATION_HEADER = "authorization"

Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS to the sidecar. ``root_certificates``: PEM CA certificates to verify the sidecar's
    certificate with (None: the system's roots). ``certificate_chain`` and ``private_key``: this
    client's PEM certificate and key, for a sidecar that requires one (mTLS); both or neither."""

    root_certificates: bytes | None = field(default=None, repr=False)
    certificate_chain: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ValueError("certificate_chain and private_key go together")

    @classmethod
    def from_files(
        cls,
        root_certificates: str | Path | None = None,
        certificate_chain: str | Path | None = None,
        private_key: str | Path | None = None,
    ) -> TlsConfig:
        """The same, read from PEM files."""

        def read(path: str | Path | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return cls(read(root_certificates), read(certificate_chain), read(private_key))

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            self.root_certificates, self.private_key, self.certificate_chain
        )


def call_metadata(token: str | None) -> Metadata | None:
    """What every call carries: the bearer token, when there is one."""
    if token is None:
        return None
    if not token or token != token.strip() or not token.isascii() or not token.isprintable():
        raise ValueError("token must be printable ASCII, not empty, without surrounding spaces")
    return ((AUTHORIZATION_HEADER, f"Bearer {token}"),)
