"""The MySQL outbox's schema and the claim's queries, beyond the contract
(tests/outbox/conformance/).

Against a real MariaDB (the test session's own), each test on tables of its own, this proves:
- only a writer's open creates the tables: a reader's (``create=False``) finds them or raises
  OutboxNotFoundError, creating nothing;
- the schema: seq AUTO_INCREMENT, message_id unique, the body a LONGBLOB, the due index leading
  with the claim key, the FIFO indexes; the table is the one the URL names;
- the claim's locking query is a range scan of that due index which reads only due rows,
  from where a consistent read found the first claimable one: delivered tombstones and
  entries not yet due cost it nothing, and a claim with nothing due locks nothing; the locking
  reads that wait name the index of the rows they lock (an optimizer's choice once deadlocked
  two sidecars);
- a table from before a column was added gets it when opened, by a reader too.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import sqlalchemy as sa

from outbox import (
    OutboxConfigError,
    OutboxNotFoundError,
    open_outbox,
)
from tests.outbox.backends.mysql.harness import (
    OpenMySQL,
    catch_statements,
)
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, ids, message_id, receipt

pytestmark = pytest.mark.slow


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
    assert tables == {table, f"{table}_counters", f"{table}_stats"}
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
    assert index_columns["ix_state_created"] == ["state", "created_ms"]


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


def test_a_reader_finds_the_tables_or_creates_nothing(
    url: str, table: str, engine: sa.Engine, open_mysql: OpenMySQL
) -> None:
    with pytest.raises(OutboxNotFoundError, match=f"no such outbox table '{table}'"):
        open_outbox(url, create=False)
    with engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT COUNT(*) FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name LIKE :prefix"
            ),
            {"prefix": f"{table}%"},
        ).scalar_one()
    assert found == 0, "a reader's open created a table"
    open_mysql().put([entry(1)])  # a writer's open creates them
    with open_outbox(url, create=False) as reader:
        assert reader.stats(NOW_MS).pending == 1


def test_a_table_from_before_a_column_was_added_gets_it_at_open(
    url: str, table: str, engine: sa.Engine, open_mysql: OpenMySQL
) -> None:
    """An outbox an older rocketbox created lacks the columns added since: opening it adds
    them, the entries already there keep what they meant (NULL), and new entries fill them."""
    open_mysql().put([entry(1)])
    with engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE `{table}` DROP COLUMN delivery_timeout_ms"))
    with open_outbox(url, create=False) as reader:
        old = reader.get(message_id(1))
    assert old is not None
    assert old.message.delivery_timeout_ms is None
    timed = entry(2)
    timed = replace(timed, message=replace(timed.message, delivery_timeout_ms=5_000))
    ob = open_mysql()
    ob.put([timed])
    got = ob.get(message_id(2))
    assert got is not None
    assert got.message.delivery_timeout_ms == 5_000
