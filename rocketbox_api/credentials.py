"""An access key and secret key, read from a file or the environment: never from a command line,
where ``ps`` and shell histories would show them.

The file holds two lines (blank lines and ``#`` comments aside), each once::

    access_key=app
    secret_key=...

which is what a Kubernetes Secret mounted as a file, or an operator's ``chmod 600`` file, holds.
``Credentials`` never shows its secret (repr, str); errors name the file or the variable, never
a value.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rocketbox_api.signing import (
    AUTHORIZATION_HEADER,
    DATE_TIME_FORMAT,
    DATE_TIME_HEADER,
    authorization_value,
)

CREDENTIALS_FILE_BYTES_MAX = 4096
ACCESS_KEY_ENV = "ROCKETBOX_ACCESS_KEY"
SECRET_KEY_ENV = "ROCKETBOX_SECRET_KEY"  # noqa: S105 - a variable's name, not a secret


class CredentialsError(ValueError):
    """Credentials that cannot be read; says which file or variable, never its value."""


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str = field(repr=False)


def read_credentials_file(path: Path) -> Credentials:
    try:
        raw = path.read_bytes()[: CREDENTIALS_FILE_BYTES_MAX + 1]
    except OSError as e:
        raise CredentialsError(f"credentials file {path}: {e.strerror}") from None
    if len(raw) > CREDENTIALS_FILE_BYTES_MAX:
        raise CredentialsError(
            f"credentials file {path}: larger than {CREDENTIALS_FILE_BYTES_MAX} bytes"
        )
    values: dict[str, str] = {}
    line_of: dict[str, int] = {}
    for number, text in enumerate(raw.decode(errors="replace").splitlines(), 1):
        line = text.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or key not in ("access_key", "secret_key"):
            raise CredentialsError(
                f"credentials file {path}, line {number}: expected access_key=... or secret_key=..."
            )
        if key in line_of:
            # Which of two values was meant cannot be known: taking either would sign (or make
            # an admin) with a credential the operator may not have chosen.
            raise CredentialsError(
                f"credentials file {path}, line {number}: a second {key}= (the first is on "
                f"line {line_of[key]}); one of each"
            )
        line_of[key] = number
        values[key] = value.strip()
    missing = [k for k in ("access_key", "secret_key") if not values.get(k)]
    if missing:
        raise CredentialsError(f"credentials file {path}: no {' or '.join(missing)}")
    return Credentials(values["access_key"], values["secret_key"])


def credentials_from_env(
    environ: Mapping[str, str] | None = None,
    access_key_var: str = ACCESS_KEY_ENV,
    secret_key_var: str = SECRET_KEY_ENV,
) -> Credentials | None:
    """The credentials the two variables hold; None when neither is set."""
    env = os.environ if environ is None else environ
    access_key, secret_key = env.get(access_key_var, ""), env.get(secret_key_var, "")
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        missing = access_key_var if not access_key else secret_key_var
        raise CredentialsError(f"{missing} is not set (it goes with the other)")
    return Credentials(access_key, secret_key)


class Signer:
    """The dated metadata of a request made now: ``x-mq-date-time``, and with credentials its
    ``authorization``, recomputed once a second (the signature covers only the date, so a call
    within the second pays nothing for it). Without credentials: the date alone."""

    def __init__(self, credentials: Credentials | None) -> None:
        self._credentials = credentials
        self._secret = credentials.secret_key.encode() if credentials is not None else b""
        self._second = -1
        self._metadata: tuple[tuple[str, str], ...] = ()

    def metadata(self) -> tuple[tuple[str, str], ...]:
        second = int(time.time())
        if second != self._second:
            date = datetime.datetime.fromtimestamp(second, datetime.UTC).strftime(DATE_TIME_FORMAT)
            self._metadata = ((DATE_TIME_HEADER, date),)
            if self._credentials is not None:
                signed = authorization_value(self._credentials.access_key, self._secret, date)
                self._metadata += ((AUTHORIZATION_HEADER, signed),)
            self._second = second
        return self._metadata


def read_credentials(
    path: Path | None, access_key_var: str, secret_key_var: str
) -> Credentials | None:
    """From the file at ``path`` when given, else from the two variables (None: neither set)."""
    if path is not None:
        return read_credentials_file(path)
    return credentials_from_env(None, access_key_var, secret_key_var)
