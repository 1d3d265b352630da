"""The commitlog scan (broker/store/codec/scan.py) on records laid out as Apache RocketMQ writes
them (tests/reconcile/rocketmq_records.py, written from RocketMQ's source, not from rocketbox's
codec).

Proves, on a segment of RocketMQ 4.x and 5.x records (V1 and V2, without the __CRC32# property
and with it, IPv4 and IPv6 hosts in every combination, properties without their last separator,
a UNIQ_KEY that is the last pair, no UNIQ_KEY, an empty body, transaction sysflags):
- every field the scan returns, the sysflag included, equals what ``decode_message`` reads, and
  the scan ends where a walk with ``check_record`` (the record CRC not required) ends, whatever
  the batch size; the message ids are the ones RocketMQ wrote;
- a record without the pair cut at every length (zeros after it, as a crash mid-append leaves
  it) ends the scan at it, CORRUPT unless its first 8 bytes are zeros too, and so does a flipped
  body byte (its body CRC); a flipped byte in its header goes unseen, as in RocketMQ's recovery;
- zeros in a topic end the scan as a torn write, as ``check_record`` says;
- a run of thousands of records of one size (the vectorised CRCs' strided rows) is read whole,
  and ``crcs`` equals zlib's CRC-32 on regular runs, irregular ranges and their mix.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from broker.store.codec.decode import decode_message
from broker.store.codec.scan import ScanEndKind
from broker.store.codec.scan_crcs import CRC_RUN_RECORDS, crcs
from tests.reconcile.rocketmq_records import (
    BROKER,
    BROKER_V6,
    PRODUCER,
    PRODUCER_V6,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Message,
    encode,
    producer_properties,
    properties_text,
)
from tests.reconcile.test_record_scan import BASE, T0, assert_agrees, scan_all

LONG_TOPIC = "Orders_" + "x" * 140  # longer than 127 characters: V2 from RocketMQ 5.1


def rocketmq_log(count: int = 40) -> tuple[bytes, list[int], list[str | None]]:
    """Records of every kind RocketMQ writes; the bytes, each record's start and its id."""
    out = bytearray()
    starts: list[int] = []
    ids: list[str | None] = []
    for i in range(count):
        kind = i % 10
        uniq = f"7F0000013A6C18B4AAC27BB8{i:08X}"
        props = properties_text(producer_properties(uniq, keys=f"order-{i}", tags="TagA"))
        topic, body = "Orders", f"order {i} created".encode() * (1 + i % 4)
        v2, crc, sysflag, has_id = False, False, 0, True
        born, store = PRODUCER, BROKER
        if kind == 1:
            topic, v2 = LONG_TOPIC, True
        elif kind == 2:
            born = PRODUCER_V6
        elif kind == 3:
            born, store, crc = PRODUCER_V6, BROKER_V6, True
        elif kind == 4:
            store = BROKER_V6
        elif kind == 5:  # the id last, and no separator after it
            props = properties_text([("WAIT", "true"), ("UNIQ_KEY", uniq)], last_separator=False)
        elif kind == 6:
            has_id, props = False, properties_text([("TAGS", "d")])
        elif kind == 7:
            body, crc, v2, topic = b"", True, True, LONG_TOPIC
        elif kind == 8:
            sysflag = (TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE,
                       TRANSACTION_ROLLBACK_TYPE)[i % 3]  # fmt: skip
        elif kind == 9:  # a 5.2+ broker with CRC appending on, last separator added by it
            crc, props = True, properties_text(producer_properties(uniq), last_separator=False)
        msg = Message(topic, body, props, queue_id=i % 4, sysflag=sysflag, born_host=born,
                      store_host=store, born_timestamp_ms=T0 - i)  # fmt: skip
        starts.append(len(out))
        ids.append(uniq if has_id else None)
        out += encode(msg, 100 + i, BASE + len(out), T0 + i, v2, crc)
    return bytes(out), starts, ids


@pytest.mark.parametrize("batch", [1, 3, 16, 1000])
def test_rocketmq_records_are_read_as_the_codec_decodes_them(batch: int) -> None:
    log, starts, ids = rocketmq_log()
    buf = log + bytes(4096)

    scanner = assert_agrees(buf, len(buf), batch)
    got, _ = scan_all(buf, len(buf), batch)

    assert scanner.end is not None
    assert (scanner.end.kind, scanner.end.position) == (ScanEndKind.END, len(log))
    assert got.message_id == ids
    assert got.sysflag == [decode_message(buf, p).sysflag for p in starts]
    assert got.topic[1] == LONG_TOPIC
    assert len(got) == 40


def test_a_torn_record_without_the_crc_pair_ends_the_scan_wherever_it_was_cut() -> None:
    log, starts, _ = rocketmq_log(12)
    # The last two records have no pair: a V1 one (IPv4 hosts), then a V2 one (a long topic).
    for last, end in ((starts[-2], starts[-1]), (starts[-1], len(log))):
        for kept in range(1, end - last):
            buf = log[: last + kept] + bytes(2048)

            scanner = assert_agrees(buf, len(buf), batch=5)

            assert scanner.end is not None
            torn = any(buf[last : last + 8])
            assert (scanner.end.kind, scanner.end.position) == (
                ScanEndKind.CORRUPT if torn else ScanEndKind.END,
                last,
            ), (last, kept)


def test_without_the_crc_pair_a_body_flip_ends_the_scan_and_a_header_flip_goes_unseen() -> None:
    log, starts, _ = rocketmq_log(12)
    victim = starts[2]  # IPv6 born host, no pair
    body_at = log.index(b"order 2 created", victim)
    for at, stops in ((body_at + 3, True), (victim + 13, False)):  # a body byte; QUEUEID
        damaged = bytearray(log)
        damaged[at] ^= 0x5A
        buf = bytes(damaged) + bytes(1024)

        scanner = assert_agrees(buf, len(buf))

        assert scanner.end is not None
        assert (scanner.end.position == victim) == stops
        if stops:
            assert scanner.end.reason == "body CRC mismatch"


def test_a_long_run_of_one_size_is_read_whole() -> None:
    out = bytearray()
    for i in range(3 * CRC_RUN_RECORDS * 16 + 5):
        props = properties_text(producer_properties(f"7F000001{i:024X}"))
        msg = Message("Bulk", b"b" * 512, props, queue_id=i % 8)
        out += encode(msg, i // 8, BASE + len(out), T0 + i, False, i >= 1000)
    buf = bytes(out) + bytes(64)

    scanner = assert_agrees(buf, len(buf), batch=2000)

    assert scanner.records == 3 * CRC_RUN_RECORDS * 16 + 5


def test_crcs_equal_zlib_on_regular_runs_irregular_ranges_and_their_mix() -> None:
    rng = np.random.default_rng(7)
    buf = rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    regular = 1000 + 300 * np.arange(5 * CRC_RUN_RECORDS, dtype=np.int64)
    ragged = np.sort(rng.integers(200_000, 900_000, 3 * CRC_RUN_RECORDS + 7))
    for starts, lengths in (
        (regular, np.full(len(regular), 200)),
        (ragged, rng.integers(0, 3000, len(ragged))),
        (np.concatenate([regular, ragged]),
         np.concatenate([np.full(len(regular), 200), rng.integers(0, 3000, len(ragged))])),
        (regular[:5], np.full(5, 17)),
    ):  # fmt: skip
        ends = np.minimum(starts + lengths, len(buf))
        want = [zlib.crc32(buf[a:b]) & 0x7FFFFFFF for a, b in zip(starts, ends, strict=True)]

        assert crcs(buf, starts, ends).tolist() == want


def test_zeros_in_a_topic_are_a_torn_write_not_a_name() -> None:
    log, _, _ = rocketmq_log(5)
    props = properties_text(producer_properties("7F000001FFFF"))
    torn = encode(Message("Ord\0rs", b"body", props), 0, BASE + len(log), T0, False, False)
    buf = log + torn + bytes(512)

    scanner = assert_agrees(buf, len(buf))

    assert scanner.end is not None
    assert (scanner.end.position, scanner.end.reason) == (
        len(log), "undecodable record: zeros in the topic (torn write?)",
    )  # fmt: skip
