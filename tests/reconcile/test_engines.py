"""The two engines (reconcile/config.py) on the same data: every count, every finding the same.

Proves, with one Spark session (local[2]) for the module, on tests/reconcile/planted.py's data
(planted losses, duplicates, recovered, unexpected, unchecked, pending and dead messages, parked
copies, a torn tail and a torn ledger line):
- the in-process engine's summary equals the Spark engine's in every figure (totals, per topic,
  per bucket, per topic and bucket, delivery latency, the commitlog's scan, the ledgers, the
  outbox, the drill-down), and its ``details/messages`` holds the same rows, column for column;
  with the JSON lines export, the Parquet one, and no ledger; with the Spark engine's ids in its
  default buckets, in one bucket, and in 97 (some empty); with the ledger as two files of other
  topics (the scope put together from two ranges); both write every ledger line to
  ``inputs/acks`` once, and the Spark engine leaves none of its rows by bucket behind; both
  refuse a ledger that names too many topics;
- ledger and outbox lines Spark's permissive reader calls malformed (not JSON, a field of the
  wrong type, an unknown state, no id) are malformed in process too, with the same text kept;
- ``auto`` runs in process below its record limit and hands over to Spark above it, with the same
  result, saying so; both report progress (segments scanned; Spark's stages and tasks); a run in
  process imports no PySpark (so starts no JVM).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from reconcile import spark_progress
from reconcile.bucket_files import EXCHANGE_DIR_NAME
from reconcile.config import (
    ENGINE_AUTO,
    ENGINE_IN_PROCESS,
    ENGINE_SPARK,
    IN_PROCESS_RECORDS_MAX_DEFAULT,
    JobConfig,
    SparkSettings,
)
from reconcile.errors import InputError
from reconcile.in_process import engine
from reconcile.job import run
from reconcile.summary_document import SCOPE_TOPICS_MAX
from tests.reconcile.planted import Planted, counts, planted
from tests.rocketbox_process import REPO_ROOT

pytestmark = pytest.mark.slow

# What may differ between two runs: how and where they ran, and how long they took.
_HOW_IT_RAN = ("engine", "inputs", "details", "phases_s", "elapsed_s")
# The import check runs the job in a fresh interpreter: well within this on 2 cores.
IMPORT_CHECK_DEADLINE_S = 120


@pytest.fixture(scope="module")
def plants(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    return planted(tmp_path_factory.mktemp("planted"))


def config(p: Planted, out: Path, engine: str, **kw: Any) -> JobConfig:
    return JobConfig(
        commitlogs=(p.store,),
        outbox=kw.pop("outbox", p.outbox_jsonl),
        out_dir=out,
        ledgers=kw.pop("ledgers", (p.acks,)),
        drill_down_ids_max=50,
        engine=engine,
        **kw,
    )


def what_was_found(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in _HOW_IT_RAN}


def ack_rows(out: Path) -> list[dict[str, Any]]:
    rows = pq.read_table(out / "inputs" / "acks").to_pylist()
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def detail_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    rows = pq.read_table(summary["details"]["messages"]).to_pylist()
    return sorted(rows, key=lambda r: r["message_id"])


def ledger_by_topic(acks: Path, out: Path) -> tuple[Path, Path]:
    """The ledger as two: the first topic's lines, and the rest (the malformed ones among them).
    The Spark engine parses each in a task of its own, so neither range names every topic."""
    lines = acks.read_text(encoding="utf-8").splitlines(keepends=True)
    first = _topic(lines[0])
    mine = [line for line in lines if _topic(line) == first]
    assert 0 < len(mine) < len(lines)
    one, rest = out / "one-topic.jsonl", out / "other-topics.jsonl"
    one.write_text("".join(mine), encoding="utf-8")
    rest.write_text("".join(line for line in lines if _topic(line) != first), encoding="utf-8")
    return one, rest


def _topic(line: str) -> Any:
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return found.get("topic") if isinstance(found, dict) else None


@pytest.mark.parametrize(
    "inputs", ["jsonl", "parquet", "no ledger", "one bucket", "97 buckets", "two ledgers"]
)
def test_both_engines_find_the_same(
    spark: SparkSession, plants: Planted, tmp_path: Path, inputs: str
) -> None:
    variants: dict[str, dict[str, Any]] = {
        "jsonl": {},
        "parquet": {"outbox": plants.outbox_parquet},
        "no ledger": {"ledgers": ()},
        # The Spark engine's id buckets (spark_classify.py): all in one, or more buckets than
        # the planted data has ids for some (empty buckets).
        "one bucket": {"spark": SparkSettings(shuffle_partitions=1)},
        "97 buckets": {"spark": SparkSettings(shuffle_partitions=97)},
        # Each range tells the buckets its topics: the scope is put together from both.
        "two ledgers": {"ledgers": ledger_by_topic(plants.acks, tmp_path)},
    }
    kw = variants[inputs]

    local = run(config(plants, tmp_path / "local", ENGINE_IN_PROCESS, **dict(kw)))
    with_spark = run(config(plants, tmp_path / "spark", ENGINE_SPARK, **dict(kw)), spark)

    assert (local["engine"], with_spark["engine"]) == (ENGINE_IN_PROCESS, ENGINE_SPARK)
    assert what_was_found(local) == what_was_found(with_spark)
    assert detail_rows(local) == detail_rows(with_spark)
    # The rows by bucket were on their way only: nothing of them is left.
    assert not (tmp_path / "spark" / EXCHANGE_DIR_NAME).exists()
    if inputs != "no ledger":
        # inputs/acks: every ledger line once in both (Spark's in a part a range).
        assert ack_rows(tmp_path / "local") == ack_rows(tmp_path / "spark")
        assert local["totals"] == counts(plants.plants)
        assert local["drill_down"]["malformed_ledger_lines"]
    assert local["delivery_latency"]["messages"] == 10


def test_malformed_lines_are_malformed_in_both(
    spark: SparkSession, plants: Planted, tmp_path: Path
) -> None:
    good = {"message_id": "M-1", "topic": "Orders", "state": "STORED", "time_ms": 5}
    lines = [
        json.dumps(good),
        "",  # a blank line is no line
        json.dumps({**good, "message_id": "M-2", "time_ms": "5"}),  # a number as text
        json.dumps({**good, "message_id": "M-3", "topic": 7}),  # a string field takes a number
        json.dumps({**good, "message_id": "M-4", "state": "stored"}),
        json.dumps({**good, "message_id": ""}),
        json.dumps({**good, "message_id": "M-5", "time_ms": 2**63}),  # beyond a long
        json.dumps([1, 2]),
        json.dumps({**good, "message_id": "M-6", "durable": "yes"}),  # a column not read
        json.dumps({**good, "message_id": "M-7", "cause": None, "extra": {"a": 1}}),
        json.dumps({**good, "message_id": "M-8", "time_ms": 5.0}),
        json.dumps({**good, "message_id": "M-9", "time_ms": True}),
        '{"message_id":"TORN',
    ]
    ledger = tmp_path / "acks.jsonl"
    ledger.write_text("\n".join(lines) + "\n")
    outbox = tmp_path / "outbox.jsonl"
    entry = {"message_id": "M-1", "topic": "Orders", "state": "DELIVERED", "created_ms": 1}
    outbox.write_text(
        "\n".join([json.dumps(entry), json.dumps({**entry, "state": "GONE"}), "{not json"]) + "\n"
    )
    kw = {"ledgers": (ledger,), "outbox": outbox}

    local = run(config(plants, tmp_path / "local", ENGINE_IN_PROCESS, **dict(kw)))
    with_spark = run(config(plants, tmp_path / "spark", ENGINE_SPARK, **dict(kw)), spark)

    assert local["ledgers"] == with_spark["ledgers"]
    assert local["ledgers"]["malformed"] == 8
    assert local["outbox"] == with_spark["outbox"] == {
        "entries": 3, "malformed": 2, "pending": 0, "delivered": 1, "dead": 0,
    }  # fmt: skip
    drill = local["drill_down"]["malformed_ledger_lines"]
    assert drill == with_spark["drill_down"]["malformed_ledger_lines"]
    assert {r["line"] for r in drill} >= {'{"message_id":"TORN', "[1, 2]"}
    # A line with one field of the wrong type keeps the fields that read (Spark's partial result).
    [m2] = [r for r in drill if r["message_id"] == "M-2"]
    assert (m2["state"], m2["time_ms"]) == ("STORED", None)
    assert what_was_found(local) == what_was_found(with_spark)


def test_both_engines_refuse_a_ledger_of_too_many_topics(
    spark: SparkSession, plants: Planted, tmp_path: Path
) -> None:
    ledger = tmp_path / "acks.jsonl"
    with ledger.open("w", encoding="utf-8") as f:
        for i in range(SCOPE_TOPICS_MAX + 1):
            line = {"message_id": f"M-{i}", "topic": f"T{i}", "state": "STORED", "time_ms": i}
            f.write(json.dumps(line) + "\n")
    said = f"the ledgers name {SCOPE_TOPICS_MAX + 1} topics, more than {SCOPE_TOPICS_MAX}"

    for engine_name in (ENGINE_IN_PROCESS, ENGINE_SPARK):
        with pytest.raises(InputError, match=said):
            run(config(plants, tmp_path / engine_name, engine_name, ledgers=(ledger,)), spark)


def test_auto_runs_in_process_below_its_limit_and_spark_above(
    spark: SparkSession, plants: Planted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Progress at every chance: a line per segment scanned, the Spark stages polled often.
    monkeypatch.setattr(engine, "PROGRESS_INTERVAL_S", 0.0)
    monkeypatch.setattr(spark_progress, "PROGRESS_INTERVAL_S", 0.01)
    said: list[str] = []
    small = run(config(plants, tmp_path / "small", ENGINE_AUTO), progress=said.append)
    segments = len(small["commitlog"]["per_segment"])
    assert said[segments - 1] == f"scanned {segments} of {segments} segments: 127 records"
    said.clear()
    big = run(
        config(plants, tmp_path / "big", ENGINE_AUTO, in_process_records_max=10),
        spark,
        progress=said.append,
    )

    assert small["engine"] == ENGINE_IN_PROCESS
    assert small["inputs"]["records_max"] == IN_PROCESS_RECORDS_MAX_DEFAULT
    assert big["engine"] == ENGINE_SPARK
    assert big["inputs"]["master"] == "local[2]"
    assert big["inputs"]["id_buckets"] == 8  # 4 a core: the planted data is far below 256 MiB
    assert what_was_found(small) == what_was_found(big)
    assert said[0] == (
        "the commitlog holds more than 10 records, the in-process engine's limit: starting Spark"
    )
    assert any(line.startswith("Spark: stage ") and " tasks" in line for line in said[1:]), said


def test_a_run_in_process_imports_no_pyspark(plants: Planted, tmp_path: Path) -> None:
    script = f"""
import sys
from pathlib import Path
from reconcile.config import JobConfig
from reconcile.job import run
from reconcile.summary_document import SCOPE_TOPICS_MAX
from reconcile.report import write_outputs
summary = run(JobConfig(commitlogs=(Path({str(plants.store)!r}),),
                        outbox=Path({str(plants.outbox_jsonl)!r}), out_dir=Path({str(tmp_path)!r}),
                        ledgers=(Path({str(plants.acks)!r}),)))
write_outputs(summary, Path({str(tmp_path)!r}))
print(summary["engine"], summary["totals"]["lost"], "pyspark" in sys.modules, "py4j" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=IMPORT_CHECK_DEADLINE_S,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [ENGINE_IN_PROCESS, "5", "False", "False"]
