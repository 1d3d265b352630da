"""tests/reconcile/testdata.py writes commitlogs as the broker does, and the reconciliation's
copies of the broker's topic names stay equal to the broker's.

Proves: ``write_bulk_commitlog`` (a template patched in numpy) writes byte for byte the files
``CommitLogWriter`` (the codec, record by record) writes for the same messages, across segment
boundaries with blank padding; the broker's own store (DefaultMessageStore) recovers a generated
log, verifying every record, and cuts a torn last record, reporting it; the system-topic prefixes
and parking topics the scan uses are the broker's.
"""

from __future__ import annotations

import filecmp
from pathlib import Path

from broker import timer_message, transaction_message
from broker.store.config import KIB, MessageStoreConfig
from broker.store.message_store import DefaultMessageStore
from reconcile import segment_scan
from rocketbox_api import message_rules
from tests.reconcile.testdata import (
    BulkShape,
    CommitLogWriter,
    bulk_message_id,
    write_bulk_commitlog,
)

SEGMENT_BYTES = 64 * KIB
STORE_HOST = ("10.0.0.1", 10911)


def small_store(root: Path) -> DefaultMessageStore:
    config = MessageStoreConfig(
        root, mapped_file_size_commit_log_bytes=SEGMENT_BYTES, message_size_bytes_max=1024,
        topic_length_max=64, properties_length_max=512, hash_slot_num=1000,
        index_num_max=4000, clean_resource_interval_ms=3_600_000,
    )  # fmt: skip
    return DefaultMessageStore(config, STORE_HOST)


def write_exact(directory: Path, shape: BulkShape) -> CommitLogWriter:
    writer = CommitLogWriter(directory, SEGMENT_BYTES)
    for i in range(shape.count):
        writer.append(
            shape.topic(i), bulk_message_id(i), shape.store_timestamp_ms(i), shape.body(),
            shape.queue_id(i),
        )  # fmt: skip
    return writer


def test_the_bulk_writer_writes_what_the_codec_writes_record_by_record(tmp_path: Path) -> None:
    shape = BulkShape(count=3_000, body_size_bytes=300, topics=("TopicA", "TopicB"), queues=3)
    write_bulk_commitlog(tmp_path / "bulk", shape, SEGMENT_BYTES)
    write_exact(tmp_path / "exact", shape).close()

    names = sorted(p.name for p in (tmp_path / "bulk").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "exact").iterdir())
    assert len(names) >= 10
    for name in names:
        assert filecmp.cmp(tmp_path / "bulk" / name, tmp_path / "exact" / name, shallow=False)


def test_the_broker_recovers_a_generated_log_and_cuts_its_torn_tail(tmp_path: Path) -> None:
    shape = BulkShape(count=500, body_size_bytes=200, queues=2)
    writer = write_exact(tmp_path / "commitlog", shape)
    torn_at = writer.append_torn("BenchTopic0", "TORN", shape.store_timestamp_ms(500), 70)
    writer.close()

    store = small_store(tmp_path)
    try:
        report = store.start()
    finally:
        store.shutdown()

    assert report.records_verified == 500
    assert report.truncated
    assert report.max_phy_offset == torn_at
    assert report.truncate_reason


def test_the_scan_knows_the_brokers_system_and_parking_topics() -> None:
    assert segment_scan.SYSTEM_TOPIC_PREFIXES == message_rules.SYSTEM_TOPIC_PREFIXES
    assert segment_scan.PARKING_TOPICS == (
        timer_message.SCHEDULE_TOPIC,
        transaction_message.HALF_TOPIC,
    )
