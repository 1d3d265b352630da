"""The reconciliation on commitlogs Apache RocketMQ wrote (tests/reconcile/rocketmq_logs.py), with
both engines, and what it says of a log it could not read whole.

Proves, with the in-process engine and the Spark engine (local[2], the shared session):
- a RocketMQ 4.x store (V1, no __CRC32#, IPv6 hosts, transactions prepared and committed or
  rolled back in their topic) and a 5.x one (the property off then on, V1 and V2, half and op
  records, delayed messages, a torn tail): every count exactly, the same from both engines:
  a prepared record is parked (the message stored, no copy), a rolled-back one counted only
  (never stored), op records are system records, blank markers end the segments;
- the default case: three records as RocketMQ writes them by default in one segment read as 3
  messages (unchecked without a ledger, ok with one that names them), exit 0;
- a log not read whole is no verdict, from both engines alike: damage with bytes written after
  it in its segment, and zeros where a segment's blank marker was with later segments written
  (exit 5), a consume queue file where a segment should be (exit 6), a log of zeros while the
  ledger names messages (exit 7): through ``rocketbox reconcile`` (in process, and once with
  Spark) each exits with its code, says what could not be read in one sentence on stderr,
  writes summary.json (verdict UNREAD) and report.html ("No verdict"), and never prints
  NOTHING LOST; a torn tail alone stays a verdict (exit 0).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from reconcile.config import ENGINE_IN_PROCESS, ENGINE_SPARK, JobConfig
from reconcile.errors import ExitCode
from reconcile.job import run
from tests.reconcile.rocketbox_reconcile import Reconciled, reconcile
from tests.reconcile.rocketmq_logs import (
    SEGMENT_BYTES,
    Store,
    broker_4x,
    broker_5x,
    message,
    totals,
    uniq,
)
from tests.reconcile.rocketmq_records import Broker

pytestmark = pytest.mark.slow

LOG_FIGURES = ("records", "kept_records", "parked_records", "system_topic_records",
               "rollback_records", "records_without_id")  # fmt: skip
BLANK_MAGIC = struct.pack(">i", -875286124)
# What may differ between two runs: how and where they ran, and how long they took.
_HOW_IT_RAN = ("engine", "inputs", "details", "phases_s", "elapsed_s")


def what_was_found(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in _HOW_IT_RAN}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Store]:
    return {
        "4.x": broker_4x(tmp_path_factory.mktemp("rocketmq-4x")),
        "5.x": broker_5x(tmp_path_factory.mktemp("rocketmq-5x")),
    }


def both_engines(
    spark: SparkSession, commitlog: Path, acks: Path | None, outbox: Path, out: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    def config(engine: str) -> JobConfig:
        return JobConfig(
            commitlogs=(commitlog,), outbox=outbox, out_dir=out / engine,
            ledgers=(acks,) if acks else (), engine=engine,
        )  # fmt: skip

    return run(config(ENGINE_IN_PROCESS)), run(config(ENGINE_SPARK), spark)


@pytest.mark.parametrize("release", ["4.x", "5.x"])
def test_both_engines_count_a_rocketmq_log_exactly(
    spark: SparkSession, stores: dict[str, Store], tmp_path: Path, release: str
) -> None:
    store = stores[release]
    segments = sorted(store.commitlog.iterdir())

    local, with_spark = both_engines(spark, store.commitlog, store.acks, store.outbox, tmp_path)

    assert what_was_found(local) == what_was_found(with_spark)
    assert local["totals"] == store.totals
    log = local["commitlog"]
    assert {name: log[name] for name in LOG_FIGURES} == store.log
    assert len(segments) == log["segments"] >= 3
    assert all(len(s.name) == 20 for s in segments)
    # Every segment but the last ends in a blank marker: the next record did not fit.
    assert sum(s["blank_bytes"] > 0 for s in log["per_segment"]) == len(segments) - 1
    for s in segments[:-1]:
        data = s.read_bytes()
        blank_at = len(data) - struct.unpack_from(">i", data, data.rindex(BLANK_MAGIC) - 4)[0]
        assert data[blank_at + 4 : blank_at + 8] == BLANK_MAGIC
    assert local["unread"] is None
    if release == "4.x":
        assert local["verdict"] == "LOST"
        assert [r["message_id"] for r in local["drill_down"]["lost"]] == [uniq("0D", 40)]
        assert log["stops"] == []
    else:
        assert local["verdict"] == "NOTHING_LOST"
        [stop] = log["stops"]  # the crash mid-append
        assert (stop["where"], stop["unread"], stop["segment"]) == (
            "torn tail", False, segments[-1].name,
        )  # fmt: skip


def three_default_records(root: Path) -> Path:
    """A default log: three V1 records as a RocketMQ broker writes them by default (UNIQ_KEY,
    KEYS, WAIT; no __CRC32#) in one segment."""
    broker = Broker(root / "commitlog", 64 * 1024)
    for i in range(3):
        broker.put(message("Orders", uniq("2A", i), i))
    return root / "commitlog"


def test_three_default_rocketmq_records_are_read_and_the_ledger_s_messages_are_stored(
    tmp_path: Path,
) -> None:
    log = three_default_records(tmp_path / "store")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    acks = tmp_path / "acks.jsonl"
    acks.write_text("".join(
        json.dumps({"message_id": uniq("2A", i), "topic": "Orders", "state": "STORED",
                    "time_ms": 1}) + "\n" for i in range(3)
    ))  # fmt: skip

    alone = reconcile("--commitlog", str(log), "--outbox", str(empty), out=tmp_path / "alone")
    acked = reconcile("--commitlog", str(log), "--outbox", str(empty), "--acks", str(acks),
                      out=tmp_path / "acked")  # fmt: skip

    assert (alone.code, acked.code) == (0, 0), alone.stderr + acked.stderr
    assert alone.stdout.startswith("reconcile: NOTHING LOST: 3 messages:")
    assert alone.summary["totals"] == totals(messages=3, unchecked=3)
    assert acked.summary["totals"] == totals(messages=3, ok=3)
    assert alone.summary["commitlog"]["stops"] == acked.summary["commitlog"]["stops"] == []


# -- logs not read whole ------------------------------------------------------------------------
def damaged(store: Store, root: Path, how: str) -> Path:
    """A copy of the 5.x store's commitlog, damaged ``how``."""
    log = root / "commitlog"
    shutil.copytree(store.commitlog, log)
    first = sorted(log.iterdir())[0]
    data = bytearray(first.read_bytes())
    if how == "damage-then-data":
        data[data.index(b"Orders 1 ") + 2] ^= 0x5A  # a body byte of the second record
    elif how == "zeros-for-blank":
        at = data.rindex(BLANK_MAGIC) - 4
        data[at : at + 8] = bytes(8)
    elif how == "consume-queue":
        # What consumequeue/<topic>/<queue>/00000000000000000000 holds: 20-byte entries of
        # (phy_offset, size, tag hash), the first at phy_offset 0.
        data = bytearray(b"".join(struct.pack(">qiq", 230 * i, 230, 0) for i in range(40)))
        data += bytes(SEGMENT_BYTES - len(data))
        for later in sorted(log.iterdir())[1:]:
            later.unlink()
    elif how == "zeros":
        data = bytearray(SEGMENT_BYTES)
        for later in sorted(log.iterdir())[1:]:
            later.unlink()
    first.write_bytes(bytes(data))
    return log


UNREAD = {
    "damage-then-data": (
        ExitCode.READ_IN_PART,
        "the commitlog was read only in part: the scan of segment 00000000000000000000 stopped "
        "at phy_offset {at} (body CRC mismatch), yet bytes are written after it, at phy_offset "
        "{after}",
    ),
    "zeros-for-blank": (
        ExitCode.READ_IN_PART,
        "the commitlog was read only in part: the scan of segment 00000000000000000000 stopped "
        "at phy_offset {at} (zeros before the segment's end, records after them), yet later "
        "segments hold more of the log",
    ),
    "consume-queue": (
        ExitCode.NOT_A_COMMITLOG,
        "the commitlog could not be read: segment 00000000000000000000 is not a commitlog "
        "segment: no record at its start, yet bytes written at 11",
    ),
    "zeros": (
        ExitCode.NO_RECORDS,
        f"no record was read from the commitlog (1 segment file, {SEGMENT_BYTES:,} bytes), yet "
        "the ledgers and the outbox name 14 messages",
    ),
}


def expected_sentence(how: str, summary: dict[str, Any]) -> str:
    stops = summary["commitlog"]["stops"]
    at = f"{stops[0]['phy_offset']:,}" if stops else ""
    after = stops[0]["written_after_phy_offset"] if stops else None
    return UNREAD[how][1].format(at=at, after=f"{after:,}" if after is not None else "")


@pytest.mark.parametrize("how", list(UNREAD))
def test_a_log_not_read_whole_is_no_verdict_from_both_engines(
    spark: SparkSession, stores: dict[str, Store], tmp_path: Path, how: str
) -> None:
    store = stores["5.x"]
    log = damaged(store, tmp_path, how)

    local, with_spark = both_engines(spark, log, store.acks, store.outbox, tmp_path)

    assert what_was_found(local) == what_was_found(with_spark)
    code, _ = UNREAD[how]
    assert local["verdict"] == "UNREAD"
    assert local["unread"] == {
        "kind": code.name, "exit_code": int(code), "sentence": expected_sentence(how, local),
    }  # fmt: skip


def assert_no_verdict(run: Reconciled, how: str) -> None:
    code, _ = UNREAD[how]
    summary = run.summary
    sentence = expected_sentence(how, summary)
    assert run.code == code, run.stderr[-3000:]
    assert f"reconcile: {sentence}\n" in run.stderr
    assert "NOTHING LOST" not in run.stdout + run.stderr
    assert run.stdout.startswith("reconcile: NO VERDICT, the commitlog was not read whole")
    assert (summary["verdict"], summary["unread"]["sentence"]) == ("UNREAD", sentence)
    report = (run.out / "report.html").read_text()
    assert "No verdict: the commitlog" in report or "No verdict: no record" in report
    assert "Nothing acknowledged was lost" not in report


@pytest.mark.parametrize("how", list(UNREAD))
def test_rocketbox_reconcile_exits_with_the_condition_s_code_and_sentence(
    stores: dict[str, Store], tmp_path: Path, how: str
) -> None:
    store = stores["5.x"]
    log = damaged(store, tmp_path, how)

    done = reconcile("--commitlog", str(log), "--outbox", str(store.outbox), "--acks",
                     str(store.acks), "--engine", "in-process", out=tmp_path / "out")  # fmt: skip

    assert_no_verdict(done, how)


def test_with_spark_too_and_a_torn_tail_alone_stays_a_verdict(
    stores: dict[str, Store], tmp_path: Path
) -> None:
    store = stores["5.x"]
    log = damaged(store, tmp_path / "damaged", "damage-then-data")
    args = ("--outbox", str(store.outbox), "--acks", str(store.acks))

    with_spark = reconcile("--commitlog", str(log), *args, "--engine", "spark", "--master",
                           "local[1]", out=tmp_path / "spark")  # fmt: skip
    torn_tail = reconcile("--commitlog", str(store.commitlog), *args, out=tmp_path / "torn")

    assert_no_verdict(with_spark, "damage-then-data")
    assert with_spark.summary["engine"] == ENGINE_SPARK
    assert torn_tail.code == ExitCode.NOTHING_LOST, torn_tail.stderr[-3000:]
    assert torn_tail.stdout.startswith("reconcile: NOTHING LOST: 14 messages: ok 14")
    assert "commitlog: torn tail: scan of" in torn_tail.stdout
