"""What every ``rocketbox outbox`` command shares (outbox_cli.py holds the commands): the
``--outbox``/``--json``/``--sidecar`` options, the running sidecar asked for a change to the
outbox it holds (outbox_remote.py), the outbox opened on first use (read-only for a command that
only reads a RocksDB outbox), the exit codes, the one place backend errors become them
(``_translated``), and the arguments' types.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click
from rich.console import RenderableType

from outbox.entry import EntryState, SpoolCause
from outbox.errors import (
    OutboxConfigError,
    OutboxError,
    OutboxHeldError,
    OutboxNotFoundError,
    OutboxUnavailableError,
)
from outbox.factory import hide_password, open_outbox, redact
from outbox.holder import holder_path, read_holder, rocksdb_dir
from outbox.outbox import Outbox
from rocketbox import outbox_render as render
from rocketbox.exit_codes import FAILED_EXIT_CODE, UNREACHABLE_EXIT_CODE
from rocketbox.outbox_remote import SidecarAdminError, SidecarOutbox
from rocketbox.sidecar_security_options import client_token

# 1-3 as every client-side command (rocketbox/exit_codes.py); 4 and 5 the outbox commands' own.
OPERATION_ERROR_EXIT_CODE = FAILED_EXIT_CODE
NOT_FOUND_EXIT_CODE = 4
REFUSED_EXIT_CODE = 5

ACCEPTED_URLS = (
    "rocksdb:///absolute/path (or rocksdb://./relative/path), "
    "redis://[:password@]host:port/db?prefix=NAME (rediss:// for TLS), "
    "redis+sentinel://[:password@]host:port[,host:port...]/SERVICE?prefix=NAME, "
    "redis+cluster://[:password@]host:port[,host:port...]/?prefix=NAME, "
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
    except SidecarAdminError as e:
        if e.unreachable:
            raise OutboxUnreachableError(str(e)) from e
        raise OutboxOperationError(str(e)) from e
    except OutboxNotFoundError as e:
        # Exit 3 as for an unreachable one: there is no outbox to act on (4 is an entry missing
        # from an outbox that is there).
        raise OutboxUnreachableError(hide_password(str(e), url)) from e
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


def open_for_reading(url: str) -> Outbox:
    """An existing outbox, opened to be read beside the sidecar that writes it: a RocksDB one
    read-only (a snapshot as of the open; RocksDB admits one writing process). Nothing is
    created: a missing one is OutboxNotFoundError."""
    return open_outbox(_read_only_url(url), create=False)


class Session:
    """One command's outbox (opened on first use), its output mode and its clock."""

    def __init__(
        self, url: str, as_json: bool, pinned_now_ms: int | None, sidecar: str | None = None
    ) -> None:
        self.url = url
        self.sidecar = sidecar
        self._remote: SidecarOutbox | None = None
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
                try:
                    self._outbox = open_outbox(self.url, create=False)
                except OutboxHeldError as e:
                    raise OutboxUnreachableError(self._held_text()) from e
        return self._outbox

    def holder(self) -> SidecarOutbox | None:
        """The running sidecar to ask for changes: --sidecar, else a RocksDB outbox's live
        holder (outbox/holder.py); None: the outbox is opened directly."""
        if self._remote is None and self.sidecar is not None:
            self._remote = SidecarOutbox(
                self.sidecar, f"served by the sidecar at {self.sidecar}", token=client_token()
            )
        elif self._remote is None and _is_rocksdb(self.url):
            with _translated(self.url, opening=True):
                outbox_dir = rocksdb_dir(self.url)
            found = read_holder(outbox_dir) if outbox_dir is not None else None
            if found is not None and found.pid != os.getpid() and found.alive():
                self._remote = SidecarOutbox(
                    found.admin_endpoint, f"held by {found.describe()}", token=client_token()
                )
        return self._remote

    def retry_now(self, message_ids: Sequence[str] | None) -> int:
        return self._change(
            lambda remote: remote.retry_now(message_ids),
            lambda outbox: outbox.retry_now(message_ids, self.now_ms()),
        )

    def requeue(self, message_ids: Sequence[str] | None) -> int:
        return self._change(
            lambda remote: remote.requeue(message_ids),
            lambda outbox: outbox.requeue(message_ids, self.now_ms()),
        )

    def _change(
        self, through: Callable[[SidecarOutbox], int], directly: Callable[[Outbox], int]
    ) -> int:
        remote = self.holder()
        if remote is None:
            return directly(self.outbox)
        try:
            return through(remote)
        except SidecarAdminError as e:
            # A holder file naming a live pid that does not answer may be stale all the same (a
            # dead sidecar's pid taken by another process): RocksDB's lock is the truth. Tried
            # only when nothing went through the sidecar, so that the count stays exact.
            if not e.unreachable or self.sidecar is not None or remote.answered:
                raise
            try:
                with _translated(self.url, opening=True):
                    self._outbox = open_outbox(self.url, create=False)
            except OutboxUnreachableError:
                raise e from None
        return directly(self._outbox)

    def _held_text(self) -> str:
        """Why a RocksDB outbox could not be opened for a change: who holds it, if known."""
        outbox_dir = rocksdb_dir(self.url)
        assert outbox_dir is not None  # only RocksDB has a lock
        found = read_holder(outbox_dir)
        if found is not None and found.alive():
            # retry-now and requeue would have asked it: this command is one it does not serve.
            return (
                f"the outbox {outbox_dir} is held by {found.describe()}; this command needs the "
                "outbox to itself: stop that sidecar first"
            )
        stale = f" (the holder file names {found.describe()}, not running)" if found else ""
        return (
            f"the outbox {outbox_dir} is held by another process{stale}: RocksDB admits one, and "
            f"no running rocketbox sidecar recorded itself in {holder_path(outbox_dir)}. Stop "
            "that process, or name the sidecar holding it: --sidecar HOST:PORT"
        )

    @property
    def reader(self) -> Outbox:
        """The outbox, for a command that only reads it. A RocksDB outbox admits one writing
        process, the sidecar running beside this command, so it is opened read-only: a snapshot
        as of the open."""
        if self._outbox is not None:
            return self._outbox
        if self._reader is None:
            with _translated(self.url, opening=True):
                self._reader = open_for_reading(self.url)
        return self._reader

    def refresh(self) -> None:
        """Let the next read see what changed since: a read-only RocksDB snapshot is reopened."""
        if self._reader is not None and _is_rocksdb(self.url):
            self._reader.close()
            self._reader = None

    def close(self) -> None:
        if self._remote is not None:
            self._remote.close()
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
    @click.option(
        "--sidecar",
        envvar="ROCKETBOX_SIDECAR",
        metavar="HOST:PORT",
        default=None,
        help="Ask the sidecar serving here for retry-now, requeue and stats (found without it "
        "for a RocksDB outbox a running sidecar holds).",
    )
    # The clock ages are measured from: tests pin it to assert ages exactly, as the contract
    # takes its times as arguments.
    @click.option("--now-ms", "pinned_now_ms", type=click.IntRange(min=0), hidden=True)
    @functools.wraps(f)
    def command(
        outbox_url: str,
        as_json: bool,
        sidecar: str | None,
        pinned_now_ms: int | None,
        **kwargs: Any,
    ) -> None:
        session = Session(outbox_url, as_json, pinned_now_ms, sidecar)
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
