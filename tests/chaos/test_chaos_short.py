"""The chaos suite's short scenarios, run by ``make test`` (the full suite is ``make chaos``).

Each runs a scenario end to end as ``python -m chaos`` does, with a few thousand messages: real
broker (SYNC_FLUSH) and sidecar processes, the load through Send, SendBatch and SendStream, the
fault, the drain, a consumer reading everything back, and ``rocketbox reconcile``.

Proves, against the faults the suite injects:
- broker SIGKILL mid-load: nothing acknowledged (STORED or SPOOLED) is lost, every message sent
  got exactly one answer, FIFO groups stay in order;
- sidecar SIGKILL mid-drain (RocksDB outbox), restarted: the same, and no message is stored twice;
- a power cut of the RocksDB outbox's disk mid-drain (its unsynced writes dropped, the sidecar
  killed), restarted: the same, and no message is stored twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.runner import Settings, run_scenario
from chaos.scenarios import SCENARIOS, SHORT_SCENARIOS

MESSAGES = 2_000
DRAIN_DEADLINE_S = 120.0


@pytest.mark.slow
@pytest.mark.parametrize("name", SHORT_SCENARIOS)
def test_short_scenario_loses_nothing(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[name]
    row = run_scenario(
        scenario, Settings(out_dir=tmp_path, messages=MESSAGES, drain_deadline_s=DRAIN_DEADLINE_S)
    )
    where = tmp_path / name
    assert row.ok, "\n".join([*row.failures, f"records and logs: {where}"])
    verdict = json.loads((where / "verdict.json").read_text())
    found = row.findings
    assert found.sent == MESSAGES
    assert found.stored + found.spooled + found.rejected + found.no_answer == MESSAGES
    assert found.lost == 0
    assert verdict["findings"]["groups_out_of_order"] == 0
    if scenario.no_duplicates:
        assert found.duplicated == 0
    # The fault happened while messages were in play: some went through the outbox.
    assert found.spooled > 0, verdict["events"]
    assert row.drain_s is not None
    assert verdict["reconcile"]["totals"]["lost"] == 0
