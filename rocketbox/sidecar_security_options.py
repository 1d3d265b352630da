"""The sidecar's security options (docs/security.md, "The sidecar"), each group gathered into one
argument of the command: ``app_security`` (TLS of the listeners apps reach, the bearer token; on
``rocketbox sidecar`` and ``rocketbox up``) and ``broker_security`` (TLS to the broker and the
sidecar's own credentials; ``rocketbox sidecar``).

Secrets never come from a command-line value, which ``ps`` and shell histories show: the token
from ``--token-file`` or ROCKETBOX_SIDECAR_TOKEN, the apps' access keys of the RocketMQ front from
``--front-credentials-file`` (access_key=/secret_key= pairs), the broker credentials from
``--broker-credentials-file`` (access_key=/secret_key= lines, rocketbox_api/credentials.py) or
ROCKETBOX_BROKER_ACCESS_KEY and ROCKETBOX_BROKER_SECRET_KEY. They are read here, at the
composition root, and errors name the option or the variable, never a value.

A command with these options and ``--rocketmq-listen`` has its front's protection checked here,
before anything starts (sidecar/security.py, ``front_refusal``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from rocketbox_api.credentials import Credentials, CredentialsError, read_credentials
from sidecar.channels import Endpoint
from sidecar.security import (
    TOKEN_ENV,
    SecurityConfigError,
    front_refusal,
    read_front_credentials,
    read_token,
)

BROKER_ACCESS_KEY_ENV = "ROCKETBOX_BROKER_ACCESS_KEY"
BROKER_SECRET_KEY_ENV = "ROCKETBOX_BROKER_SECRET_KEY"  # noqa: S105 - a variable's name
_FILE = click.Path(path_type=Path, dir_okay=False, exists=True)


@dataclass(frozen=True)
class AppSecurity:
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    api_token: str | None = field(default=None, repr=False)
    health_listen: Endpoint | None = None
    front_credentials: tuple[Credentials, ...] = field(default=(), repr=False)
    rocketmq_front_insecure: bool = False

    def config_fields(self) -> dict[str, Any]:
        """SidecarConfig's fields, by name."""
        health = self.health_listen
        return {
            "tls_cert_file": self.tls_cert_file,
            "tls_key_file": self.tls_key_file,
            "tls_client_ca_file": self.tls_client_ca_file,
            "api_token": self.api_token,
            "health_listen_host": health.host if health else None,
            "health_listen_port": health.port if health else 0,
            "front_credentials": self.front_credentials,
            "rocketmq_front_insecure": self.rocketmq_front_insecure,
        }


@dataclass(frozen=True)
class BrokerSecurity:
    tls: bool = False
    tls_ca_file: Path | None = None
    credentials: Credentials | None = None

    def producer_fields(self) -> dict[str, Any]:
        """ProducerConfig's fields, by name."""
        return {"tls": self.tls, "tls_ca_file": self.tls_ca_file, "credentials": self.credentials}


def client_token() -> str | None:
    """The token a client command (``send``, ``outbox`` through a sidecar) sends: the
    sidecar's own variable, ROCKETBOX_SIDECAR_TOKEN, so that one export serves both sides."""
    return os.environ.get(TOKEN_ENV, "").strip() or None


def _health_listen(value: str | None) -> Endpoint | None:
    if not value or value.strip().lower() == "off":
        return None
    try:
        return Endpoint.parse(value, port_min=0)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--health-listen") from e


_APP_OPTIONS = (
    click.option("--tls-cert", type=_FILE, default=None,
                 help="Serve apps over TLS (rocketbox.v1 and the RocketMQ front): this PEM "
                 "certificate chain, with --tls-key."),
    click.option("--tls-key", type=_FILE, default=None,
                 help="The PEM private key of --tls-cert (unencrypted)."),
    click.option("--tls-client-ca", type=_FILE, default=None,
                 help="Require a client certificate signed by this PEM CA (mTLS); needs "
                 "--tls-cert."),
    click.option("--token-file", type=_FILE, default=None,
                 help="Require 'authorization: Bearer <token>' on rocketbox.v1 calls, the token "
                 f"this file's first line (or {TOKEN_ENV}; health stays open)."),
    click.option("--front-credentials-file", type=_FILE, default=None,
                 help="Verify the RocketMQ signature of every call to the RocketMQ front against "
                 "the apps' access keys: access_key=/secret_key= line pairs, one per app."),
    click.option("--rocketmq-front-insecure", is_flag=True, default=False,
                 help="Serve the RocketMQ front with no credentials checked while the sidecar's "
                 "API is protected (any client that reaches it sends as the sidecar)."),
)  # fmt: skip
_HEALTH_OPTION = click.option(
    "--health-listen", default=None, metavar="HOST:PORT",
    help="Serve grpc.health.v1 alone here, in plaintext, for probes that cannot speak TLS "
    "(off by default).",
)  # fmt: skip
_BROKER_OPTIONS = (
    click.option("--broker-tls/--no-broker-tls", default=False,
                 help="Reach the brokers over TLS (system roots unless --broker-tls-ca)."),
    click.option("--broker-tls-ca", type=_FILE, default=None,
                 help="Verify the brokers' certificates against this PEM CA (implies "
                 "--broker-tls)."),
    click.option("--broker-credentials-file", type=_FILE, default=None,
                 help="Sign requests to the brokers with the access_key=/secret_key= lines of "
                 f"this file (or {BROKER_ACCESS_KEY_ENV} and {BROKER_SECRET_KEY_ENV})."),
)  # fmt: skip


def app_security(kwargs: dict[str, Any], health: bool) -> AppSecurity:
    """Pops the app options from ``kwargs``; reads the token and the front's access keys, and
    refuses a RocketMQ front (``kwargs``' ``rocketmq_listen``) the options leave unprotected."""
    front_file: Path | None = kwargs.pop("front_credentials_file")
    try:
        token = read_token(kwargs.pop("token_file"), os.environ)
        front = read_front_credentials(front_file) if front_file is not None else ()
    except SecurityConfigError as e:
        raise click.UsageError(str(e)) from e
    security = AppSecurity(
        kwargs.pop("tls_cert"),
        kwargs.pop("tls_key"),
        kwargs.pop("tls_client_ca"),
        token,
        _health_listen(kwargs.pop("health_listen")) if health else None,
        front,
        kwargs.pop("rocketmq_front_insecure"),
    )
    refusal = front_refusal(
        front_on=kwargs.get("rocketmq_listen") is not None,
        api_token=security.api_token is not None,
        client_ca=security.tls_client_ca_file is not None,
        front_credentials=bool(security.front_credentials),
        front_insecure=security.rocketmq_front_insecure,
    )
    if refusal is not None:
        raise click.UsageError(refusal)
    return security


def broker_security(kwargs: dict[str, Any]) -> BrokerSecurity:
    """Pops the broker options from ``kwargs``; reads the credentials."""
    credentials_file: Path | None = kwargs.pop("broker_credentials_file")
    try:
        credentials = read_credentials(
            credentials_file, BROKER_ACCESS_KEY_ENV, BROKER_SECRET_KEY_ENV
        )
    except CredentialsError as e:
        raise click.UsageError(str(e)) from e
    ca_file: Path | None = kwargs.pop("broker_tls_ca")
    tls = bool(kwargs.pop("broker_tls")) or ca_file is not None
    return BrokerSecurity(tls, ca_file, credentials)


def _decorate(command: Callable[..., None], options: tuple[Any, ...]) -> Callable[..., None]:
    for option in reversed(options):
        command = option(command)
    return command


def app_security_options(health: bool = True) -> Callable[..., Callable[..., None]]:
    """Add the app-facing options (``health``: and --health-listen); the command receives them
    as one ``app_security`` argument."""

    def decorator(command: Callable[..., None]) -> Callable[..., None]:
        # wraps: keeps the name, the docstring and the options already added to ``command``.
        @functools.wraps(command)
        def gather(**kwargs: Any) -> None:
            command(app_security=app_security(kwargs, health), **kwargs)

        return _decorate(gather, (*_APP_OPTIONS, *((_HEALTH_OPTION,) if health else ())))

    return decorator


def broker_security_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the broker options; the command receives them as one ``broker_security`` argument."""

    @functools.wraps(command)
    def gather(**kwargs: Any) -> None:
        command(broker_security=broker_security(kwargs), **kwargs)

    return _decorate(gather, _BROKER_OPTIONS)
