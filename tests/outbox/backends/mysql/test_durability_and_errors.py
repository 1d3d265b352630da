"""The MySQL outbox's durability and errors, beyond the contract (tests/outbox/conformance/).

Against a real MariaDB (the test session's own), each test on tables of its own, this proves:
- a committed put survives SIGKILL of the process that made it; a put_groups of 64 requests is
  one INSERT, and a mark_delivered_many of 64 entries one UPDATE, each in one transaction;
- driver errors become OutboxUnavailableError with a clear message (server unreachable, table
  gone), and a connection the server killed is replaced without the caller noticing; an entry
  the schema cannot hold is refused with EntryTooLargeError (in a put_groups, its request
  alone), and a bad table name with OutboxConfigError.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
import sqlalchemy as sa

from outbox import (
    DeliveryReceipt,
    EntryTooLargeError,
    OutboxFullError,
    OutboxLimits,
    OutboxMessage,
    OutboxUnavailableError,
    open_outbox,
)
from tests.outbox.backends.mysql.harness import (
    DEADLINE_S,
    REPO_ROOT,
    OpenMySQL,
    catch_statements,
    run_threads,
)
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, ids, message_id, receipt

pytestmark = pytest.mark.slow

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
        ob = open_outbox(
            f"mysql+pymysql://{user}:pw@127.0.0.1:{engine.url.port}/test?table={table}"
        )
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
