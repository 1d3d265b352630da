"""The broker's security options (docs/security.md): TLS and authentication, gathered into one
``security`` argument.

The bootstrap admin's credentials come from ``--auth-admin-file`` (rocketbox_api/credentials.py
says its form) or from ROCKETBOX_AUTH_ADMIN_ACCESS_KEY and ROCKETBOX_AUTH_ADMIN_SECRET_KEY, never
from a command-line value. They are held to the ACL's rules on users (broker/auth/acl.py) when the
options are read: a bad one stops the start with one line, before the store is opened.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from broker.auth.acl import ACCESS_KEY_PATTERN, validate_user
from broker.auth.authenticator import CLOCK_SKEW_S_DEFAULT, CLOCK_SKEW_S_MAX
from broker.auth.errors import AclInputError
from rocketbox.start_checks import StartRefused
from rocketbox_api.credentials import Credentials, CredentialsError, read_credentials

ADMIN_ACCESS_KEY_ENV = "ROCKETBOX_AUTH_ADMIN_ACCESS_KEY"
ADMIN_SECRET_KEY_ENV = "ROCKETBOX_AUTH_ADMIN_SECRET_KEY"  # noqa: S105 - a variable's name


@dataclass(frozen=True)
class SecurityOptions:
    tls_cert: Path | None = None
    tls_key: Path | None = None
    enabled: bool = False
    key_file: Path | None = None
    clock_skew_s: int = CLOCK_SKEW_S_DEFAULT
    admin: Credentials | None = None

    def config_fields(self) -> dict[str, Any]:
        return {
            "tls_cert_file": self.tls_cert,
            "tls_key_file": self.tls_key,
            "auth_enabled": self.enabled,
            "auth_key_file": self.key_file,
            "auth_clock_skew_s": self.clock_skew_s,
            "auth_admin": self.admin,
        }


_FILE = click.Path(path_type=Path, exists=True, dir_okay=False)
_OPTIONS = (
    click.option("--tls-cert", type=_FILE, help="Serve TLS with this certificate (PEM)."),
    click.option("--tls-key", type=_FILE, help="The TLS certificate's private key (PEM)."),
    click.option(
        "--auth/--no-auth",
        "auth_enabled",
        default=False,
        help="Verify every request's RocketMQ signature and apply the ACL (rocketbox acl).",
    ),
    click.option(
        "--auth-key-file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="The key users' secrets are encrypted with at rest (made when first needed; "
        "default: DATA_DIR/config/acl.key).",
    ),
    click.option(
        "--auth-clock-skew-s",
        type=click.IntRange(0, CLOCK_SKEW_S_MAX),
        default=CLOCK_SKEW_S_DEFAULT,
        help="How far a request's signed date may be from this clock.",
    ),
    click.option(
        "--auth-admin-file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="access_key=/secret_key= lines of an admin user made at start (or "
        f"{ADMIN_ACCESS_KEY_ENV} and {ADMIN_SECRET_KEY_ENV}).",
    ),
)
_NAMES = ("tls_cert", "tls_key", "auth_enabled", "auth_key_file", "auth_clock_skew_s",
          "auth_admin_file")  # fmt: skip


def _admin(admin_file: Path | None) -> Credentials | None:
    """The bootstrap admin, held to the ACL's rules on users before anything starts: one line
    naming where it came from, the field and the limit (StartRefused), never a traceback from
    the store's start."""
    try:
        admin = read_credentials(admin_file, ADMIN_ACCESS_KEY_ENV, ADMIN_SECRET_KEY_ENV)
    except CredentialsError as e:
        raise StartRefused(f"--auth-admin-file: {e}" if admin_file else str(e)) from e
    if admin is None:
        return None
    try:
        validate_user(admin.access_key, admin.secret_key)
    except AclInputError as e:
        if admin_file is not None:
            source = f"--auth-admin-file {admin_file}"
        elif ACCESS_KEY_PATTERN.fullmatch(admin.access_key) is None:
            source = ADMIN_ACCESS_KEY_ENV
        else:
            source = ADMIN_SECRET_KEY_ENV
        raise StartRefused(f"{source}: {e}") from e
    return admin


def security_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the options; the command receives them as one ``security`` argument."""

    # wraps: keeps the name, the docstring and the options already added to ``command``.
    @functools.wraps(command)
    def gather(**kwargs: Any) -> None:
        fields = {name: kwargs.pop(name) for name in _NAMES}
        security = SecurityOptions(
            fields["tls_cert"],
            fields["tls_key"],
            fields["auth_enabled"],
            fields["auth_key_file"],
            fields["auth_clock_skew_s"],
            _admin(fields["auth_admin_file"]),
        )
        command(security=security, **kwargs)

    for option in reversed(_OPTIONS):
        gather = option(gather)
    return gather
