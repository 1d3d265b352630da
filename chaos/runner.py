"""Run one scenario end to end: the stage, the scenario's faults, the drain, the checks, the row.

After the scenario's act: wait for the load's end and for the outbox to hold no PENDING entry
(a condition with a deadline; its time is the row's "time to drain"); stop the sidecar (SIGTERM);
read every message back through the broker's consumer protocol; stop the broker; run
``rocketbox reconcile``; judge (chaos/checker.py).

A scenario fails on any lost message, any unexpected one, a FIFO group out of order, a consumer
that reads other copies than the commitlog holds, an outbox not drained in time, any DEAD entry
in the outbox (the sidecars run with the default delivery budget of a week: no scenario lasts
long enough for a message to exhaust it, so a DEAD entry was given up for a reason the scenario
did not allow; sample ids and their last errors go to verdict.json), a part that
would not start or a check that could not run, and, where the scenario says so (``no_duplicates``),
on any duplicate. Whatever happens, ``<out>/<scenario>/`` keeps what is needed to debug it:
``verdict.json`` (the row, the findings with sample ids, the reconciliation's totals, the fault
timeline), ``events.jsonl``, each process's output, ``load/answers.jsonl`` and ``load/acks.jsonl``,
``sidecar-acks.jsonl``, ``reconcile.log`` and ``reconcile/`` (summary.json, report.html,
details/). The parts' data (``data/``: the broker's store, the outbox) is kept when the scenario
failed, or with ``keep_data``.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.checker import RECONCILE_MASTER_DEFAULT, Findings, ReconcileRun, judge, run_reconcile
from chaos.consume import consume_all
from chaos.load import read_answers
from chaos.plan import make_plan
from chaos.report import Row
from chaos.scenarios import Scenario
from chaos.stage import POLL_INTERVAL_S, Stage
from outbox.entry import EntryState, OutboxStats

LOG = logging.getLogger(__name__)
MESSAGES_DEFAULT = 20_000
LOAD_DEADLINE_S_DEFAULT = 900.0
DRAIN_DEADLINE_S_DEFAULT = 300.0
SAMPLE_IDS_SHOWN = 5
# The outbox's counts after the drain are read again for this long when it cannot be read.
STATS_DEADLINE_S = 30.0


@dataclass(frozen=True, slots=True)
class Settings:
    out_dir: Path
    messages: int = MESSAGES_DEFAULT
    seed: int = 1
    load_deadline_s: float = LOAD_DEADLINE_S_DEFAULT
    drain_deadline_s: float = DRAIN_DEADLINE_S_DEFAULT
    reconcile_master: str = RECONCILE_MASTER_DEFAULT
    # --sidecar-id for the sidecars (a restarted one ends its own leases), when it has one.
    sidecar_ids: bool = True
    keep_data: bool = False


def run_scenario(scenario: Scenario, settings: Settings) -> Row:
    directory = settings.out_dir / scenario.name
    if directory.exists():
        shutil.rmtree(directory)
    seed = f"{settings.seed}:{scenario.name}"
    rng = random.Random(seed)
    messages = min(settings.messages, scenario.messages_max or settings.messages)
    plan = make_plan(seed, messages)
    row = Row(scenario.name)
    verdict: dict[str, Any] = {
        "scenario": scenario.name, "summary": scenario.summary, "seed": settings.seed,
        "messages": messages, "no_duplicates": scenario.no_duplicates, "notes": [],
    }  # fmt: skip
    stage: Stage | None = None
    try:
        stage = Stage(
            scenario.name, directory, plan, scenario.options,
            load_deadline_s=settings.load_deadline_s,
            sidecar_id=f"chaos-{scenario.name}" if settings.sidecar_ids else None,
            seed=rng.getrandbits(32),
        )  # fmt: skip
        with stage:
            try:
                scenario.act(stage, rng)
                _finish(stage, scenario, settings, row, verdict)
            finally:
                for name, output in stage.parts_output().items():
                    (directory / f"{name}.log").write_text(output, encoding="utf-8")
    except Exception as e:  # the scenario failed to run: that is its verdict, and the next runs
        LOG.exception("%s failed", scenario.name)
        row.failures.append(f"{type(e).__name__}: {e}")
        verdict["traceback"] = traceback.format_exc()
    if stage is not None:
        verdict["events"] = stage.events
    verdict["row"] = row.to_dict()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "verdict.json").write_text(json.dumps(verdict, indent=2), encoding="utf-8")
    if row.ok and not settings.keep_data:
        shutil.rmtree(directory / "data", ignore_errors=True)
    return row


def _finish(
    stage: Stage, scenario: Scenario, settings: Settings, row: Row, verdict: dict[str, Any]
) -> None:
    load, sidecar, broker = stage.load, stage.sidecar, stage.broker
    assert load is not None
    assert sidecar is not None
    assert broker is not None
    if not load.wait(settings.load_deadline_s):
        load.cancel()
        row.failures.append(f"the load did not end within {settings.load_deadline_s} s")
    if load.error is not None:
        row.failures.append(f"the load generator failed: {load.error!r}")
    verdict["load"] = {
        "elapsed_s": round(load.finished_s - load.started_s, 3),
        "answers_per_s": round(load.rate_per_s, 1),
    }
    if not stage.healed_s:
        stage.healed()
    row.drain_s = stage.wait_drained(settings.drain_deadline_s)
    if row.drain_s is None:
        row.failures.append(
            f"the outbox still held {stage.outbox_pending()} PENDING entries "
            f"{settings.drain_deadline_s} s after the heal"
        )
    stats = _outbox_stats(stage)
    dead_samples = stage.outbox_entries(EntryState.DEAD, SAMPLE_IDS_SHOWN) or []
    if (code := sidecar.stop()) != 0:
        verdict["notes"].append(f"the sidecar exited {code} on SIGTERM")
    consumed = consume_all(stage.broker_endpoint, stage.plan.topics)
    if (code := broker.stop()) != 0:
        verdict["notes"].append(f"the broker exited {code} on SIGTERM")
    reconciled = run_reconcile(
        broker.store_dir,
        stage.outbox_url,
        [load.out_dir / "acks.jsonl", stage.dir / "sidecar-acks.jsonl"],
        stage.dir / "reconcile",
        master=settings.reconcile_master,
    )
    verdict["reconcile"] = _reconcile_summary(reconciled)
    if reconciled.summary is None:
        row.failures.append(f"rocketbox reconcile: {reconciled.error}")
    findings = judge(read_answers(load.out_dir), reconciled, consumed)
    outbox = (reconciled.summary or {}).get("outbox") or {}
    if stats is None:
        row.failures.append("the outbox's counts could not be read after the drain")
    findings.dead = max(0 if stats is None else stats.dead, int(outbox.get("dead") or 0))
    for e in dead_samples:
        findings.note("dead", e.message_id)
    verdict["dead_entries"] = [
        {"message_id": e.message_id, "attempts": e.attempts, "last_error": e.last_error}
        for e in dead_samples
    ]
    verdict["findings"] = findings.to_dict()
    _fill(row, findings, scenario)


def _outbox_stats(stage: Stage) -> OutboxStats | None:
    """The outbox's counts, read again until STATS_DEADLINE_S when a read fails."""
    end = time.monotonic() + STATS_DEADLINE_S
    while (stats := stage.outbox_stats()) is None and time.monotonic() < end:
        time.sleep(POLL_INTERVAL_S)
    return stats


def _fill(row: Row, f: Findings, scenario: Scenario) -> None:
    row.findings = f

    def ids(category: str) -> str:
        return ", ".join(f.samples.get(category, [])[:SAMPLE_IDS_SHOWN])

    if f.lost:
        outcomes = ", ".join(f"{n} {what}" for what, n in sorted(f.lost_by_outcome.items()))
        row.failures.append(
            f"{f.lost} acknowledged messages never consumed (the reconciliation: {outcomes}; "
            f"e.g. {ids('lost')})"
        )
    if f.unexpected:
        row.failures.append(
            f"{f.unexpected} messages stored though never sent or REJECTED "
            f"(e.g. {ids('unexpected')})"
        )
    if f.groups_out_of_order:
        row.failures.append(
            f"{f.groups_out_of_order} FIFO groups out of order ({ids('groups_out_of_order')})"
        )
    if f.consumer_mismatch:
        row.failures.append(
            f"{f.consumer_mismatch} messages consumed a different number of times than the "
            f"commitlog holds them (e.g. {ids('consumer_mismatch')})"
        )
    if f.dead:
        row.failures.append(
            f"{f.dead} DEAD entries in the outbox: given up within the delivery budget "
            f"(e.g. {ids('dead')}; verdict.json's dead_entries has their last errors)"
        )
    if scenario.no_duplicates and f.duplicated:
        row.failures.append(
            f"{f.duplicated} messages duplicated ({f.duplicate_copies} extra copies; e.g. "
            f"{ids('duplicated')})"
        )


def _reconcile_summary(r: ReconcileRun) -> dict[str, Any]:
    out: dict[str, Any] = {"exit_code": r.exit_code, "elapsed_s": round(r.elapsed_s, 3)}
    if r.error:
        out["error"] = r.error
    if r.summary is not None:
        for key in ("verdict", "totals", "ledgers", "outbox"):
            out[key] = r.summary.get(key)
        out["commitlog_stops"] = r.summary["commitlog"]["stops"]
    return out
