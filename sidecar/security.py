"""The sidecar's own security (docs/security.md, "The sidecar"): TLS on the listeners apps reach,
an optional bearer token on rocketbox.v1, and TLS to the broker.

- TLS (``--tls-cert``/``--tls-key``, mTLS with ``--tls-client-ca``) covers the rocketbox.v1 port
  and the RocketMQ front's. The files are read once, at start; a file that cannot be read, or a
  key that is not the certificate's, stops the start with an error naming the option.
- The token (``--token-file`` or ROCKETBOX_SIDECAR_TOKEN, never a command-line value) is checked
  on every call of rocketbox.v1.SidecarService and OutboxAdminService: gRPC metadata
  ``authorization: Bearer <token>``, compared in constant time. A call without it, or with
  another, is answered UNAUTHENTICATED; neither the answer nor the log line shows what was sent.
  The check is in each handler, wrapped once when the servicer is registered (``token_guarded``),
  not in an interceptor: without a token nothing is wrapped and a call pays nothing. Health stays
  open (probes carry no credentials); the RocketMQ front's apps sign with RocketMQ's own
  ``authorization``, which the front passes to the broker unchanged, so the token is not theirs.
- ``--health-listen`` serves grpc.health.v1 alone in plaintext: Kubernetes' gRPC probes cannot
  speak TLS, and must not need a client certificate.

Nothing here puts a secret in a repr, a log line or an error: errors name the option and the
file, never their content.
"""

from __future__ import annotations

import contextlib
import hmac
import inspect
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from google.protobuf.descriptor import ServiceDescriptor

from rocketbox_api.rate_limited_log import LOG_INTERVAL_S_DEFAULT, RateLimitedLog

LOG = logging.getLogger(__name__)
TOKEN_ENV = "ROCKETBOX_SIDECAR_TOKEN"  # noqa: S105 - a variable's name, not a secret
AUTHORIZATION_HEADER = "authorization"
BEARER = "bearer"
# A PEM bundle or a token file larger than this is not one: refused unread.
PEM_FILE_BYTES_MAX = 1024 * 1024
TOKEN_FILE_BYTES_MAX = 4096
# A shorter token is guessable: refused at start.
TOKEN_CHARS_MIN = 16
# The options each file comes from, for errors a person can act on.
OPTIONS = {
    "tls_cert_file": "--tls-cert",
    "tls_key_file": "--tls-key",
    "tls_client_ca_file": "--tls-client-ca",
    "tls_ca_file": "--broker-tls-ca",
}
MISSING_TOKEN = (
    "this sidecar requires a token: send the gRPC metadata 'authorization: Bearer <token>' "
    f"(rocketbox_client's token=, or {TOKEN_ENV} for the rocketbox CLI)"
)
WRONG_TOKEN = "the bearer token in 'authorization' is not this sidecar's"  # noqa: S105 - words


class SecurityConfigError(ValueError):
    """A security file or value that cannot be used; names the option, never a secret."""


def read_file(path: Path, option: str, bytes_max: int = PEM_FILE_BYTES_MAX) -> bytes:
    try:
        with path.open("rb") as f:
            raw = f.read(bytes_max + 1)
    except OSError as e:
        raise SecurityConfigError(f"{option} {path}: {e.strerror or e}") from None
    if len(raw) > bytes_max:
        raise SecurityConfigError(f"{option} {path}: larger than {bytes_max} bytes")
    if not raw.strip():
        raise SecurityConfigError(f"{option} {path}: the file is empty")
    return raw


def read_pem_certificates(path: Path, option: str) -> bytes:
    raw = read_file(path, option)
    try:
        x509.load_pem_x509_certificates(raw)
    except ValueError:
        raise SecurityConfigError(f"{option} {path}: no PEM certificate in it") from None
    return raw


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The PEM of a TLS listener, read once. ``client_ca``: require and verify client
    certificates (mTLS)."""

    certificate_chain: bytes = field(repr=False)
    private_key: bytes = field(repr=False)
    client_ca: bytes | None = field(default=None, repr=False)

    @classmethod
    def read(cls, cert_file: Path, key_file: Path, client_ca_file: Path | None) -> ServerTls:
        chain = read_pem_certificates(cert_file, OPTIONS["tls_cert_file"])
        key_option = OPTIONS["tls_key_file"]
        key_pem = read_file(key_file, key_option)
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError):
            raise SecurityConfigError(
                f"{key_option} {key_file}: not an unencrypted PEM private key"
            ) from None
        leaf = x509.load_pem_x509_certificates(chain)[0]
        if _public_der(leaf.public_key()) != _public_der(key.public_key()):
            raise SecurityConfigError(
                f"{key_option} {key_file} is not the key of the certificate in "
                f"{OPTIONS['tls_cert_file']} {cert_file}"
            )
        client_ca = None
        if client_ca_file is not None:
            client_ca = read_pem_certificates(client_ca_file, OPTIONS["tls_client_ca_file"])
        return cls(chain, key_pem, client_ca)

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.private_key, self.certificate_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


def _public_der(key: Any) -> bytes:
    return bytes(
        key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def broker_channel_credentials(ca_file: Path | None) -> grpc.ChannelCredentials:
    """TLS to the broker: verified against ``ca_file`` (a private CA), else the system roots."""
    roots = None if ca_file is None else read_pem_certificates(ca_file, OPTIONS["tls_ca_file"])
    return grpc.ssl_channel_credentials(root_certificates=roots)


def read_token(
    token_file: Path | None, environ: Mapping[str, str], option: str = "--token-file"
) -> str | None:
    """The token of ``token_file`` (its first line), else of ROCKETBOX_SIDECAR_TOKEN; None when
    neither is given."""
    if token_file is not None:
        raw = read_file(token_file, option, TOKEN_FILE_BYTES_MAX)
        token = raw.decode(errors="replace").strip().splitlines()[0].strip()
        where = f"{option} {token_file}"
    elif environ.get(TOKEN_ENV):
        token, where = environ[TOKEN_ENV].strip(), TOKEN_ENV
    else:
        return None
    if len(token) < TOKEN_CHARS_MIN:
        raise SecurityConfigError(
            f"{where}: the token must be at least {TOKEN_CHARS_MIN} characters"
        )
    if not token.isascii() or not token.isprintable() or " " in token:
        raise SecurityConfigError(
            f"{where}: the token must be printable ASCII without spaces (a gRPC metadata value)"
        )
    return token


class TokenGuard:
    """Checks ``authorization: Bearer <token>`` inside each handler of the services it wraps."""

    def __init__(self, token: str, log_interval_s: float = LOG_INTERVAL_S_DEFAULT) -> None:
        self._token = token.encode()
        self.refusal_log = RateLimitedLog(LOG, logging.WARNING, log_interval_s)

    def guarded(self, servicer: Any, service: ServiceDescriptor) -> Any:
        """An object with ``servicer``'s methods of ``service``, each checking the token first:
        what add_..._to_server is given instead of the servicer."""
        guarded = type(f"TokenGuarded{service.name}", (), {})()
        for method in service.methods:
            inner = getattr(servicer, method.name)
            path = f"/{service.full_name}/{method.name}"
            if inspect.isasyncgenfunction(inner):
                behaviour = self._async_generator(path, inner)
            else:
                behaviour = self._coroutine(path, inner)
            setattr(guarded, method.name, behaviour)
        return guarded

    def refusal(self, context: Any) -> str | None:
        """None when the call carries the token; otherwise what the caller is told."""
        for key, value in context.invocation_metadata() or ():
            if key != AUTHORIZATION_HEADER or not isinstance(value, str):
                continue
            scheme, _, token = value.partition(" ")
            if scheme.lower() == BEARER and hmac.compare_digest(
                token.strip().encode(), self._token
            ):
                return None
            return WRONG_TOKEN
        return MISSING_TOKEN

    async def _check(self, path: str, context: Any) -> None:
        refusal = self.refusal(context)
        if refusal is not None:
            self.refusal_log.log("refused a call to %s: %s", path, refusal)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

    def _coroutine(self, path: str, inner: Any) -> Any:
        async def behaviour(request: Any, context: Any) -> Any:
            await self._check(path, context)
            return await inner(request, context)

        return behaviour

    def _async_generator(self, path: str, inner: Any) -> Any:
        async def behaviour(request: Any, context: Any) -> Any:
            await self._check(path, context)
            async with contextlib.aclosing(inner(request, context)) as responses:
                async for response in responses:
                    yield response

        return behaviour


__all__ = [
    "TOKEN_ENV",
    "SecurityConfigError",
    "ServerTls",
    "TokenGuard",
    "broker_channel_credentials",
    "read_file",
    "read_token",
]
