"""broker/store/codec/scan.py's SegmentScanner, held to the codec's check_record and to recovery.

Proves, on segments of varied records (topics of several lengths, IPv6 hosts, user properties
before the message id, records without one, a property whose name ends in UNIQ_KEY, ids of
several lengths, a V2-magic record):
- every field the scan returns equals what ``decode_message`` reads, whatever the batch size,
  and a record without UNIQ_KEY has no message id;
- the scan ends at zeros (END), at a blank marker filling the segment (BLANK, its size), and at a
  torn or damaged record (CORRUPT) exactly where a walk with ``check_record`` stops (the
  recovery walk, a record without the CRC pair accepted as the scan accepts it, each record at
  the phy_offset it claims), with ``check_record``'s reason, for a flipped byte in every field
  (one in the CRC pair's name leaves a record without the pair, sound on its body CRC) and for a
  record cut at every length; it returns every record before and nothing after, even a valid
  record that follows;
- a blank marker of the wrong size and a record claiming another phy_offset end it too, and so
  does a message id or topic that is not UTF-8 under a matching CRC (a writer's fault), with
  recovery's reason, whichever record of a batch it is;
- it reads a real mapped segment file in place and leaves it closable;
- with a stop position it ends (PART) at the first record boundary at or past it, and a scan
  begun where ``skip_chain`` (the size chain alone) finds that boundary begins there: the two
  parts return every record once, wherever the stop falls.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections import defaultdict
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pytest

from broker.store.codec.check import RecordKind, check_record
from broker.store.codec.decode import decode_message
from broker.store.codec.encode import encode_message, finish_record
from broker.store.codec.layout import MESSAGE_MAGIC_CODE_V2, blank_marker, crc32_digits
from broker.store.codec.message import HostAddress, MessageExtBrokerInner
from broker.store.codec.scan import ScanEndKind, SegmentScanner
from broker.store.codec.scan_columns import RecordColumns, ScanBuffer, skip_chain

BASE = 3 * 1024 * 1024  # the segment's start phy_offset: not 0, so offsets are checked
T0 = 1_767_225_600_000
V4: HostAddress = ("10.0.0.7", 50123)
V6: HostAddress = ("2001:db8::17", 50124)


def record(
    pos: int,
    i: int,
    topic: str = "Orders",
    message_id: str | None = None,
    properties: dict[str, str] | None = None,
    body: bytes = b"",
    born: HostAddress = V4,
    store: HostAddress = V4,
) -> bytes:
    props = dict(properties or {})
    if message_id is not None:
        props["UNIQ_KEY"] = message_id
    msg = MessageExtBrokerInner(
        topic=topic, body=body or f"body {i}".encode() * (1 + i % 5), queue_id=i % 3,
        properties=props, born_timestamp_ms=T0 - i, born_host=born, store_host=store,
    )  # fmt: skip
    return finish_record(encode_message(msg, 0), 1000 + i, BASE + pos, T0 + i)


def to_v2(v1: bytes) -> bytes:
    """The same record with the V2 magic code and a 2-byte topic length (IPv4 hosts)."""
    (body_len,) = struct.unpack_from(">i", v1, 84)
    at = 88 + body_len
    v2 = bytearray(v1[:at] + struct.pack(">h", v1[at]) + v1[at + 1 :])
    struct.pack_into(">ii", v2, 0, len(v2), MESSAGE_MAGIC_CODE_V2)
    v2[-11:-1] = crc32_digits(zlib.crc32(bytes(v2[:-20])) & 0x7FFFFFFF)
    return bytes(v2)


def varied_log(count: int = 60) -> tuple[bytes, list[int]]:
    """Records of every kind the scan must read; returns the bytes and each record's start."""
    out = bytearray()
    starts: list[int] = []
    for i in range(count):
        kind = i % 10
        pos = len(out)
        if kind == 0:
            rec = record(pos, i, message_id=f"01AA{i:030X}")
        elif kind == 1:
            rec = record(pos, i, topic="Payments_eu-west", message_id=f"01AA{i:030X}")
        elif kind == 2:
            rec = record(pos, i, message_id=f"01AA{i:030X}", properties={"region": "eu" * i})
        elif kind == 3:
            rec = record(pos, i, message_id=None, properties={"KEYS": "k1"})
        elif kind == 4:
            rec = record(pos, i, message_id=f"app-{i}", properties={"XUNIQ_KEY": "decoy"})
        elif kind == 5:
            rec = record(pos, i, message_id=f"01AA{i:030X}", born=V6)
        elif kind == 6:
            rec = record(pos, i, message_id=f"01AA{i:030X}", born=V6, store=V6)
        elif kind == 7:
            rec = record(pos, i, topic="T", message_id=f"01AA{i:030X}", store=V6)
        elif kind == 8:
            rec = to_v2(record(pos, i, topic="Shipping", message_id=f"01AA{i:030X}"))
        else:
            rec = record(pos, i, topic="Ü-topic", message_id=f"id-é-{i}")
        starts.append(pos)
        out += rec
    return bytes(out), starts


@dataclass
class Scanned:
    """Every batch of a scan, column by column, as Python lists."""

    columns: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))

    def __getattr__(self, name: str) -> list[Any]:
        return self.columns[name]

    def __len__(self) -> int:
        return len(self.columns["phy_offset"])


def scan_all(buf: ScanBuffer, limit: int, batch: int = 16) -> tuple[Scanned, SegmentScanner]:
    scanner = SegmentScanner(buf, BASE, limit)
    out = Scanned()
    for cols in scanner.batches(batch):
        for f in fields(RecordColumns):
            out.columns[f.name] += getattr(cols, f.name).tolist()
    return out, scanner


def recovery_walk(buf: bytes, limit: int) -> tuple[list[int], tuple[str, int, str]]:
    """Record starts and the stop (kind, position, reason), by check_record as recovery walks."""
    pos = 0
    starts: list[int] = []
    while True:
        found = check_record(buf, pos, limit, True, False)
        if found.kind == RecordKind.BLANK:
            return starts, (ScanEndKind.BLANK, pos, "")
        if found.kind == RecordKind.END:
            return starts, (ScanEndKind.END, pos, "")
        request = found.request
        if found.kind == RecordKind.MESSAGE and request is not None:
            if request.commit_log_offset != BASE + pos:
                claim = f"record claims phy_offset {request.commit_log_offset}"
                return starts, (ScanEndKind.CORRUPT, pos, claim)
            starts.append(pos)
            pos += found.size
            continue
        return starts, (ScanEndKind.CORRUPT, pos, found.reason)


def expected_columns(buf: bytes, starts: list[int]) -> dict[str, list[object]]:
    messages = [decode_message(buf, p) for p in starts]
    return {
        "message_id": [m.msg_id for m in messages],
        "topic": [m.topic for m in messages],
        "queue_id": [m.queue_id for m in messages],
        "queue_offset": [m.queue_offset for m in messages],
        "phy_offset": [m.commit_log_offset for m in messages],
        "store_timestamp_ms": [m.store_timestamp_ms for m in messages],
        "born_timestamp_ms": [m.born_timestamp_ms for m in messages],
        "body_size_bytes": [len(m.body) for m in messages],
    }


def assert_agrees(buf: bytes, limit: int, batch: int = 16) -> SegmentScanner:
    starts, (kind, position, reason) = recovery_walk(buf, limit)
    got, scanner = scan_all(buf, limit, batch)
    assert scanner.end is not None
    assert (scanner.end.kind, scanner.end.position, scanner.end.reason) == (kind, position, reason)
    assert {k: getattr(got, k) for k in expected_columns(buf, starts)} == expected_columns(
        buf, starts
    )
    assert scanner.records == len(starts)
    return scanner


@pytest.mark.parametrize("batch", [1, 7, 16, 1000])
def test_every_field_equals_what_the_codec_decodes_whatever_the_batch(batch: int) -> None:
    log, starts = varied_log()
    buf = log + bytes(4096)

    scanner = assert_agrees(buf, len(buf), batch)

    assert scanner.end is not None
    assert scanner.end.kind == ScanEndKind.END
    assert scanner.end.position == len(log)
    got, _ = scan_all(buf, len(buf), batch)
    assert len(got) == len(starts) == 60
    assert got.message_id[3] is None  # no UNIQ_KEY
    assert got.message_id[4] == "app-4"  # not fooled by XUNIQ_KEY
    assert got.topic[9] == "Ü-topic"
    assert got.message_id[9] == "id-é-9"
    assert got.topic[8] == "Shipping"  # the V2 record


def test_a_blank_marker_filling_the_segment_ends_the_scan_as_padding() -> None:
    log, _ = varied_log(12)
    buf = log + blank_marker(500) + bytes(492)

    scanner = assert_agrees(buf, len(buf))

    assert scanner.end is not None
    assert (scanner.end.kind, scanner.end.position) == (ScanEndKind.BLANK, len(log))
    assert scanner.blank_bytes == 500


def test_a_blank_marker_of_the_wrong_size_is_damage() -> None:
    log, _ = varied_log(12)
    buf = log + blank_marker(400) + bytes(592)

    scanner = assert_agrees(buf, len(buf))

    assert scanner.end is not None
    assert scanner.end.kind == ScanEndKind.CORRUPT
    assert scanner.end.reason == f"blank marker of 400 bytes at {len(log)}"


def test_a_torn_record_ends_the_scan_wherever_it_was_cut() -> None:
    log, starts = varied_log(20)
    last = starts[-1]
    for kept in range(1, len(log) - last):
        buf = log[: last + kept] + bytes(2048)

        scanner = assert_agrees(buf, len(buf), batch=7)

        assert scanner.end is not None
        # A cut that left only zeros of the record looks like the clean end it then is.
        torn = any(buf[last : last + 8])
        assert (scanner.end.kind, scanner.end.position) == (
            ScanEndKind.CORRUPT if torn else ScanEndKind.END,
            last,
        ), kept
        assert bool(scanner.end.reason) == torn, kept


def test_a_flipped_byte_anywhere_in_a_record_ends_the_scan_there() -> None:
    log, starts = varied_log(20)
    victim = 13  # IPv6 born host: its fields sit at shifted places
    begin, end = starts[victim], starts[victim + 1]
    pair_at = end - 20
    tail = bytes(1024)
    for at in range(begin, end):
        damaged = bytearray(log)
        damaged[at] ^= 0x5A
        buf = bytes(damaged) + tail

        scanner = assert_agrees(buf, len(buf), batch=5)

        assert scanner.end is not None
        if pair_at - 1 <= at < pair_at + len(b"__CRC32#\x01"):
            # The record CRC pair's name (or the separator before it) damaged: the record now
            # reads as one written without the pair (RocketMQ's default), sound on its body CRC.
            assert (scanner.end.kind, scanner.end.position) == (ScanEndKind.END, len(log)), at
            continue
        # A damaged TOTALSIZE may make the record look shorter and what follows look like
        # zeros; otherwise the scan stops at the damaged record itself.
        assert scanner.end.kind in (ScanEndKind.CORRUPT, ScanEndKind.END), at
        assert scanner.end.position == begin or at < begin + 4, at


def test_nothing_after_a_torn_record_is_read_even_a_valid_one() -> None:
    log, starts = varied_log(10)
    torn_at = len(log)
    torn = record(torn_at, 10, message_id="TORN")[:40]
    later = torn_at + 4096
    buf = log + torn + bytes(later - torn_at - len(torn)) + record(later, 11, message_id="AFTER")
    buf += bytes(1024)

    scanner = assert_agrees(buf, len(buf))
    got, _ = scan_all(buf, len(buf))

    assert scanner.end is not None
    assert (scanner.end.kind, scanner.end.position) == (ScanEndKind.CORRUPT, torn_at)
    assert "AFTER" not in got.message_id
    assert len(got) == len(starts)


def with_crc_renewed(rec: bytes, old: bytes, new: bytes) -> bytes:
    """``rec`` with ``old`` replaced by ``new`` (as long) and its record CRC written anew: what
    a writer that wrote the bytes wrong would leave, which the CRC cannot catch."""
    out = bytearray(rec.replace(old, new, 1))
    out[-11:-1] = crc32_digits(zlib.crc32(bytes(out[:-20])) & 0x7FFFFFFF)
    return bytes(out)


@pytest.mark.parametrize("batch", [1, 7, 16])
@pytest.mark.parametrize("field", ["message_id", "topic"])
def test_an_id_or_topic_that_is_not_utf8_ends_the_scan_as_recovery_would(
    field: str, batch: int
) -> None:
    log, _ = varied_log(20)
    fine = record(len(log), 20, topic="TopicQQ", message_id="id-QQ-20")
    bad = with_crc_renewed(fine, b"QQ-20" if field == "message_id" else b"TopicQQ",
                           b"\xff\xfe-20" if field == "message_id" else b"Topic\xc3(")  # fmt: skip
    buf = log + bad + record(len(log) + len(bad), 21, message_id="AFTER") + bytes(1024)

    scanner = assert_agrees(buf, len(buf), batch)
    got, _ = scan_all(buf, len(buf), batch)

    assert scanner.end is not None
    assert (scanner.end.kind, scanner.end.position) == (ScanEndKind.CORRUPT, len(log))
    assert "utf-8" in scanner.end.reason
    assert len(got) == 20
    assert "AFTER" not in got.message_id


def test_a_record_claiming_another_phy_offset_ends_the_scan() -> None:
    log, _ = varied_log(10)
    stray = record(len(log) + 64, 10, message_id="ELSEWHERE")  # written for another place
    buf = log + stray + bytes(1024)

    scanner = assert_agrees(buf, len(buf))

    assert scanner.end is not None
    assert scanner.end.position == len(log)
    assert scanner.end.reason == f"record claims phy_offset {BASE + len(log) + 64}"


def test_a_mapped_segment_file_is_read_in_place_and_stays_closable(tmp_path: Path) -> None:
    log, starts = varied_log(40)
    path = tmp_path / f"{BASE:020d}"
    path.write_bytes(log + bytes(64 * 1024 - len(log)))
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        got, scanner = scan_all(mapped, len(mapped), batch=9)
        assert scanner.end is not None
        assert (scanner.end.kind, scanner.end.position) == (ScanEndKind.END, len(log))
        assert got.phy_offset == [BASE + p for p in starts]
    # Leaving the block closed the mapping: no view of it outlived the scan.
    assert mapped.closed


def test_a_scan_stops_at_the_first_boundary_past_its_stop_and_the_next_part_begins_there() -> None:
    log, starts = varied_log(40)  # V2 records and IPv6 hosts among them: sizes vary
    buf = log + bytes(4096)
    whole, _ = scan_all(buf, len(buf))
    for stop in range(1, len(log) + 8, 3):
        first = SegmentScanner(buf, BASE, len(buf))
        first.stop_position = stop
        head = [o for cols in first.batches(7) for o in cols.phy_offset.tolist()]
        second = SegmentScanner(buf, BASE, len(buf))
        second.position = began = skip_chain(buf, len(buf), 0, stop)
        tail = [o for cols in second.batches(7) for o in cols.phy_offset.tolist()]

        # The first record start at or past the stop; past the last record, the zeros.
        boundary = next((s for s in starts if s >= stop), len(log))
        assert began == boundary, stop
        assert first.end is not None
        assert (first.end.kind, first.end.position) == (
            (ScanEndKind.PART, boundary) if stop <= len(log) else (ScanEndKind.END, len(log))
        ), stop
        assert head + tail == whole.phy_offset, stop


def test_runs_of_one_size_are_walked_at_once_and_end_where_the_sizes_change() -> None:
    out = bytearray()
    starts: list[int] = []
    for i in range(300):  # long runs: the probe doubles; then sizes vary, then a torn record
        starts.append(len(out))
        out += record(len(out), i, message_id=f"01AA{i:030X}", body=b"b" * (100 if i < 260 else i))
    torn_at = len(out)
    out += record(torn_at, 300, message_id="TORN")[:50]

    for buf in (bytes(out), bytes(out) + bytes(512)):
        scanner = assert_agrees(buf, len(buf), batch=1000)
        assert scanner.end is not None
        assert (scanner.end.kind, scanner.end.position) == (ScanEndKind.CORRUPT, torn_at)
        # The torn record's size is intact: where it fits the buffer, the chain runs past it.
        (claimed,) = struct.unpack_from(">i", buf, torn_at)
        chain_end = torn_at + claimed if torn_at + claimed <= len(buf) else torn_at
        for target in (1, 5000, starts[259] + 1, starts[-1], torn_at, torn_at + 1, len(buf)):
            want = next((s for s in [*starts, torn_at] if s >= target), chain_end)
            assert skip_chain(buf, len(buf), 0, target) == want, target
    # A log that fills its buffer exactly: the chain ends at the buffer's end.
    whole = bytes(out[:torn_at])
    assert skip_chain(whole, len(whole), 0, len(whole) + 1) == len(whole)
