"""Incremental runs (reconcile/incremental.py): what is new is read, what was open is settled,
and the runs add up to the whole.

tests/reconcile/planted.py's data is replayed as a live broker and sidecar would have written
it, in four stages cut by time: the commitlog's segments as they stood at the cut (the records
stored by then, zeros after them, later segments not yet made; the last stage ends in the torn
record), the ledger's lines answered by then (the last stage ends in the torn line), the final
outbox export throughout. One cut falls between messages' spool and delivery, so their records
arrive a run after their answers and outbox entries.

Proves:
- the fourth incremental run's cumulative figures (totals, per topic, per bucket, per topic and
  bucket, the ledgers') equal a whole run's over the same data, and each run's settled messages
  plus the last run's open ones add up to the whole run's totals;
- each run reads only what is new: the records and ledger lines summed over the runs are the
  whole run's; a run with nothing new reads nothing and changes no cumulative figure;
- ``--full`` with the checkpoint recomputes the whole and starts the checkpoint over;
- a run with more to read than its record limit catches up in chunks, and finds what a whole
  run finds, each message once in its details; a ledger is cut at the first line timed after a
  time by bisection, past a line that does not parse;
- the command line runs incrementally and says so; a checkpoint made for other commitlogs, or
  for other buckets, is refused (exit 3) naming ``--full``; a half-written generation (a run
  killed before making it current) is not read.
"""

from __future__ import annotations

import collections
import json
import mmap
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from broker.store.codec.scan import SegmentScanner
from reconcile.checkpoint import CURRENT, load
from reconcile.config import ENGINE_IN_PROCESS, JobConfig
from reconcile.errors import InputError
from reconcile.incremental_inputs import _first_line_after
from reconcile.job import run
from reconcile.outcomes import COUNT_NAMES
from tests.reconcile.planted import BUCKET_MS, T0, Planted, planted
from tests.reconcile.rocketbox_reconcile import reconcile

SETTLE_MS = 60_000
# Cuts: inside bucket 0's quiet end, between spool and delivery in bucket 1, after bucket 1.
CUTS_MS = (T0 + 300_000, T0 + BUCKET_MS + 102_000, T0 + BUCKET_MS + 300_000, None)
EXIT_INPUT = 3
_FIGURES = ("totals", "per_topic", "per_bucket", "per_topic_bucket")


@pytest.fixture(scope="module")
def plants(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    return planted(tmp_path_factory.mktemp("planted"))


class Live:
    """The planted files as they stood at a time: a store, a ledger, the outbox export."""

    def __init__(self, p: Planted, root: Path) -> None:
        self.p = p
        self.store = root / "store"
        self.acks = root / "acks.jsonl"
        (self.store / "commitlog").mkdir(parents=True)
        self.acks.write_bytes(b"")
        self._record_ends = _record_times(p.store / "commitlog")

    def at(self, cut_ms: int | None) -> None:
        final = self.p.store / "commitlog"
        end = None if cut_ms is None else min(
            (phy for phy, ts in self._record_ends if ts > cut_ms), default=None
        )  # fmt: skip
        for segment in sorted(final.iterdir()):
            start = int(segment.name)
            data = segment.read_bytes()
            if end is not None and start >= end:
                continue  # not made yet
            if end is not None and end - start < len(data):
                data = data[: end - start] + bytes(len(data) - (end - start))
            (self.store / "commitlog" / segment.name).write_bytes(data)
        text = self.p.acks.read_bytes()
        if cut_ms is not None:
            kept = [
                line for line in text.splitlines(keepends=True)
                if line.endswith(b"\n") and _time_ms(line) <= cut_ms
            ]  # fmt: skip
            text = b"".join(kept)
        assert text.startswith(self.acks.read_bytes())  # a ledger only grows
        with self.acks.open("ab") as f:
            f.write(text[self.acks.stat().st_size :])


def _record_times(commitlog: Path) -> list[tuple[int, int]]:
    """(phy_offset, store timestamp) of every whole record of the log."""
    found: list[tuple[int, int]] = []
    for segment in sorted(commitlog.iterdir()):
        with segment.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            scanner = SegmentScanner(buf, int(segment.name), len(buf))
            for cols in scanner.batches(1024):
                found += zip(
                    cols.phy_offset.tolist(), cols.store_timestamp_ms.tolist(), strict=True
                )
    return found


def _time_ms(line: bytes) -> int:
    return int(json.loads(line)["time_ms"])


def job(p: Planted, store: Path, acks: Path, out: Path, **kw: Any) -> dict[str, Any]:
    config = JobConfig(
        commitlogs=(store,), outbox=p.outbox_jsonl, out_dir=out, ledgers=(acks,),
        engine=ENGINE_IN_PROCESS, settle_ms=SETTLE_MS, **kw,
    )  # fmt: skip
    return run(config)


def added(*rows: dict[str, int]) -> dict[str, int]:
    total: collections.Counter[str] = collections.Counter()
    for row in rows:
        total.update({k: row[k] for k in COUNT_NAMES})
    return {k: total[k] for k in COUNT_NAMES}


@pytest.fixture(scope="module")
def staged(
    plants: Planted, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Live, Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("live")
    live, checkpoint = Live(plants, root), root / "checkpoint"
    runs = []
    for n, cut in enumerate(CUTS_MS):
        live.at(cut)
        runs.append(job(plants, live.store, live.acks, root / f"out{n}", checkpoint=checkpoint))
    return live, checkpoint, runs


def test_the_runs_add_up_to_the_whole(
    plants: Planted, staged: tuple[Live, Path, list[dict[str, Any]]], copy: Path, tmp_path: Path
) -> None:
    live, _, runs = staged
    whole = job(plants, live.store, live.acks, tmp_path / "whole")

    last = runs[-1]["incremental"]
    for name in _FIGURES:
        assert last["cumulative"][name] == whole[name], name
    assert last["cumulative"]["ledgers"] == {
        k: v for k, v in whole["ledgers"].items() if k != "scope_topics"
    }
    assert added(*(r["incremental"]["settled"] for r in runs), last["open"]) == whole["totals"]
    assert [r["incremental"]["run"] for r in runs] == [1, 2, 3, 4]
    # Each run read only what was new.
    assert sum(r["commitlog"]["records"] for r in runs) == whole["commitlog"]["records"]
    assert sum(r["incremental"]["new_records"] for r in runs) == whole["commitlog"]["kept_records"]
    lines = [r["incremental"]["new_ledger_lines"] for r in runs]
    assert sum(lines) + last["unfinished_ledger_lines"] == whole["ledgers"]["lines"]
    assert all(r["incremental"]["new_records"] for r in runs[:3])
    # Messages were carried open from run to run and settled later.
    assert all(r["incremental"]["open"]["messages"] for r in runs)
    assert all(r["incremental"]["settled"]["messages"] for r in runs[1:])
    assert whole["totals"]["lost"] == last["cumulative"]["totals"]["lost"] == 5
    # A run's verdict counts the losses it settled: an open one's is provisional.
    for r in runs:
        assert r["verdict_lost"] == r["incremental"]["settled"]["lost"]
        assert r["verdict"] == ("LOST" if r["verdict_lost"] else "NOTHING_LOST")
    assert runs[0]["incremental"]["open"]["lost"]


@pytest.fixture
def copy(staged: tuple[Live, Path, list[dict[str, Any]]], tmp_path: Path) -> Path:
    """A copy of the staged runs' checkpoint, for a test to run on without changing it."""
    copied = tmp_path / "checkpoint"
    shutil.copytree(staged[1], copied)
    return copied


def test_a_run_with_nothing_new_reads_nothing(
    plants: Planted, staged: tuple[Live, Path, list[dict[str, Any]]], copy: Path, tmp_path: Path
) -> None:
    live, _, runs = staged

    again = job(plants, live.store, live.acks, tmp_path / "out", checkpoint=copy)

    inc = again["incremental"]
    assert (inc["new_records"], inc["new_ledger_lines"], again["commitlog"]["records"]) == (0, 0, 0)
    assert inc["run"] == 5
    assert inc["cumulative"] == runs[-1]["incremental"]["cumulative"]
    assert inc["settled"]["messages"] == 0
    assert again["totals"] == inc["open"]


def test_full_starts_the_checkpoint_over(
    plants: Planted, staged: tuple[Live, Path, list[dict[str, Any]]], copy: Path, tmp_path: Path
) -> None:
    live, _, runs = staged

    full = job(plants, live.store, live.acks, tmp_path / "out", checkpoint=copy, full=True)

    assert full["incremental"]["run"] == 1
    assert full["incremental"]["started_over"] is True
    assert (
        full["incremental"]["cumulative"]["totals"]
        == runs[-1]["incremental"]["cumulative"]["totals"]
    )
    assert full["totals"] == runs[-1]["incremental"]["cumulative"]["totals"]
    state = load(copy)
    assert state is not None
    assert state.state.run == 1


def test_a_checkpoint_for_other_inputs_is_refused(
    plants: Planted, staged: tuple[Live, Path, list[dict[str, Any]]], copy: Path, tmp_path: Path
) -> None:
    live = staged[0]

    with pytest.raises(InputError, match=r"made for the commitlogs .*--full"):
        job(plants, plants.store, live.acks, tmp_path / "a", checkpoint=copy)
    with pytest.raises(InputError, match="10-minute buckets, not 5: start over with --full"):
        job(plants, live.store, live.acks, tmp_path / "b", checkpoint=copy, bucket_ms=300_000)
    # A generation written by a run killed before it made it current is not read.
    current = (copy / CURRENT).read_text()
    (copy / "run-000099").mkdir()
    state = load(copy)
    assert state is not None
    assert state.state.run == 4
    assert (copy / CURRENT).read_text() == current


@pytest.mark.slow
def test_the_command_line_runs_incrementally(plants: Planted, tmp_path: Path) -> None:
    # Its own live files: it appends to the ledger, which the module's runs share.
    live, copy = Live(plants, tmp_path / "live"), tmp_path / "checkpoint"
    for n, cut in enumerate(CUTS_MS):
        live.at(cut)
        job(plants, live.store, live.acks, tmp_path / f"out{n}", checkpoint=copy)
    args = (
        "--commitlog", str(live.store), "--outbox", str(plants.outbox_jsonl),
        "--acks", str(live.acks), "--checkpoint", str(copy), "--settle-minutes", "1",
    )  # fmt: skip

    done = reconcile(*args, out=tmp_path / "out")
    # The torn record's loss is open, within the settle window of the latest time: not yet
    # counted by the verdict.
    assert done.code == 0, done.stderr[-3000:]
    assert "reconcile: NOTHING LOST" in done.stdout
    assert (
        "incremental: run 5: 0 new records, 0 new ledger lines; settled 0 (0 lost)" in done.stdout
    )
    assert "(1 lost so far, provisionally: they settle 1 min after the watermark" in done.stdout
    assert "incremental: since the checkpoint began: 129 messages: ok 104, lost 5" in done.stdout
    # Later answers move the watermark on: the torn record's loss settles, and is counted.
    later = {
        "message_id": "LATER",
        "topic": "Orders",
        "state": "SPOOLED",
        "time_ms": T0 + 3 * 3_600_000,
    }
    with live.acks.open("a", encoding="utf-8") as f:
        # A restarted sidecar ends the torn line first (sidecar/ledger.py).
        f.write("\n" + json.dumps(later) + "\n")
    settled = reconcile(*args, out=tmp_path / "later")
    assert settled.code == 1, settled.stderr[-3000:]
    assert settled.stdout.startswith("reconcile: 1 LOST")
    assert settled.summary["drill_down"]["lost"][0]["message_id"] == plants.torn_id

    other = reconcile(*args[:1], str(plants.store), *args[2:], out=tmp_path / "other")
    assert other.code == EXIT_INPUT
    assert "start over with --full" in other.stderr


def test_a_run_catches_up_in_chunks(plants: Planted, tmp_path: Path) -> None:
    live = Live(plants, tmp_path / "live")
    live.at(None)
    whole = job(plants, live.store, live.acks, tmp_path / "whole")

    caught = job(
        plants, live.store, live.acks, tmp_path / "out", checkpoint=tmp_path / "checkpoint",
        in_process_records_max=20,
    )  # fmt: skip

    inc = caught["incremental"]
    assert inc["chunks"] >= 4
    for name in _FIGURES:
        assert inc["cumulative"][name] == whole[name], name
        assert caught[name] == whole[name], name
    assert added(inc["settled"], inc["open"]) == whole["totals"]
    assert caught["commitlog"]["records"] == whole["commitlog"]["records"]
    assert {k: caught["drill_down"][k] for k in ("lost", "duplicated", "recovered")} == {
        k: whole["drill_down"][k] for k in ("lost", "duplicated", "recovered")
    }
    assert caught["delivery_latency"] == whole["delivery_latency"]
    rows = pq.read_table(caught["details"]["messages"]).column("message_id").to_pylist()
    assert len(rows) == len(set(rows)) == whole["totals"]["messages"]


@pytest.mark.parametrize("after_ms", [0, 1, 2, 3, 4, 5, 7, 8, 9])
def test_a_ledger_is_cut_at_the_first_line_after_a_time(tmp_path: Path, after_ms: int) -> None:
    times = [1, 2, 2, 3, None, 5, 8, 8]  # None: a line that does not parse
    path = tmp_path / "acks.jsonl"
    lines = [
        b"{torn\n" if t is None else json.dumps({"time_ms": t}).encode() + b"\n" for t in times
    ]
    path.write_bytes(b"".join(lines))
    starts = [sum(len(x) for x in lines[:i]) for i in range(len(lines) + 1)]
    first = next((i for i, t in enumerate(times) if t is not None and t > after_ms), len(times))

    assert _first_line_after(path, 0, starts[-1], after_ms) == starts[first]
    assert _first_line_after(path, starts[2], starts[-1], after_ms) == starts[max(first, 2)]
