"""What the MySQL outbox promises beyond the shared contract (tests/outbox/test_conformance.py).

Against the machine's real MariaDB, each test on tables of its own, this proves:
- the schema: seq AUTO_INCREMENT, message_id unique, the body a LONGBLOB, the due index leading
  with the claim key, the FIFO indexes; the table is the one the URL names;
- the claim's locking query is a range scan of that due index which reads only due rows,
  from where a consistent read found the first claimable one: delivered tombstones and
  entries not yet due cost it nothing, and a claim with nothing due locks nothing; the locking
  reads that wait name the index of the rows they lock (an optimizer's choice once deadlocked
  two sidecars);
- two outboxes on one table (two sidecars) never claim the same entry from concurrent threads,
  and share one exact bound;
- FIFO across two outboxes claiming concurrently: only heads are ever claimed (a head that the
  other claimer holds locked does not make the next entry look like a head), a group never has
  two entries in flight, and its entries are claimed in seq order; a claim leaves alone a group
  whose lock another session holds, gives the locks it took back, and a requeue of a FIFO
  entry waits for that lock;
- a committed put survives SIGKILL of the process that made it; a put_groups of 64 requests is
  one INSERT, and a mark_delivered_many of 64 entries one UPDATE, each in one transaction;
- driver errors become OutboxUnavailableError with a clear message (server unreachable, table
  gone), and a connection the server killed is replaced without the caller noticing; an entry
  the schema cannot hold is refused with EntryTooLargeError (in a put_groups, its request
  alone), and a bad table name with OutboxConfigError.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from outbox import (
    DeliveryReceipt,
    EntryState,
    EntryTooLargeError,
    OutboxConfigError,
    OutboxFullError,
    OutboxLimits,
    OutboxMessage,
    OutboxUnavailableError,
    open_outbox,
)
from outbox.backends.mysql.connection import group_lock_name
from outbox.backends.mysql.outbox import MySQLOutbox
from tests.outbox.entries import LEASE_MS, NOW_MS, TOPIC, entry, ids, message_id, receipt
from tests.services import mysql_url, unique_name

REPO_ROOT = Path(__file__).resolve().parents[4]
DEADLINE_S = 60.0

OpenMySQL = Callable[..., MySQLOutbox]


@pytest.fixture
def engine() -> Iterator[sa.Engine]:
    """A plain connection to the test database, for looking behind the backend's back."""
    eng = sa.create_engine(mysql_url())
    yield eng
    eng.dispose()


@pytest.fixture
def table(engine: sa.Engine) -> Iterator[str]:
    name = unique_name("outbox")
    yield name
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS `{name}`, `{name}_counters`"))


@pytest.fixture
def url(table: str) -> str:
    return f"{mysql_url()}?table={table}"


@pytest.fixture
def open_mysql(url: str) -> Iterator[OpenMySQL]:
    """Opens outboxes on the test's table (several of them: several sidecars); closes them."""
    opened: list[MySQLOutbox] = []

    def open_(limits: OutboxLimits | None = None) -> MySQLOutbox:
        ob = open_outbox(url, limits)
        assert isinstance(ob, MySQLOutbox)
        opened.append(ob)
        return ob

    yield open_
    for ob in reversed(opened):
        ob.close()


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Run each target on its own thread at once; re-raise the first failure."""
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def run(target: Callable[[], None]) -> None:
        try:
            barrier.wait(timeout=DEADLINE_S)
            target()
        except BaseException as e:  # reported on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "a worker thread did not finish in time"
    if errors:
        raise errors[0]


@contextlib.contextmanager
def catch_statements(marker: str) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every statement containing ``marker`` that any engine sends while the block runs, with
    its parameters when they are named (not those of an executemany)."""
    caught: list[tuple[str, dict[str, Any]]] = []

    def catch(*args: Any) -> None:
        _conn, _cursor, statement, parameters, _context, _many = args
        if marker in statement:
            caught.append((statement, dict(parameters) if isinstance(parameters, dict) else {}))

    sa.event.listen(sa.Engine, "before_cursor_execute", catch)
    try:
        yield caught
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", catch)


# -- schema -------------------------------------------------------------------------------------


def test_schema_is_created_in_the_table_the_url_names(
    open_mysql: OpenMySQL, table: str, engine: sa.Engine
) -> None:
    ob = open_mysql()
    assert ob.table_name == table
    with engine.connect() as conn:
        tables = set(
            conn.execute(
                sa.text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND table_name LIKE :prefix"
                ),
                {"prefix": f"{table}%"},
            ).scalars()
        )
        columns = {
            row.column_name: row
            for row in conn.execute(
                sa.text(
                    "SELECT column_name, data_type, extra, column_key, collation_name "
                    "FROM information_schema.columns "
                    "WHERE table_schema = DATABASE() AND table_name = :t"
                ),
                {"t": table},
            )
        }
        index_columns: dict[str, list[str]] = {}
        for row in conn.execute(
            sa.text(
                "SELECT index_name, column_name FROM information_schema.statistics "
                "WHERE table_schema = DATABASE() AND table_name = :t ORDER BY seq_in_index"
            ),
            {"t": table},
        ):
            index_columns.setdefault(row.index_name, []).append(row.column_name)
    assert tables == {table, f"{table}_counters"}
    assert columns["seq"].extra == "auto_increment"
    assert columns["seq"].column_key == "PRI"
    assert columns["message_id"].column_key == "UNI"
    # Ids and group names compare byte for byte: "A" and "a" are two messages, two groups.
    assert columns["message_id"].collation_name == "utf8mb4_bin"
    assert columns["message_group"].collation_name == "utf8mb4_bin"
    assert columns["body"].data_type == "longblob"
    assert index_columns["ix_due"] == ["due_ms", "seq"]
    assert index_columns["ix_fifo_head"] == ["topic", "message_group", "state", "seq"]
    assert index_columns["ix_fifo_lease"] == ["topic", "message_group", "lease_until_ms"]


def test_the_claim_scans_the_due_index_and_only_due_rows(
    open_mysql: OpenMySQL, engine: sa.Engine
) -> None:
    ob = open_mysql()
    ob.put([entry(n) for n in range(300)])
    ob.put([entry(n, next_send_time_ms=NOW_MS + 60_000) for n in range(300, 320)])
    for n in range(250):  # tombstones: the bulk of a long-running outbox
        assert ob.mark_delivered(message_id(n), receipt(n))

    # Nothing due: the consistent read that finds where claimable entries start says so, and
    # no locking read follows.
    with catch_statements("FORCE INDEX (ix_due)") as caught:
        assert ob.claim_due(NOW_MS - 3_600_000, 100, LEASE_MS, "w1") == []
    ((statement, _),) = caught
    assert "FOR UPDATE" not in statement

    # The backend's own locking query, caught on its way to the server.
    with catch_statements("SKIP LOCKED") as caught:
        assert ids(ob.claim_due(NOW_MS, 1, LEASE_MS, "w1")) == [message_id(250)]
    ((statement, parameters),) = caught
    # The same query again with a limit of 100, executed under ANALYZE (in a transaction
    # rolled back).
    assert parameters["limit"] == 1
    with engine.connect() as conn:
        analyzed = json.loads(
            conn.exec_driver_sql(
                f"ANALYZE FORMAT=JSON {statement}", {**parameters, "limit": 100}
            ).scalar_one()
        )
        conn.rollback()
    (access,) = analyzed["query_block"]["nested_loop"]
    scan = access["table"]
    assert (scan["access_type"], scan["key"]) == ("range", "ix_due")
    assert scan["used_key_parts"][0] == "due_ms"
    # The 49 due entries left read; not the 250 tombstones, not the entry just claimed, not
    # the 20 entries due in a minute.
    assert scan["r_rows"] == 49
    assert "filesort" not in json.dumps(analyzed)


def test_locking_reads_that_wait_name_the_index_of_what_they_lock(
    open_mysql: OpenMySQL, table: str
) -> None:
    # On a young table (statistics of an empty one) the optimizer, left to itself, finds a
    # few PENDING rows by ix_state_seq, which locks rows that another sidecar is delivering:
    # two delivery batches deadlocked that way. Reads that wait for locks name their index.
    ob = open_mysql()
    ob.put([entry(n) for n in range(6)])
    assert ids(ob.claim_due(NOW_MS, 2, LEASE_MS, "w1")) == [message_id(0), message_id(1)]
    assert ob.bury(message_id(0), "w1", "poison", NOW_MS)
    assert ob.bury(message_id(1), "w1", "poison", NOW_MS)
    with catch_statements("FOR UPDATE") as caught:
        assert ob.mark_delivered(message_id(2), receipt(2))
        assert ob.requeue([message_id(0)], NOW_MS) == 1
        assert ob.requeue(None, NOW_MS) == 1
    waiting = [s for s, _ in caught if f"FROM {table} " in s and "SKIP LOCKED" not in s]
    assert len(waiting) == 3
    for statement in waiting:
        assert re.search(r"FORCE INDEX \((uq_message_id|PRIMARY)\)", statement), statement


def test_a_bad_table_name_is_a_config_error_before_any_connection() -> None:
    for bad in ("x;drop", "1abc", "a" * 56, "t-1"):
        with pytest.raises(OutboxConfigError, match="table") as refused:
            # Port 1: had it connected, the error would be another one.
            open_outbox(f"mysql+pymysql://root:s3cret@127.0.0.1:1/test?table={bad}")
        assert not refused.value.retriable
        assert "s3cret" not in str(refused.value)


# -- sharing one table ----------------------------------------------------------------------------


def test_two_outboxes_on_one_table_never_claim_the_same_entry(open_mysql: OpenMySQL) -> None:
    sidecars = [open_mysql(), open_mysql()]
    entries_n = 1_200
    sidecars[0].put([entry(n) for n in range(entries_n)])
    got: list[list[str]] = []

    def claimer(ob: MySQLOutbox, owner: str) -> Callable[[], None]:
        mine: list[str] = []
        got.append(mine)

        def run() -> None:
            while batch := ob.claim_due(NOW_MS, 10, LEASE_MS, owner):
                mine.extend(ids(batch))

        return run

    run_threads([claimer(ob, f"s{s}t{t}") for s, ob in enumerate(sidecars) for t in range(4)])
    every = [i for mine in got for i in mine]
    assert len(every) == len(set(every)), "an entry was claimed twice"
    assert set(every) == {message_id(n) for n in range(entries_n)}
    assert sum(1 for mine in got if mine) > 1, "the claimers must have overlapped"


def test_two_outboxes_on_one_table_share_one_exact_bound(open_mysql: OpenMySQL) -> None:
    limits = OutboxLimits(outbox_entries_max=10, outbox_bytes_max=10_000)
    a, b = open_mysql(limits), open_mysql(limits)
    a.put([entry(n) for n in range(6)])
    b.put([entry(n) for n in range(6, 10)])
    with pytest.raises(OutboxFullError):
        a.put([entry(10)])
    assert b.mark_delivered(message_id(0), receipt(0))  # counted out by the other outbox
    a.put([entry(10)])
    with pytest.raises(OutboxFullError):
        b.put([entry(11)])
    assert a.stats(NOW_MS).pending == 10


def test_concurrent_puts_from_two_outboxes_never_pass_the_bound(open_mysql: OpenMySQL) -> None:
    limits = OutboxLimits(outbox_entries_max=100)
    sidecars = [open_mysql(limits), open_mysql(limits)]
    outcomes: list[str] = []

    def putter(ob: MySQLOutbox, first: int) -> Callable[[], None]:
        def run() -> None:
            for n in range(first, first + 30):
                try:
                    ob.put([entry(n)])
                    outcomes.append("stored")
                except OutboxFullError:
                    outcomes.append("full")

        return run

    run_threads([putter(ob, 1_000 * (2 * s + t)) for s, ob in enumerate(sidecars) for t in (0, 1)])
    assert outcomes.count("stored") == 100
    assert outcomes.count("full") == 20
    assert sidecars[1].stats(NOW_MS).pending == 100


# -- FIFO across claimers ----------------------------------------------------------------------


def fifo_entries(groups_n: int, per_group: int) -> list[Any]:
    """Groups interleaved in put order, as concurrent senders spool them."""
    return [
        entry(g * 100 + k, group=f"group-{g}") for k in range(per_group) for g in range(groups_n)
    ]


def test_concurrent_claimers_take_only_fifo_heads(open_mysql: OpenMySQL) -> None:
    sidecars = [open_mysql(), open_mysql()]
    groups_n, per_group = 40, 5
    sidecars[0].put(fifo_entries(groups_n, per_group))
    got: list[str] = []
    lock = threading.Lock()

    def claimer(ob: MySQLOutbox, owner: str) -> Callable[[], None]:
        def run() -> None:
            # Small batches, so that claimers meet often: each finds heads the others hold
            # locked, and must not take the entries behind them.
            while batch := ob.claim_due(NOW_MS, 3, LEASE_MS, owner):
                with lock:
                    got.extend(ids(batch))

        return run

    run_threads([claimer(ob, f"s{s}t{t}") for s, ob in enumerate(sidecars) for t in range(3)])
    assert sorted(got) == sorted(message_id(g * 100) for g in range(groups_n))


def test_concurrent_claimers_keep_one_entry_in_flight_per_group_in_seq_order(
    open_mysql: OpenMySQL,
) -> None:
    sidecars = [open_mysql(), open_mysql()]
    groups_n, per_group = 12, 6
    sidecars[0].put(fifo_entries(groups_n, per_group))
    total = groups_n * per_group
    lock = threading.Lock()
    in_flight: dict[str, str] = {}
    claimed: dict[str, list[int]] = {}  # group → the n of its entries, in claim order
    delivered = [0]
    all_delivered = threading.Event()

    def claimer(ob: MySQLOutbox, owner: str) -> Callable[[], None]:
        def run() -> None:
            deadline = time.monotonic() + DEADLINE_S
            while not all_delivered.is_set():
                assert time.monotonic() < deadline, "the groups were not drained in time"
                batch = ob.claim_due(NOW_MS, 4, LEASE_MS, owner)
                with lock:
                    for e in batch:
                        group = e.message.message_group
                        assert group is not None
                        assert group not in in_flight, f"{group}: two entries in flight"
                        in_flight[group] = e.message_id
                        claimed.setdefault(group, []).append(int(e.message_id[10:], 16))
                for e in batch:
                    # Out of flight before the tombstone commits: the next one of the group
                    # can only be claimed after that.
                    with lock:
                        del in_flight[e.message.message_group or ""]
                    assert ob.mark_delivered(e.message_id, receipt(0))
                    with lock:
                        delivered[0] += 1
                        if delivered[0] == total:
                            all_delivered.set()
                if not batch:
                    all_delivered.wait(0.005)  # the heads are in flight elsewhere

        return run

    run_threads([claimer(ob, f"s{s}t{t}") for s, ob in enumerate(sidecars) for t in range(3)])
    assert claimed == {
        f"group-{g}": [g * 100 + k for k in range(per_group)] for g in range(groups_n)
    }


def test_a_claim_leaves_a_fifo_group_alone_while_another_session_holds_its_lock(
    open_mysql: OpenMySQL, engine: sa.Engine, table: str
) -> None:
    # The group's lock is what a claim or a requeue of the group in another process holds
    # until it commits: a claim that cannot take it at once leaves the group for later.
    ob = open_mysql()
    ob.put([entry(1, group="g"), entry(2, group="g"), entry(3)])
    name = group_lock_name("test", table, TOPIC, "g")
    with engine.connect() as other:
        assert other.execute(sa.select(sa.func.get_lock(name, 0))).scalar_one() == 1
        assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w1")) == [message_id(3)]
        assert other.execute(sa.select(sa.func.release_lock(name))).scalar_one() == 1
        assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w1")) == [message_id(1)]
        # The claim gave the lock back with its commit: nothing stays held on its connection.
        assert other.execute(sa.select(sa.func.get_lock(name, 0))).scalar_one() == 1
        other.execute(sa.select(sa.func.release_lock(name)))


def test_requeue_of_a_fifo_entry_waits_for_the_claims_of_its_group(
    open_mysql: OpenMySQL, engine: sa.Engine, table: str
) -> None:
    ob = open_mysql()
    ob.put([entry(1, group="g")])
    assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w1")) == [message_id(1)]
    assert ob.bury(message_id(1), "w1", "poison", NOW_MS)
    name = group_lock_name("test", table, TOPIC, "g")
    requeued: list[int] = []
    with engine.connect() as other:
        assert other.execute(sa.select(sa.func.get_lock(name, 0))).scalar_one() == 1
        requeue = threading.Thread(target=lambda: requeued.append(ob.requeue(None, NOW_MS)))
        requeue.start()
        try:
            deadline = time.monotonic() + DEADLINE_S
            while not other.execute(
                sa.text(
                    "SELECT COUNT(*) FROM information_schema.processlist "
                    "WHERE state = 'User lock' AND info LIKE :waiting"
                ),
                {"waiting": f"%{name}%"},
            ).scalar_one():
                assert time.monotonic() < deadline, "requeue never waited for the group lock"
                time.sleep(0.01)  # polling a condition, with the deadline above
            assert requeued == []
            still = ob.get(message_id(1))
            assert still is not None
            assert still.state is EntryState.DEAD
        finally:
            other.execute(sa.select(sa.func.release_lock(name)))
            requeue.join(timeout=DEADLINE_S)
    assert requeued == [1]
    assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w2")) == [message_id(1)]


# -- durability ---------------------------------------------------------------------------------

PUT_AND_HANG = """
import sys
from outbox import open_outbox
from tests.outbox.entries import entry
ob = open_outbox(sys.argv[1])
ob.put([entry(7)])
print("PUT", flush=True)
sys.stdin.readline()
"""


def test_put_groups_and_mark_delivered_many_are_one_statement_each(
    open_mysql: OpenMySQL, table: str
) -> None:
    ob = open_mysql()
    with catch_statements(f"INSERT INTO {table} ") as caught:
        answers = ob.put_groups([[entry(n)] for n in range(64)])
    assert all(isinstance(a, list) for a in answers)
    assert len(caught) == 1
    claimed = ob.claim_due(NOW_MS, 64, LEASE_MS, "w1")
    with catch_statements(f"UPDATE {table} ") as caught:
        delivered = ob.mark_delivered_many(
            [(e.message_id, receipt(n)) for n, e in enumerate(claimed)]
        )
    assert delivered == [True] * 64
    assert len(caught) == 1
    for n, e in enumerate(claimed):
        got = ob.get(e.message_id)
        assert got is not None
        assert got.receipt == receipt(n)


def test_a_committed_put_survives_sigkill_of_its_process(url: str, open_mysql: OpenMySQL) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", PUT_AND_HANG, url],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # returns at PUT, or at EOF if the child failed
        assert line == "PUT\n", child.communicate(timeout=DEADLINE_S)[1]
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=DEADLINE_S) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=DEADLINE_S)
    got = open_mysql().get(message_id(7))
    assert got is not None
    assert got.message.body == entry(7).message.body


# -- errors -------------------------------------------------------------------------------------


def test_an_unreachable_server_is_unavailable_with_a_clear_message() -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    closed = "mysql+pymysql://root:s3cret@127.0.0.1:1/test?table=t"
    started = time.monotonic()
    with pytest.raises(OutboxUnavailableError) as refused:
        open_outbox(closed)
    assert time.monotonic() - started < 5
    message = str(refused.value)
    assert "127.0.0.1:1" in message
    assert "Can't connect to MySQL server" in message
    assert "s3cret" not in message
    assert refused.value.retriable
    assert isinstance(refused.value.__cause__, sa.exc.OperationalError)


def test_a_table_dropped_underneath_makes_every_call_unavailable(
    open_mysql: OpenMySQL, table: str, engine: sa.Engine
) -> None:
    ob = open_mysql()
    ob.put([entry(1)])
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE `{table}`"))
    calls: list[Callable[[], object]] = [
        lambda: ob.put([entry(2)]),
        lambda: ob.claim_due(NOW_MS, 10, LEASE_MS, "w1"),
        lambda: ob.mark_delivered(message_id(1), receipt(1)),
        lambda: ob.get(message_id(1)),
        lambda: ob.stats(NOW_MS),
        ob.check_writable,
    ]
    for call in calls:
        with pytest.raises(OutboxUnavailableError, match=table) as refused:
            call()
        assert isinstance(refused.value.__cause__, sa.exc.DBAPIError)


def test_a_connection_the_server_killed_is_replaced_unnoticed(
    table: str, engine: sa.Engine
) -> None:
    # A user of this test's own, so that only this outbox's connections are killed.
    user = table[:32]
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'"))
        conn.execute(sa.text(f"GRANT ALL ON test.* TO '{user}'@'%'"))
    try:
        ob = open_outbox(f"mysql+pymysql://{user}:pw@127.0.0.1:3306/test?table={table}")
        try:
            ob.put([entry(1)])
            assert ob.get(message_id(1)) is not None
            with engine.connect() as conn:
                pids = conn.execute(
                    sa.text("SELECT id FROM information_schema.processlist WHERE user = :u"),
                    {"u": user},
                ).scalars()
                for pid in list(pids):
                    conn.execute(sa.text(f"KILL CONNECTION {int(pid)}"))
            # The pool's pre-ping notices the dead connections and opens new ones.
            ob.put([entry(2)])
            assert ids(ob.claim_due(NOW_MS, 10, LEASE_MS, "w1")) == [message_id(1), message_id(2)]
        finally:
            ob.close()
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP USER '{user}'@'%'"))


def test_an_entry_the_schema_cannot_hold_is_refused_whole(open_mysql: OpenMySQL) -> None:
    ob = open_mysql()
    for too_big in (
        OutboxMessage(topic="T" * 256, body=b"x", message_id=message_id(1)),
        OutboxMessage(topic="T", body=b"x", message_id="m" * 256),
        OutboxMessage(topic="T", body=b"x", message_id=message_id(1), message_group="g" * 256),
    ):
        with pytest.raises(EntryTooLargeError) as refused:
            ob.put([entry(2), replace(entry(1), message=too_big)])
        assert not refused.value.retriable
    assert ob.get(message_id(2)) is None
    assert ob.stats(NOW_MS).pending == 0
    # In a put_groups, that request alone is refused.
    too_big_request = [
        entry(2),
        replace(entry(1), message=replace(entry(1).message, topic="T" * 256)),
    ]
    refused_one, stored = ob.put_groups([too_big_request, [entry(3)]])
    assert isinstance(refused_one, EntryTooLargeError)
    assert isinstance(stored, list)
    assert ids(stored) == [message_id(3)]
    assert ob.stats(NOW_MS).pending == 1


def test_the_bound_counts_survive_a_reopen(open_mysql: OpenMySQL) -> None:
    limits = OutboxLimits(outbox_entries_max=3)
    first = open_mysql(limits)
    first.put([entry(1), entry(2)])
    assert first.mark_delivered(message_id(1), receipt(1))
    first.close()
    again = open_mysql(limits)
    again.put([entry(3), entry(4)])
    with pytest.raises(OutboxFullError):
        again.put([entry(5)])
    assert again.stats(NOW_MS).pending == 3


def test_delivery_receipts_of_concurrent_calls_land_on_their_own_entries(
    open_mysql: OpenMySQL,
) -> None:
    ob = open_mysql()
    ob.put([entry(n) for n in range(64)])

    def deliverer(n: int) -> Callable[[], None]:
        def run() -> None:
            assert ob.mark_delivered(message_id(n), receipt(n, delivered_ms=NOW_MS + n))
            assert not ob.mark_delivered(message_id(n), receipt(n))

        return run

    run_threads([deliverer(n) for n in range(64)])
    for n in range(64):
        got = ob.get(message_id(n))
        assert got is not None
        assert got.receipt == DeliveryReceipt(n % 4, 1_000 + n, NOW_MS + n)
        assert got.state_changed_ms == NOW_MS + n
    assert ob.stats(NOW_MS).pending == 0
    assert ob.stats(NOW_MS).bytes == 0
