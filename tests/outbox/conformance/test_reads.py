"""Reads, lifecycle and the factory, checked against every backend.

Each test runs on memory (the reference), RocksDB, Redis and MySQL, and proves one promise of
the contract (outbox/outbox.py):
- stats, scan/scan_all paging and export_jsonl;
- check_writable until close, and the factory's errors.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

import pytest

from outbox import (
    EntryState,
    Outbox,
    OutboxConfigError,
    OutboxStats,
    OutboxUnavailableError,
    open_outbox,
)
from outbox.export import export_jsonl
from outbox.outbox import SCAN_PAGE_MAX
from tests.outbox.conformance.processes import claim
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, ids, message_id, receipt


def test_stats_of_an_empty_outbox(outbox: Outbox) -> None:
    assert outbox.stats(NOW_MS) == OutboxStats(
        pending=0,
        in_flight=0,
        delivered=0,
        dead=0,
        bytes=0,
        oldest_pending_created_ms=None,
        next_due_ms=None,
    )


def test_stats_count_states_leases_bytes_and_times(outbox: Outbox) -> None:
    outbox.put(
        [
            entry(1, body=b"a" * 100, created_ms=NOW_MS - 50),
            entry(2, body=b"b" * 200, created_ms=NOW_MS - 90, next_send_time_ms=NOW_MS - 5),
            entry(3, body=b"c" * 300, created_ms=NOW_MS - 70),
            entry(4, body=b"d" * 400, created_ms=NOW_MS - 10, next_send_time_ms=NOW_MS + 800),
        ]
    )
    stats = outbox.stats(NOW_MS)
    assert (stats.pending, stats.in_flight, stats.bytes) == (4, 0, 1_000)
    assert stats.oldest_pending_created_ms == NOW_MS - 90
    assert stats.next_due_ms == NOW_MS - 5

    assert claim(outbox, limit=2) == [message_id(2), message_id(1)]
    assert outbox.mark_delivered(message_id(1), receipt(1))
    assert outbox.bury(message_id(2), "w1", "dead", NOW_MS)
    stats = outbox.stats(NOW_MS)
    assert (stats.pending, stats.delivered, stats.dead) == (2, 1, 1)
    assert stats.bytes == 200 + 300 + 400  # the tombstone holds no body; the dead one does
    assert stats.oldest_pending_created_ms == NOW_MS - 70

    claim(outbox, limit=1)  # 3
    assert outbox.stats(NOW_MS).in_flight == 1
    assert outbox.stats(NOW_MS + LEASE_MS).in_flight == 0  # its lease has ended


def test_scan_pages_in_seq_order_by_state(outbox: Outbox) -> None:
    stored = outbox.put([entry(n) for n in range(1, 8)])
    assert outbox.mark_delivered(message_id(2), receipt(2))
    assert outbox.mark_delivered(message_id(5), receipt(5))
    claim(outbox, limit=1)
    assert outbox.bury(message_id(1), "w1", "dead", NOW_MS)

    page = outbox.scan(None, 0, 3)
    assert ids(page) == [message_id(n) for n in (1, 2, 3)]
    assert [e.state for e in page] == [EntryState.DEAD, EntryState.DELIVERED, EntryState.PENDING]
    assert ids(outbox.scan(None, page[-1].seq, 3)) == [message_id(n) for n in (4, 5, 6)]
    assert ids(outbox.scan(None, stored[-1].seq, 3)) == []
    assert ids(outbox.scan(EntryState.PENDING, 0, 10)) == [message_id(n) for n in (3, 4, 6, 7)]
    assert ids(outbox.scan(EntryState.PENDING, stored[3].seq, 10)) == [message_id(6), message_id(7)]
    assert ids(outbox.scan(EntryState.DELIVERED, 0, 10)) == [message_id(2), message_id(5)]
    assert ids(outbox.scan(EntryState.DEAD, 0, 10)) == [message_id(1)]
    assert outbox.scan(None, 0, 10)[3] == outbox.get(message_id(4))


def test_scan_all_pages_through_more_than_one_page(outbox: Outbox) -> None:
    count = SCAN_PAGE_MAX + 5
    outbox.put([entry(n, body=b"x") for n in range(count)])
    assert outbox.mark_delivered(message_id(count - 1), receipt(0))
    every = list(outbox.scan_all())
    assert ids(every) == [message_id(n) for n in range(count)]
    assert [e.seq for e in every] == sorted(e.seq for e in every)
    assert len(list(outbox.scan_all(EntryState.PENDING))) == count - 1
    assert ids(list(outbox.scan_all(EntryState.DELIVERED))) == [message_id(count - 1)]


def test_export_jsonl_writes_one_line_per_entry_without_bodies(outbox: Outbox) -> None:
    outbox.put([entry(1), entry(2, group="g")])
    assert outbox.mark_delivered(message_id(1), receipt(1))
    out = io.StringIO()
    assert export_jsonl(outbox, out) == 2
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["message_id"] for r in rows] == [message_id(1), message_id(2)]
    assert all("body" not in r for r in rows)
    assert (rows[0]["state"], rows[0]["queue_offset"]) == ("DELIVERED", receipt(1).queue_offset)
    assert (rows[1]["state"], rows[1]["message_group"]) == ("PENDING", "g")
    assert rows[1]["body_size"] == len(entry(2).message.body)
    dead_only = io.StringIO()
    assert export_jsonl(outbox, dead_only, EntryState.DEAD) == 0


def test_check_writable_until_closed(outbox: Outbox) -> None:
    outbox.check_writable()
    outbox.close()
    with pytest.raises(OutboxUnavailableError):
        outbox.check_writable()
    with pytest.raises(OutboxUnavailableError):
        outbox.put([entry(1)])
    answers = outbox.put_groups([[entry(2)], [entry(3)]])
    assert [type(a) for a in answers] == [OutboxUnavailableError] * 2
    outbox.close()  # twice is fine


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("rocksd:///tmp/x", "did you mean 'rocksdb'"),
        ("redsi://127.0.0.1:6379/0", "did you mean 'redis'"),
        ("memroy://", "did you mean 'memory'"),
        ("mysql+pymsql://root@127.0.0.1/test", "did you mean 'mysql+pymysql'"),
    ],
)
def test_factory_refuses_an_unknown_scheme_with_a_suggestion(url: str, hint: str) -> None:
    with pytest.raises(OutboxConfigError, match=re.escape(hint)) as refused:
        open_outbox(url)
    assert not refused.value.retriable
    known = "memory, mysql+pymysql, redis, redis+cluster, redis+sentinel, rediss, rocksdb"
    assert f"known: {known}" in str(refused.value)


def test_factory_hides_the_password_of_a_refused_url() -> None:
    with pytest.raises(OutboxConfigError) as refused:
        open_outbox("ftp://user:s3cret@host/x")
    assert "s3cret" not in str(refused.value)
    assert "did you mean" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "memory://x",
        "memory://?a=1",
        "rocksdb://",
        "rocksdb://host/path",
        "rocksdb:///x?y=1",
        "redis://127.0.0.1:notaport/0",
        "redis://127.0.0.1:6379/zero",
        "redis://127.0.0.1:6379/0?prefix=",
        "redis://127.0.0.1:6379/0?socket_timeout=soon",
        "redis://127.0.0.1:6379/0?wait_replicas=1&wait_timeout_ms=0",
        "redis+sentinel://127.0.0.1:26379/?prefix=no_service",
        "redis+cluster://127.0.0.1:7000,127.0.0.1/?prefix=no_port",
        "redis+cluster://127.0.0.1:7000/1",
    ],
)
def test_backends_refuse_urls_they_cannot_use(url: str) -> None:
    with pytest.raises(OutboxConfigError):
        open_outbox(url)


def test_put_refuses_entries_that_are_not_new(outbox: Outbox) -> None:
    with pytest.raises(ValueError, match="PENDING"):
        outbox.put([replace(entry(1), state=EntryState.DEAD)])
    with pytest.raises(ValueError, match="leased"):
        outbox.put([replace(entry(1), lease_owner="w1", lease_until_ms=NOW_MS)])
    assert outbox.get(message_id(1)) is None
