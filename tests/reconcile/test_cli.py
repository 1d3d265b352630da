"""``rocketbox reconcile`` as a process: its exit codes and what it prints.

Proves: exit 1 when anything acknowledged was lost, with a summary naming the losses and the
torn tail, and summary.json, report.html, details/ and inputs/ written (test_outage.py runs it
with ``--json`` and exit 0); exit 3, before Spark starts, for a missing commitlog directory, a
directory without segment files, an outbox export of an unknown kind or missing, an outbox URL
that cannot be exported and a missing ledger; exit 2 for usage errors (no --outbox, a --conf
that is not KEY=VALUE); the exit codes are one table (reconcile/errors.py), which ``--help`` and
the README's reconciliation section both list whole (the codes that are no verdict:
test_rocketmq_logs.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reconcile.errors import EXIT_CODES
from tests.reconcile.planted import planted
from tests.reconcile.rocketbox_reconcile import RECONCILE_DEADLINE_S, reconcile
from tests.rocketbox_process import REPO_ROOT

pytestmark = pytest.mark.slow

EXIT_LOST = 1
EXIT_USAGE = 2
EXIT_INPUT = 3


def test_a_loss_exits_1_and_says_what_was_lost(tmp_path: Path) -> None:
    p = planted(tmp_path / "planted")

    run = reconcile(
        "--commitlog", str(p.store / "commitlog"), "--outbox", str(p.outbox_parquet),
        "--acks", str(p.acks), "--master", "local[2]", out=tmp_path / "out",
    )  # fmt: skip

    assert run.code == EXIT_LOST, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("reconcile: 5 LOST: 129 messages: ok 104, lost 5, duplicated 5")
    [torn] = [line for line in lines if "torn tail" in line]
    last_segment = sorted((p.store / "commitlog").iterdir())[-1].name
    assert torn.startswith(f"commitlog: torn tail: scan of {last_segment} stopped at phy_offset")
    assert run.summary["totals"]["lost"] == 5
    assert (run.out / "report.html").stat().st_size > 1_000_000  # plotly.js is inlined
    assert any((run.out / "details" / "messages").glob("*.parquet"))
    assert any((run.out / "inputs" / "acks").glob("*.parquet"))


def test_unreadable_inputs_exit_3_before_spark_starts(tmp_path: Path) -> None:
    no_segments = tmp_path / "no-segments"
    no_segments.mkdir()
    log = tmp_path / "store" / "commitlog"
    log.mkdir(parents=True)
    (log / "00000000000000000000").write_bytes(bytes(1024))
    export = tmp_path / "outbox.jsonl"
    export.write_text("")
    unknown = tmp_path / "outbox.csv"
    unknown.write_text("")
    cases = [
        (["--commitlog", str(tmp_path / "nowhere"), "--outbox", str(export)], "does not exist"),
        (["--commitlog", str(no_segments), "--outbox", str(export)], "no commitlog segment files"),
        (["--commitlog", str(log), "--outbox", str(unknown)], "expected a .jsonl/.json file"),
        (["--commitlog", str(log), "--outbox", str(tmp_path / "gone.jsonl")], "does not exist"),
        (["--commitlog", str(log), "--outbox", "redis://127.0.0.1:1/0"], "cannot export"),
        (["--commitlog", str(log), "--outbox", str(export), "--acks", str(tmp_path / "no.jsonl")],
         "not a readable file"),
    ]  # fmt: skip
    for args, message in cases:
        run = reconcile(*args, out=tmp_path / "out")

        assert run.code == EXIT_INPUT, (args, run.stdout, run.stderr)
        assert message in run.stderr, (args, run.stderr)
        assert "Traceback" not in run.stderr


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    bad_conf = reconcile("--commitlog", str(tmp_path), "--outbox", "x.jsonl", "--conf", "nokey",
                         out=tmp_path / "out")  # fmt: skip
    no_outbox = reconcile("--commitlog", str(tmp_path), out=tmp_path / "out")
    no_commitlog = reconcile("--outbox", "x.jsonl", out=tmp_path / "out")

    assert (bad_conf.code, no_outbox.code, no_commitlog.code) == (EXIT_USAGE,) * 3
    assert "is not KEY=VALUE" in bad_conf.stderr
    assert "--outbox" in no_outbox.stderr
    assert "--commitlog" in no_commitlog.stderr


def test_the_exit_codes_are_one_table_listed_by_the_help_and_the_readme() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox", "reconcile", "--help"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=RECONCILE_DEADLINE_S, check=True,
    )  # fmt: skip
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| exit | meaning |") :].split("\n\n")[0].splitlines()[2:]

    listed = done.stdout[done.stdout.index("Exit codes:") :].splitlines()[1:]
    assert [line.split(None, 1) for line in listed if line.strip()] == [
        [str(code), meaning] for code, meaning in EXIT_CODES
    ]
    assert table == [f"| {code} | {meaning} |" for code, meaning in EXIT_CODES]
