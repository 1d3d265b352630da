"""What every ``rocketbox outbox`` command shares (outbox_cli.py holds the commands): the
``--outbox``/``--json`` options, the outbox opened on first use (read-only for a command that only
reads a RocksDB outbox), the exit codes, the one place backend errors become them
(``_translated``), and the arguments' types.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click
from rich.console import RenderableType

from outbox.entry import EntryState, SpoolCause
from outbox.errors import OutboxConfigError, OutboxError, OutboxUnavailableError
from outbox.factory import hide_password, open_outbox, redact
from outbox.outbox import Outbox
from rocketbox import outbox_render as render

OPERATION_ERROR_EXIT_CODE = 1
USAGE_EXIT_CODE = 2
UNREACHABLE_EXIT_CODE = 3
NOT_FOUND_EXIT_CODE = 4
REFUSED_EXIT_CODE = 5

ACCEPTED_URLS = (
    "rocksdb:///absolute/path (or rocksdb://./relative/path), "
    "redis://[:password@]host:port/db?prefix=NAME (rediss:// for TLS), "
    "mysql+pymysql://user:password@host:port/db?table=NAME"
)
OUTBOX_PARAM_HINT = "'--outbox' / ROCKETBOX_OUTBOX"
STATES = [s.value.lower() for s in EntryState]
CAUSES = [c.value.lower() for c in SpoolCause]


class OutboxOperationError(click.ClickException):
    exit_code = OPERATION_ERROR_EXIT_CODE


class OutboxUnreachableError(click.ClickException):
    exit_code = UNREACHABLE_EXIT_CODE


class EntryNotFoundError(click.ClickException):
    exit_code = NOT_FOUND_EXIT_CODE


class RefusedError(click.ClickException):
    exit_code = REFUSED_EXIT_CODE


@contextlib.contextmanager
def _translated(url: str, *, opening: bool) -> Iterator[None]:
    """The one place where outbox errors become exit codes."""
    try:
        yield
    except OutboxConfigError as e:
        message = hide_password(str(e), url)
        if opening:
            raise click.BadParameter(
                f"{message}. Accepted URLs: {ACCEPTED_URLS}", param_hint=OUTBOX_PARAM_HINT
            ) from e
        raise OutboxOperationError(message) from e
    except OutboxUnavailableError as e:
        raise OutboxUnreachableError(
            f"the outbox is unreachable: {hide_password(str(e), url)}"
        ) from e
    except OutboxError as e:
        raise OutboxOperationError(hide_password(str(e), url)) from e


def _is_rocksdb(url: str) -> bool:
    return urlsplit(url).scheme.lower() == "rocksdb"


def _read_only_url(url: str) -> str:
    """``url``, for RocksDB with ``read_only=true``; Redis and MySQL are shared anyway."""
    if not _is_rocksdb(url):
        return url
    parts = urlsplit(url)
    query = f"{parts.query}&read_only=true" if parts.query else "read_only=true"
    return urlunsplit(parts._replace(query=query))


def _check_rocksdb_exists(url: str) -> None:
    """Opening a RocksDB outbox creates it when missing: right for a sidecar, wrong for an
    admin command, where a mistyped path would show an empty outbox instead of an error."""
    if not _is_rocksdb(url):
        return
    from outbox.backends.rocksdb.store import rocksdb_path  # noqa: PLC0415 - imports rocksdict

    path = rocksdb_path(url)
    if not (path / "CURRENT").is_file():
        raise OutboxConfigError(f"outbox URL {redact(url)!r}: no RocksDB database at {path}")


class Session:
    """One command's outbox (opened on first use), its output mode and its clock."""

    def __init__(self, url: str, as_json: bool, pinned_now_ms: int | None) -> None:
        self.url = url
        self.shown_url = hide_password(redact(url), url)
        self.as_json = as_json
        self._pinned_now_ms = pinned_now_ms
        self._outbox: Outbox | None = None
        self._reader: Outbox | None = None

    @property
    def outbox(self) -> Outbox:
        """The outbox, for a command that changes it."""
        if self._outbox is None:
            with _translated(self.url, opening=True):
                _check_rocksdb_exists(self.url)
                self._outbox = open_outbox(self.url)
        return self._outbox

    @property
    def reader(self) -> Outbox:
        """The outbox, for a command that only reads it. A RocksDB outbox admits one writing
        process, the sidecar running beside this command, so it is opened read-only: a snapshot
        as of the open."""
        if self._outbox is not None:
            return self._outbox
        if self._reader is None:
            with _translated(self.url, opening=True):
                _check_rocksdb_exists(self.url)
                self._reader = open_outbox(_read_only_url(self.url))
        return self._reader

    def refresh(self) -> None:
        """Let the next read see what changed since: a read-only RocksDB snapshot is reopened."""
        if self._reader is not None and _is_rocksdb(self.url):
            self._reader.close()
            self._reader = None

    def close(self) -> None:
        for opened in (self._outbox, self._reader):
            if opened is not None:
                opened.close()

    def now_ms(self) -> int:
        return self._pinned_now_ms if self._pinned_now_ms is not None else int(time.time() * 1000)

    def emit(self, data: Any, view: Callable[[], RenderableType]) -> None:
        """``data`` as JSON with --json, else what ``view`` draws."""
        if self.as_json:
            click.echo(json.dumps(data, indent=2, sort_keys=True))
        else:
            render.print_view(view())


def outbox_command(f: Callable[..., None]) -> Callable[..., None]:
    """--outbox, --json (and the hidden --now-ms) for a command taking (session, ...)."""

    @click.option(
        "--outbox",
        "outbox_url",
        required=True,
        metavar="URL",
        help="The outbox: rocksdb:///path, redis://host:port/db?prefix=NAME or "
        "mysql+pymysql://user:password@host:port/db?table=NAME.",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts, nothing else.")
    # The clock ages are measured from: tests pin it to assert ages exactly, as the contract
    # takes its times as arguments.
    @click.option("--now-ms", "pinned_now_ms", type=click.IntRange(min=0), hidden=True)
    @functools.wraps(f)
    def command(outbox_url: str, as_json: bool, pinned_now_ms: int | None, **kwargs: Any) -> None:
        session = Session(outbox_url, as_json, pinned_now_ms)
        with _translated(outbox_url, opening=False):
            try:
                f(session, **kwargs)
            finally:
                session.close()

    return command


_AGE_PATTERN = re.compile(r"(\d+)(ms|s|m|h|d)")
_AGE_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class AgeType(click.ParamType[int]):
    """An age such as 500ms, 30s, 5m, 2h or 1d, in ms."""

    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        found = _AGE_PATTERN.fullmatch(str(value).strip())
        if found is None:
            self.fail(f"{value!r} is not an age such as 30s, 5m, 2h or 1d", param, ctx)
        return int(found[1]) * _AGE_UNIT_MS[found[2]]


AGE = AgeType()


def parse_state(value: str | None) -> EntryState | None:
    return None if value is None else EntryState(value.upper())


def state_value(state: EntryState | None) -> str | None:
    return None if state is None else state.value


def ids_or_all(message_ids: Sequence[str], every: bool) -> list[str] | None:
    if bool(message_ids) == every:
        raise click.UsageError("name the entries by message id, or say --all (one of the two)")
    return None if every else list(message_ids)
