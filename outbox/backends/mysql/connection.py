"""The MySQL outbox's connection to its server (outbox/backends/mysql/outbox.py says what it
promises): the engine and its deadlines, the schema created at open, the one place driver errors
are translated, and the FIFO group locks (MariaDB user locks) that claims and requeues hold.
``MySQLConnection`` is the base the backend's parts build on.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine, make_url

from outbox.backends.mysql.rows import (
    row_to_entry,
)
from outbox.backends.mysql.schema import (
    COUNTER_COLUMNS,
    COUNTER_SLOTS,
    DEAD,
    DELIVERED,
    PENDING,
    STATS_ROW_ID,
    TABLE_NAME_CHARS_MAX,
    Statements,
    tables,
)
from outbox.backends.mysql.upgrade import add_missing, count_if_uncounted
from outbox.entry import DeliveryReceipt, OutboxEntry, OutboxLimits
from outbox.errors import (
    OutboxConfigError,
    OutboxNoSpaceError,
    OutboxNotFoundError,
    OutboxUnavailableError,
)
from outbox.factory import redact
from outbox.group_commit import BatchCommitter, GroupCommitter, Result
from outbox.outbox import Outbox

_T = TypeVar("_T")

TABLE_DEFAULT = "rocketbox_outbox"


_TABLE_NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{TABLE_NAME_CHARS_MAX - 1}}}")
IN_LIST_MAX = 1_000
# How long ``requeue`` waits for a FIFO group's lock (a claim holds one for milliseconds).
GROUP_LOCK_WAIT_S = 10
# What a row needs in a statement beyond its escaped fields (escaping doubles bytes at worst).
ROW_OVERHEAD_BYTES = 64 * 1024

# Connections: the resend pool's workers, the two committers and an admin call at once.
POOL_SIZE = 8
POOL_OVERFLOW_MAX = 8
POOL_TIMEOUT_S = 10
# Below the server's wait_timeout (8 h by default): never hand out a connection it has closed.
POOL_RECYCLE_S = 3_600
# Every network wait has a deadline; a lock wait gives up before the read does.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
WRITE_TIMEOUT_S = 30
LOCK_WAIT_TIMEOUT_S = 10

# Server errors of a full disk: ER_DISK_FULL, ER_RECORD_FILE_FULL ("The table is full"), and
# ER_ERROR_ON_WRITE when it quotes ENOSPC (errno 28).
_NO_SPACE_ERRORS = frozenset({1021, 1114})
_ER_ERROR_ON_WRITE = 1026


class MySQLConnection(Outbox):
    """The engine, the schema and the error translation every part of the backend uses."""

    def __init__(self, url: str, limits: OutboxLimits, *, create: bool = True) -> None:
        super().__init__(limits)
        try:
            parsed = make_url(url)
        except (sa_exc.ArgumentError, ValueError) as e:  # a port that is no number …
            raise OutboxConfigError(f"outbox URL {redact(url)!r}: {e}") from e
        table = parsed.query.get("table", TABLE_DEFAULT)
        if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
            raise OutboxConfigError(
                f"outbox URL {redact(url)!r}: table {table!r} must be one identifier of letters, "
                f"digits and underscores, at most {TABLE_NAME_CHARS_MAX} characters"
            )
        if not parsed.database:
            raise OutboxConfigError(f"outbox URL {redact(url)!r} names no database")
        self.table_name = table
        self._database = parsed.database
        # Named in every error: the URL (without its password) and the table.
        self._where = redact(url) if "table" in parsed.query else f"{redact(url)} (table {table})"
        self._closed = False
        self._tables = tables(table)
        self._entries, self._counters = self._tables.entries, self._tables.counters
        self._sql = Statements(self._entries, self._counters)
        self._engine = mysql_engine(parsed.difference_update_query(["table"]))
        try:
            if not create:
                self._check_schema()
            self._entry_bytes_max = self._open_schema(create) - ROW_OVERHEAD_BYTES
        except BaseException:
            self._engine.dispose()
            raise
        self._puts = GroupCommitter(self._commit_puts, name=f"outbox-mysql-put-{table}")
        self._deliveries: BatchCommitter[tuple[str, DeliveryReceipt], bool] = BatchCommitter(
            self._commit_deliveries, name=f"outbox-mysql-delivered-{table}"
        )

    @contextlib.contextmanager
    def _translated(self, operation: str) -> Iterator[None]:
        """The one place where driver errors become outbox errors."""
        if self._closed:
            raise OutboxUnavailableError(f"MySQL outbox {self._where} is closed")
        try:
            yield
        except sa_exc.DBAPIError as e:
            reason = "connection lost" if e.connection_invalidated else type(e.orig).__name__
            if no_space(e.orig):
                raise OutboxNoSpaceError(
                    f"MySQL outbox {self._where}: {operation} failed: the server's disk is "
                    f"full: {e.orig}"
                ) from e
            raise OutboxUnavailableError(
                f"MySQL outbox {self._where}: {operation} failed ({reason}): {e.orig}"
            ) from e
        except sa_exc.TimeoutError as e:  # no pooled connection came free in time
            raise OutboxUnavailableError(
                f"MySQL outbox {self._where}: {operation} failed: {e}"
            ) from e

    @contextlib.contextmanager
    def _transaction(self, operation: str) -> Iterator[Connection]:
        with self._translated(operation), self._engine.begin() as conn:
            yield conn

    def _check_schema(self) -> None:
        """Both tables are there (a reader's open): a misspelt table is an error, never created."""
        with self._translated("opening the outbox"):
            inspector = sa.inspect(self._engine)
            missing = [
                t.name for t in (self._entries, self._counters) if not inspector.has_table(t.name)
            ]
        if missing:
            raise OutboxNotFoundError(
                # Both are created together: name the entries table unless it alone is there.
                f"no such outbox table {missing[0]!r} in database "
                f"{self._database!r}: MySQL outbox {self._where} (only the sidecar creates its "
                "outbox's tables)"
            )

    def _open_schema(self, create: bool) -> int:
        """Create what is missing (``create``: a writer's open); returns the server's
        max_allowed_packet."""
        with self._translated("opening the outbox"):
            if create:
                try:
                    self._entries.metadata.create_all(self._engine)
                except sa_exc.DBAPIError:
                    # Another sidecar created a table between our check and our CREATE.
                    self._entries.metadata.create_all(self._engine)
            # A reader adds the columns too, or its reads would name columns that are not
            # there; indexes only a writer adds.
            add_missing(self._engine, self._tables, indexes=create)
            with self._engine.begin() as conn:
                if create:
                    self._fill_counters(conn)
                max_allowed_packet = conn.exec_driver_sql("SELECT @@max_allowed_packet")
                packet_bytes = int(max_allowed_packet.scalar_one())
            if create:
                count_if_uncounted(self._engine, self._tables)
            return packet_bytes

    def _fill_counters(self, conn: Connection) -> None:
        """The counters' rows and the stats row, those missing only (INSERT IGNORE)."""
        entries, counters = self._entries, self._counters
        if conn.execute(sa.select(counters.c.slot).where(counters.c.slot == 0)).first() is None:
            # Counted from the entries, should the table predate its counters.
            state = entries.c.state

            def total(condition: sa.ColumnElement[bool], value: Any = 1) -> Any:
                return sa.func.coalesce(sa.func.sum(sa.case((condition, value), else_=0)), 0)

            held = state.in_((PENDING, DEAD))
            counted = sa.select(
                sa.literal(0),
                total(held),
                total(held, entries.c.body_size),
                total(state == DEAD),
                total(state == DELIVERED),
            )
            conn.execute(
                counters.insert()
                .prefix_with("IGNORE")
                .from_select(["slot", *COUNTER_COLUMNS], counted)
            )
        conn.execute(
            counters.insert().prefix_with("IGNORE"),
            [
                {"slot": slot, **dict.fromkeys(COUNTER_COLUMNS, 0)}
                for slot in range(1, COUNTER_SLOTS + 1)
            ],
        )
        conn.execute(
            self._tables.stats.insert().prefix_with("IGNORE"),
            {"id": STATS_ROW_ID, "lease_until_ms": 0},
        )

    def _get_many(self, conn: Connection, message_ids: Sequence[str]) -> list[OutboxEntry]:
        found: list[OutboxEntry] = []
        for batch in chunks(message_ids, IN_LIST_MAX):
            rows = conn.execute(self._sql.entries_by_ids, {"ids": batch}).mappings()
            found.extend(row_to_entry(row) for row in rows)
        return found

    def _count(self, conn: Connection, slot: int, **changes: int) -> None:
        """Add ``changes`` (counter column → how many, negative to count out) to ``slot``."""
        assert changes.keys() <= set(COUNTER_COLUMNS), changes
        params = {f"add_{column}": changes.get(column, 0) for column in COUNTER_COLUMNS}
        conn.execute(self._sql.count_change, {"to_slot": slot, **params})

    def _group_lock(self, topic: str, message_group: str) -> str:
        return group_lock_name(self._database, self.table_name, topic, message_group)

    @contextlib.contextmanager
    def _group_locks(self) -> Iterator[GroupLocks]:
        """A connection whose FIFO group locks, if it takes any, are given back at the end
        (after its transaction: whoever takes them next must see what it committed)."""
        with self._engine.connect() as conn:
            locks = GroupLocks(conn)
            try:
                yield locks
            finally:
                locks.release_all()

    def close(self) -> None:
        if self._closed:
            return
        self._puts.close()
        self._deliveries.close()
        self._closed = True
        self._engine.dispose()

    @abc.abstractmethod
    def _commit_puts(self, requests: Sequence[Sequence[OutboxEntry]]) -> list[Result]:
        """One transaction for a group commit batch of puts (puts.py)."""

    @abc.abstractmethod
    def _commit_deliveries(
        self, requests: Sequence[tuple[str, DeliveryReceipt]]
    ) -> list[bool | BaseException]:
        """One transaction for a batch of tombstones (settlements.py)."""


class GroupLocks:
    """The FIFO group locks (MariaDB user locks) one connection holds."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._held = False

    def take(self, names: Iterable[str], wait_s: int) -> list[str]:
        """The names whose lock was taken. In sorted order, so that two takers that wait
        cannot deadlock."""
        ordered = sorted(names)
        if not ordered:
            return []
        self._held = True
        if wait_s == 0:  # one round trip for them all
            got = self.conn.execute(sa.select(*(sa.func.get_lock(n, 0) for n in ordered))).one()
            return [name for name, ok in zip(ordered, got, strict=True) if ok == 1]
        taken = []
        for name in ordered:
            if self.conn.execute(sa.select(sa.func.get_lock(name, wait_s))).scalar_one() != 1:
                break
            taken.append(name)
        return taken

    def release_all(self) -> None:
        if not self._held:
            return
        try:
            self.conn.exec_driver_sql("DO RELEASE_ALL_LOCKS()")
        except sa_exc.DBAPIError:
            # The server drops a session's user locks with the session: make sure it goes.
            self.conn.invalidate()
            raise


def group_lock_name(database: str, table: str, topic: str, message_group: str) -> str:
    """The MariaDB user lock (GET_LOCK) that claims and requeues of one FIFO group hold while
    they change it. User lock names are server-wide and at most 64 characters."""
    key = f"{database}\0{table}\0{topic}\0{message_group}".encode()
    return f"rocketbox:{hashlib.sha1(key, usedforsecurity=False).hexdigest()}"


def mysql_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {
        key: value
        for key, value in {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": READ_TIMEOUT_S,
            "write_timeout": WRITE_TIMEOUT_S,
        }.items()
        if key not in url.query  # the URL's own deadlines win
    }
    connect_args["init_command"] = f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}"
    if "charset" not in url.query:
        url = url.update_query_dict({"charset": "utf8mb4"})
    return sa.create_engine(
        url,
        pool_pre_ping=True,
        pool_size=POOL_SIZE,
        max_overflow=POOL_OVERFLOW_MAX,
        pool_timeout=POOL_TIMEOUT_S,
        pool_recycle=POOL_RECYCLE_S,
        # No ROLLBACK round trip as a connection goes back to the pool: every use ends its own
        # transaction (``engine.begin()``, or ``Connection.close()`` rolling back).
        pool_reset_on_return=None,
        # Each statement sees what was committed before it (the FIFO confirmation relies on
        # it), and InnoDB takes no gap locks that would make claims and puts wait on each other.
        isolation_level="READ COMMITTED",
        connect_args=connect_args,
    )


def no_space(error: BaseException | None) -> bool:
    """A driver error saying the server's disk (or the table's tablespace) is full."""
    args = getattr(error, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    if code in _NO_SPACE_ERRORS:
        return True
    return code == _ER_ERROR_ON_WRITE and "errno: 28" in str(error)


def chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
