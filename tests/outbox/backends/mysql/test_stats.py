"""The MySQL outbox's stats read for the sidecars' gauges (``shared_stats``), and its name in
metrics.

Against a real MariaDB (the test session's own), each test on tables of its own, this proves:
- a sidecar's periodic read, while another holds the scan's lease, looks rows up by index only:
  the counters by a range of their key, the oldest PENDING entry one step down an index (the
  optimizer reads it off the index: no table at all), the stats row by its key; no scan of the
  entries, whatever their number;
- one reader at a time scans: among two outboxes' readers asking every interval, the first
  takes the lease, scans and publishes; the other reads what was published and never scans
  while the lease is renewed; once its holder stops, the other takes it after it runs out;
- what is published is what ``stats`` finds at that time (in flight, next due);
- bad arguments are refused naming the field;
- the outbox's label: scheme, host, port, database and table (the default table when the URL
  names none), the same from URLs that differ in credentials and driver options, with no user
  or password in it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from outbox.backends.mysql.outbox import MySQLOutbox
from outbox.backends.mysql.stats import STATS_LEASE_INTERVALS
from tests.outbox.backends.mysql.harness import OpenMySQL, catch_statements
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, message_id, receipt

pytestmark = pytest.mark.slow

INTERVAL_MS = 5_000
# The holder's scan, as the backend names its index.
SCAN_MARKER = "FORCE INDEX (ix_fifo_lease)"


def tables_read(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every table access of an EXPLAIN FORMAT=JSON plan, subqueries included."""
    found: list[dict[str, Any]] = []
    if "table" in plan and "table_name" in plan["table"]:
        found.append(plan["table"])
    for value in plan.values():
        children = value if isinstance(value, list) else [value]
        found += [t for child in children if isinstance(child, dict) for t in tables_read(child)]
    return found


def scanned(ob: MySQLOutbox, now_ms: int, reader: str) -> bool:
    """Whether this read scanned (rather than used what was published)."""
    with catch_statements(SCAN_MARKER) as caught:
        ob.shared_stats(now_ms, reader, INTERVAL_MS)
    return bool(caught)


def test_a_sidecars_periodic_read_looks_up_indexes_only(
    open_mysql: OpenMySQL, engine: sa.Engine, table: str
) -> None:
    ob = open_mysql()
    ob.put([entry(n, created_ms=NOW_MS - n) for n in range(2_000)])
    ob.mark_delivered_many([(message_id(n), receipt(n)) for n in range(1_500)])
    ob.claim_due(NOW_MS, 10, LEASE_MS, "s0/a")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"ANALYZE TABLE `{table}`").all()
    assert scanned(ob, NOW_MS, "s0/a")  # the holder, for the interval

    with catch_statements("SELECT") as caught:
        stats = ob.shared_stats(NOW_MS, "s1/b", INTERVAL_MS)
    assert (stats.pending, stats.delivered, stats.in_flight) == (500, 1_500, 10)
    assert stats.oldest_pending_created_ms == NOW_MS - 1_999
    assert len(caught) == 2, caught  # the counters with the oldest entry; the stats row
    accesses: list[dict[str, Any]] = []
    optimized_away = 0
    with engine.connect() as conn:
        for statement, parameters in caught:
            explained = conn.exec_driver_sql(f"EXPLAIN FORMAT=JSON {statement}", parameters)
            plan = json.loads(explained.scalar_one())
            accesses += tables_read(plan)
            optimized_away += json.dumps(plan).count("Select tables optimized away")
    by_table = {a["table_name"]: a for a in accesses}
    assert set(by_table) == {f"{table}_counters", f"{table}_stats"}, accesses
    assert (by_table[f"{table}_counters"]["access_type"], by_table[f"{table}_counters"]["key"]) == (
        "range", "PRIMARY",
    )  # fmt: skip
    assert by_table[f"{table}_stats"]["access_type"] == "const"
    assert optimized_away == 1  # MIN(created_ms) of the PENDING entries, read off the index


def test_one_reader_scans_at_a_time_and_another_follows_once_its_lease_ends(
    open_mysql: OpenMySQL,
) -> None:
    a, b = open_mysql(), open_mysql()
    a.put([entry(n) for n in range(20)])
    now = NOW_MS
    assert scanned(a, now, "a/1")
    assert not scanned(b, now, "b/1")
    for _ in range(5):  # both ask every interval: a renews its lease, b never scans
        now += INTERVAL_MS
        assert not scanned(b, now, "b/1")
        assert scanned(a, now, "a/1")
        assert not scanned(a, now + 1, "a/1")  # its own figures, still fresh
    # a stops asking: b takes over once a's lease has run out, not before.
    lease_end = now + STATS_LEASE_INTERVALS * INTERVAL_MS
    assert not scanned(b, lease_end - 1, "b/1")
    assert scanned(b, lease_end, "b/1")
    assert not scanned(a, lease_end + INTERVAL_MS - 1, "a/1")


def test_the_published_figures_are_what_stats_finds(open_mysql: OpenMySQL) -> None:
    a, b = open_mysql(), open_mysql()
    a.put([entry(n, next_send_time_ms=NOW_MS + n) for n in range(6)])
    a.claim_due(NOW_MS + 2, 3, LEASE_MS, "s0/a")  # 0, 1, 2 in flight
    expected = a.stats(NOW_MS + 2)
    assert (expected.in_flight, expected.next_due_ms) == (3, NOW_MS + 3)
    assert a.shared_stats(NOW_MS + 2, "a/1", INTERVAL_MS) == expected
    assert b.shared_stats(NOW_MS + 2, "b/1", INTERVAL_MS) == expected
    # The counts are read at once; in flight and next due as published.
    assert a.mark_delivered(message_id(3), receipt(3))
    later = b.shared_stats(NOW_MS + 3, "b/1", INTERVAL_MS)
    assert (later.pending, later.delivered) == (5, 1)
    assert (later.in_flight, later.next_due_ms) == (3, NOW_MS + 3)


def test_bad_arguments_are_refused_naming_the_field(open_mysql: OpenMySQL) -> None:
    ob = open_mysql()
    with pytest.raises(ValueError, match="reader must be 1 to 255 characters, got 0"):
        ob.shared_stats(NOW_MS, "", INTERVAL_MS)
    with pytest.raises(ValueError, match="reader must be 1 to 255 characters, got 256"):
        ob.shared_stats(NOW_MS, "r" * 256, INTERVAL_MS)
    with pytest.raises(ValueError, match="interval_ms must be >= 1, got 0"):
        ob.shared_stats(NOW_MS, "r", 0)


def test_the_label_names_server_database_and_table_without_credentials() -> None:
    label = MySQLOutbox.label(
        "mysql+pymysql://rocketbox:s3cret@db.example:3306/orders?table=outbox&charset=utf8mb4"
    )
    assert label == "mysql+pymysql://db.example:3306/orders.outbox"
    assert (
        MySQLOutbox.label("mysql+pymysql://other:pw@db.example:3306/orders?table=outbox") == label
    )
    assert (
        MySQLOutbox.label("mysql+pymysql://u@db.example/orders")
        == "mysql+pymysql://db.example/orders.rocketbox_outbox"
    )
