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
  open (probes carry no credentials). The official RocketMQ SDKs cannot send a bearer token
  (their metadata is fixed, and ``authorization`` is their signature's), so the token is not the
  RocketMQ front's.
- The RocketMQ front verifies its apps' RocketMQ signatures against ``--front-credentials-file``
  (access_key=/secret_key= pairs, one per app; sidecar/rocketmq_front/auth.py), or requires
  their client certificates with ``--tls-client-ca``. While the sidecar's API is protected (a
  token, or mTLS), a front protected by neither refuses to start (``front_refusal``) unless the
  operator chose it by name, ``--rocketmq-front-insecure``: an open front would let any client
  that reaches it send as the sidecar.
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
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from google.protobuf.descriptor import ServiceDescriptor

from rocketbox_api.credentials import Credentials
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
# The apps' access keys of the RocketMQ front: a thousand apps' pairs fit.
FRONT_CREDENTIALS_FILE_BYTES_MAX = 256 * 1024
FRONT_CREDENTIALS_MAX = 1024
# An access key a client's Credential= can carry: printable ASCII without spaces, ',' or '/'
# (the parts of the authorization value around it), of a bounded length.
ACCESS_KEY_PATTERN = re.compile(r"[!-+\--.0-~]{1,128}")
# The options each file comes from, for errors a person can act on.
OPTIONS = {
    "tls_cert_file": "--tls-cert",
    "tls_key_file": "--tls-key",
    "tls_client_ca_file": "--tls-client-ca",
    "tls_ca_file": "--broker-tls-ca",
    "front_credentials": "--front-credentials-file",
    "rocketmq_front_insecure": "--rocketmq-front-insecure",
    "rocketmq_listen": "--rocketmq-listen",
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


def read_front_credentials(
    path: Path, option: str = OPTIONS["front_credentials"]
) -> tuple[Credentials, ...]:
    """The apps' access keys of the RocketMQ front: ``access_key=`` lines, each followed by its
    ``secret_key=`` line (blank lines and ``#`` comments aside), one pair per app. Errors name
    the file and the line, never a secret."""
    raw = read_file(path, option, FRONT_CREDENTIALS_FILE_BYTES_MAX)
    where = f"{option} {path}"
    pairs: dict[str, str] = {}
    access_key: str | None = None
    number = 0
    for number, text in enumerate(raw.decode(errors="replace").splitlines(), 1):
        line = text.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = (part.strip() for part in line.partition("="))
        if not sep or key not in ("access_key", "secret_key"):
            raise SecurityConfigError(
                f"{where}, line {number}: expected access_key=... or secret_key=..."
            )
        if key == "access_key":
            if access_key is not None:
                raise SecurityConfigError(
                    f"{where}, line {number}: access key {access_key!r} has no secret_key= line"
                )
            if not ACCESS_KEY_PATTERN.fullmatch(value):
                raise SecurityConfigError(
                    f"{where}, line {number}: an access key is 1 to 128 printable ASCII "
                    "characters without spaces, ',' or '/'"
                )
            if value in pairs:
                raise SecurityConfigError(
                    f"{where}, line {number}: access key {value!r} is given twice"
                )
            access_key = value
        elif access_key is None:
            raise SecurityConfigError(
                f"{where}, line {number}: secret_key= before its access_key= line"
            )
        elif not value:
            raise SecurityConfigError(f"{where}, line {number}: the secret key is empty")
        else:
            pairs[access_key], access_key = value, None
            if len(pairs) > FRONT_CREDENTIALS_MAX:
                raise SecurityConfigError(f"{where}: more than {FRONT_CREDENTIALS_MAX} access keys")
    if access_key is not None:
        raise SecurityConfigError(
            f"{where}, line {number}: access key {access_key!r} has no secret_key= line"
        )
    if not pairs:
        raise SecurityConfigError(f"{where}: no access_key= and secret_key= pair in it")
    return tuple(Credentials(k, v) for k, v in pairs.items())


def front_refusal(
    *,
    front_on: bool,
    api_token: bool,
    client_ca: bool,
    front_credentials: bool,
    front_insecure: bool,
) -> str | None:
    """Why the RocketMQ front's protection cannot be started as configured, in one sentence
    naming the options; None when it can. The one rule for ``rocketbox sidecar``, ``rocketbox
    up`` and SidecarConfig."""
    o = OPTIONS
    named = [
        o[name]
        for name, given in (
            ("front_credentials", front_credentials),
            ("rocketmq_front_insecure", front_insecure),
        )
        if given
    ]
    if not front_on and named:
        verb = "are" if len(named) > 1 else "is"
        return (
            f"{' and '.join(named)} {verb} for the RocketMQ front, which is off: turn it on "
            f"with {o['rocketmq_listen']} HOST:PORT"
        )
    if front_insecure and (front_credentials or client_ca):
        checks = o["front_credentials"] if front_credentials else o["tls_client_ca_file"]
        return (
            f"{o['rocketmq_front_insecure']} says the RocketMQ front checks no credentials, but "
            f"{checks} makes it check them: give one or the other"
        )
    api_protected = api_token or client_ca
    front_protected = front_credentials or client_ca
    if front_on and api_protected and not front_protected and not front_insecure:
        return (
            "the sidecar's API requires a token but its RocketMQ front "
            f"({o['rocketmq_listen']}) would take any client's sends unchecked: give the apps' "
            f"RocketMQ access keys with {o['front_credentials']}, require client certificates "
            f"with {o['tls_client_ca_file']}, turn the front off with {o['rocketmq_listen']} "
            f"off, or choose an open front with {o['rocketmq_front_insecure']}"
        )
    return None


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
    "front_refusal",
    "read_file",
    "read_front_credentials",
    "read_token",
]
