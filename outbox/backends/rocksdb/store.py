"""The RocksDB outbox's database (outbox/backends/rocksdb/outbox.py says what it promises):
opening it, the one place rocksdict's errors are translated, the batch write every change ends
in, and what a full disk does (outbox/disk_reserve.py): the reserve, the reopen, the refusal of
puts. ``RocksDBStore`` is the base the backend's parts build on; it holds no contract method
but ``check_writable`` and ``close``.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar
from urllib.parse import urlsplit

import rocksdict

from outbox.backends.rocksdb.layout import (
    PROBE_KEY,
)
from outbox.backends.rocksdb.state import State, Txn, index_items, load_state
from outbox.disk_reserve import (
    INFO_LOGS_KEPT,
    REOPEN_LOG_INTERVAL_S,
    RESERVE_BYTES_DEFAULT,
    SPACE_CHECK_INTERVAL_S,
    WRITE_BUFFER_BYTES_DEFAULT,
    WRITE_BUFFERS,
    DiskReserve,
    check_sizes,
    is_no_space,
    reserve_bytes_min,
)
from outbox.entry import OutboxEntry, OutboxLimits
from outbox.errors import (
    OutboxConfigError,
    OutboxHeldError,
    OutboxNoSpaceError,
    OutboxUnavailableError,
)
from outbox.factory import redact
from outbox.group_commit import GroupCommitter, Result
from outbox.outbox import Outbox
from rocketbox_api.lock_holder import lock_holders
from rocketbox_api.rate_limited_log import RateLimitedLog

log = logging.getLogger("outbox.backends.rocksdb")

URL_OPTIONS = ("statistics", "read_only", "reserve_bytes", "write_buffer_bytes")

P = ParamSpec("P")
T = TypeVar("T")
StoreT = TypeVar("StoreT", bound="RocksDBStore")


class RetryAfterNoSpaceError(Exception):
    """A write failed for want of space and the reserve was released for it: try once more."""


def retried_after_no_space(
    method: Callable[Concatenate[StoreT, P], T],
) -> Callable[Concatenate[StoreT, P], T]:
    """A method that writes, run once more when its write failed for want of space and the
    reserve was released for it (the second failure raises OutboxNoSpaceError). Each run
    starts from what the database holds: the failed one changed nothing."""

    @functools.wraps(method)
    def run(self: StoreT, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except RetryAfterNoSpaceError:
            return method(self, *args, **kwargs)

    return run


@contextlib.contextmanager
def rocksdb_errors(path: Path) -> Iterator[None]:
    """The one place rocksdict's errors become OutboxUnavailableError."""
    try:
        yield
    except rocksdict.DbClosedError as e:
        raise OutboxUnavailableError(f"rocksdb outbox {path} is closed") from e
    except OSError as e:
        raise OutboxUnavailableError(f"rocksdb outbox {path}: {e}") from e
    except Exception as e:
        # rocksdict raises RocksDB's own errors (IO error, Corruption, lock held) as a bare
        # Exception; anything more specific is a bug of ours and must not pass as unavailability.
        if type(e) is not Exception:
            raise
        if "lock" in str(e).lower():
            pids = lock_holders(path / "LOCK")
            holder = f"pid {', '.join(map(str, pids))}" if pids else "another process or instance"
            raise OutboxHeldError(
                f"rocksdb outbox {path}: {e} (held by {holder}; RocksDB allows one process, "
                "one instance)"
            ) from e
        raise OutboxUnavailableError(f"rocksdb outbox {path}: {e}") from e


def rocksdb_path(url: str) -> Path:
    """The database directory a ``rocksdb://`` URL names."""
    parts = urlsplit(url)
    if parts.netloc == "" and parts.path.startswith("/") and parts.path != "/":
        return Path(parts.path)
    if parts.netloc == "." and parts.path not in ("", "/"):
        return Path("." + parts.path)
    raise OutboxConfigError(
        f"outbox URL {redact(url)!r}: want rocksdb:///absolute/path or rocksdb://./relative/path"
    )


def _options(write_buffer_bytes: int, *, statistics: bool, create: bool) -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(create)
    # They bound what a reopen writes, which the reserve must hold (outbox/disk_reserve.py).
    options.set_write_buffer_size(write_buffer_bytes)
    options.set_max_write_buffer_number(WRITE_BUFFERS)
    options.set_keep_log_file_num(INFO_LOGS_KEPT)
    if statistics:
        options.enable_statistics()
    return options


class RocksDBStore(Outbox):
    """The database and its in-memory state, under one lock; a full disk handled here."""

    def __init__(
        self,
        path: Path,
        limits: OutboxLimits,
        *,
        statistics: bool = False,
        read_only: bool = False,
        reserve_bytes: int = RESERVE_BYTES_DEFAULT,
        write_buffer_bytes: int = WRITE_BUFFER_BYTES_DEFAULT,
        sync_claims: bool = True,
    ) -> None:
        super().__init__(limits)
        check_sizes(reserve_bytes, write_buffer_bytes)
        self.path = path
        self.read_only = read_only
        self.write_buffer_bytes = write_buffer_bytes
        # False only to measure what the claims' fsync costs, and to show what it prevents
        # (outbox.py: durability): a power cut may then bring claimed entries back unmarked.
        self.sync_claims = sync_claims
        self._reserve = DiskReserve(path, reserve_bytes)
        # Why puts are refused for want of space (None: they are not), and when the free space
        # is next looked at; both under _space_lock, which is taken after _lock, never before.
        self._no_space: str | None = None
        self._next_space_check_s = 0.0
        self._space_lock = threading.Lock()
        # The leases found at the first open: (lease_until_ms, seq) by message id. Their holder
        # is gone; they stay ended should the database be reopened (a full disk).
        self._dead_leases: dict[str, tuple[int, int]] = {}
        self._options = _options(write_buffer_bytes, statistics=statistics, create=not read_only)
        self._unsynced = rocksdict.WriteOptions()
        self._synced = rocksdict.WriteOptions()
        self._synced.sync = True
        self._lock = threading.Lock()
        self._closed = False
        # Set when a failed write left the database or its in-memory state unusable: it is
        # reopened (_check_open), no sooner than _next_reopen_s.
        self._broken = False
        self._next_reopen_s = 0.0
        # A disk that stays full fails a reopen every SPACE_CHECK_INTERVAL_S: one line per
        # interval, with the traceback, saying how many more failed.
        self.reopen_failures = RateLimitedLog(log, logging.ERROR, REOPEN_LOG_INTERVAL_S)
        with rocksdb_errors(path):
            if not read_only:
                path.mkdir(parents=True, exist_ok=True)
            self._db = rocksdict.Rdict(str(path), self._options, access_type=self._access())
            try:
                self._state = self._load_state()
                if not read_only:
                    self._dead_leases = dict(self._state.leases)
                    for message_id in self._dead_leases:
                        self._state.end_lease(message_id)
                    self._make_reserve()
            except BaseException:
                self._db.close()  # give the directory's lock back
                raise
        self._committer = GroupCommitter(self._commit, name=f"rocksdb-outbox-put:{path.name}")
        log.info(
            "rocksdb outbox %s open: %d pending (%d under a lease its dead holder left), "
            "%d dead, %d delivered",
            path,
            self._state.pending,
            len(self._dead_leases),
            self._state.dead,
            self._state.delivered,
        )

    @abc.abstractmethod
    def _commit(self, requests: Sequence[Sequence[OutboxEntry]]) -> list[Result]:
        """Stage and write one batch of put requests, on the committer thread (puts.py)."""

    def check_writable(self) -> None:
        refusal = self._space_refusal()
        if refusal is not None:
            raise refusal
        with self._lock, rocksdb_errors(self.path):
            self._check_open()
            db = self._db
        try:
            # Outside the lock: claims do not wait for this fsync.
            with rocksdb_errors(self.path):
                db.put(PROBE_KEY, b"", self._synced)
        except OutboxUnavailableError as e:
            failure = e.__cause__
            if failure is None or not is_no_space(failure):
                raise
            with self._lock:
                self._recover_from_no_space(db, failure)
            raise self._no_space_error() from failure

    def close(self) -> None:
        self._committer.close()
        with self._lock, rocksdb_errors(self.path):
            if self._closed:
                return
            self._closed = True
            try:
                self._db.close()
            except rocksdict.DbClosedError:
                if not self._broken:  # a failed reopen closed it; nothing else may
                    raise

    def ticker(self, name: str) -> int:
        """A RocksDB statistics ticker (``rocksdb.number.iter.skip`` …); needs statistics."""
        text = self._options.get_statistics()
        if text is None:
            raise OutboxConfigError("open the outbox with ?statistics=true to read tickers")
        for line in text.splitlines():
            words = line.split()
            if words[:2] == [name, "COUNT"]:
                return int(words[-1])
        raise KeyError(name)

    def _txn(self) -> Txn:
        return Txn(self._db, self._state.floors)

    def _write(self, txn: Txn) -> None:
        """Write the batch (the caller holds the lock). Should the disk be full: the reserve is
        released and the database reopened, and RetryAfterNoSpaceError asks the caller to try once
        more in the room it left, or OutboxNoSpaceError says there is none left to give."""
        db = self._db
        try:
            db.write(txn.batch, self._unsynced)
        except BaseException as e:
            if is_no_space(e):
                if self._recover_from_no_space(db, e):
                    raise RetryAfterNoSpaceError from e
                raise self._no_space_error() from e
            # The in-memory state already counts this batch: rebuild it from what the DB holds.
            try:
                self._state = self._load_state()
            except BaseException as rebuild:
                self._broken = True
                self.reopen_failures.log(
                    "rocksdb outbox %s: no state rebuilt after a failed write: %s",
                    self.path, rebuild, exc_info=rebuild,
                )  # fmt: skip
            raise

    def _flush_wal(self, db: rocksdict.Rdict) -> None:
        try:
            db.flush_wal(True)
        except Exception as e:
            if not is_no_space(e):
                raise
            with self._lock:
                self._recover_from_no_space(db, e)
            raise self._no_space_error() from e

    def _make_reserve(self) -> None:
        """At open: the reserve in place, or spools refused from the start (saying why)."""
        if self._reserve.held() or self._reserve.restore():
            return
        self._no_space = "no room for the disk reserve"
        self._next_space_check_s = time.monotonic() + SPACE_CHECK_INTERVAL_S
        log.error(
            "rocksdb outbox %s refuses spools: %s (%s); make room for it (it must hold what a "
            "reopen on a full disk writes: at least %d bytes with write_buffer_bytes=%d)",
            self.path, self._no_space, self._reserve.describe(),
            reserve_bytes_min(self.write_buffer_bytes), self.write_buffer_bytes,
        )  # fmt: skip

    def _recover_from_no_space(self, failed_db: rocksdict.Rdict, error: BaseException) -> bool:
        """A write to ``failed_db`` failed for want of space (the caller holds the lock): refuse
        puts from now on, release the reserve, and reopen the database (its log stays failed
        otherwise) unless another thread did already. Whether a reserve was released."""
        with self._space_lock:
            released = self._reserve.release()
            if self._no_space is None:
                self._no_space = "the disk filled"
                log.error(
                    "rocksdb outbox %s: the disk is full (%s): spools refused, claims and "
                    "deliveries go on%s",
                    self.path, error,
                    " in the room of its released reserve" if released else " (no reserve left)",
                )  # fmt: skip
            self._next_space_check_s = time.monotonic() + SPACE_CHECK_INTERVAL_S
        if self._db is failed_db:
            self._reopen()
        return released

    def _reopen(self) -> None:
        """Close the database and open it again (the caller holds the lock); its in-memory
        state is rebuilt from what it holds."""
        # Its background work stopped first: after a failed log write, close would wait a second
        # for it. A failed log makes close report it; the handle is dropped all the same.
        with contextlib.suppress(Exception):
            self._db.cancel_all_background(False)
        with contextlib.suppress(Exception):
            self._db.close()
        try:
            self._db = rocksdict.Rdict(str(self.path), self._options, access_type=self._access())
            self._state = self._load_state()
        except BaseException as e:
            self._broken = True
            self.reopen_failures.log(
                "rocksdb outbox %s: reopening it failed (tried again every %.1f s): %s",
                self.path, SPACE_CHECK_INTERVAL_S, e, exc_info=e,
            )  # fmt: skip
            raise
        self._broken = False
        log.warning("rocksdb outbox %s reopened", self.path)

    def _access(self) -> rocksdict.AccessType:
        if self.read_only:
            return rocksdict.AccessType.read_only()
        return rocksdict.AccessType.read_write()

    def _space_refusal(self) -> OutboxNoSpaceError | None:
        """None while puts may be tried; else why not. Looks at the free space again (at most
        every SPACE_CHECK_INTERVAL_S) and, with enough of it, makes the reserve again."""
        with self._space_lock:
            if self._no_space is None:
                return None
            now_s = time.monotonic()
            if now_s >= self._next_space_check_s:
                self._next_space_check_s = now_s + SPACE_CHECK_INTERVAL_S
                if self._reserve.restore():
                    log.warning(
                        "rocksdb outbox %s has room again (%s): spools are taken again",
                        self.path, self._reserve.describe(),
                    )  # fmt: skip
                    self._no_space = None
                    return None
            return self._no_space_error_locked()

    def _no_space_error(self) -> OutboxNoSpaceError:
        with self._space_lock:
            return self._no_space_error_locked()

    def _no_space_error_locked(self) -> OutboxNoSpaceError:
        return OutboxNoSpaceError(
            f"rocksdb outbox {self.path} has no room for new entries: "
            f"{self._no_space or 'the disk filled'}; {self._reserve.describe()}"
        )

    def _check_open(self) -> None:
        """Raise unless the database can be used now (the caller holds the lock); one that
        failed a write and was left unusable is reopened, at most every
        SPACE_CHECK_INTERVAL_S."""
        if self._closed:
            raise OutboxUnavailableError(f"rocksdb outbox {self.path} is closed")
        if self._broken and time.monotonic() >= self._next_reopen_s:
            self._next_reopen_s = time.monotonic() + SPACE_CHECK_INTERVAL_S
            with contextlib.suppress(Exception):  # logged by _reopen
                self._reopen()
        if self._broken:
            raise OutboxUnavailableError(
                f"rocksdb outbox {self.path} failed a write and could not be reopened yet"
            )

    def _items(
        self, prefix: bytes, lower: bytes, upper: bytes, limit: int
    ) -> list[tuple[bytes, bytes]]:
        return index_items(self._db, self._state.floors, prefix, lower, upper, limit)

    def _raise_floor(self, prefix: bytes, key: bytes) -> None:
        floors = self._state.floors
        floors[prefix] = max(floors[prefix], key)

    def _load_state(self) -> State:
        state = load_state(self._db)
        # A reopen finds the leases of the dead process again: they stay ended.
        for message_id, lease in self._dead_leases.items():
            if state.leases.get(message_id) == lease:
                state.end_lease(message_id)
        return state
