"""chaos/checker.py's categories and chaos/report.py's row, on books written by hand:

- a message answered REJECTED yet stored is unexpected, but one whose rejection says the outbox
  wrote it without the replicas' acknowledgement it waited for, or that the outbox did not
  confirm it (the outcome is open), is recovered, and counted as an ambiguous rejection;
- acknowledged and never consumed is lost; consumed twice is duplicated;
- the row carries the outbox's DEAD entries in a column of their own.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chaos.checker import ReconcileRun, judge
from chaos.consume import Consumed, ConsumedMessage
from chaos.load import Answer
from chaos.report import COLUMNS, Row, markdown
from sidecar.errors import SPOOL_OUTCOME_OPEN

WAIT_SHORTFALL = (
    "the broker did not take it and the outbox could not spool it: redis outbox … put: "
    "ReplicasNotAcknowledgedError: the master executed the write, but 0 of the wait_replicas=1 "
    "replicas acknowledged it within wait_timeout_ms=1000: it may not survive a failover"
)
OUTBOX_DOWN = "the broker did not take it and the outbox could not spool it: ConnectionError"
ANSWER_LOST = (
    f"the broker did not take it and the outbox did not confirm the spool, so it "
    f"{SPOOL_OUTCOME_OPEN} d (the outbox keeps one entry an id), never as a new message "
    "(redis outbox put: ConnectionError: Connection closed by server.)"
)


def answer(message_id: str, state: Answer, reason: str = "") -> dict[str, Any]:
    return {"message_id": message_id, "state": state, "reason": reason}


def consumed(copies: dict[str, int]) -> Consumed:
    out = Consumed(copies=Counter(copies))
    offset = 0
    for message_id, n in copies.items():
        for _ in range(n):
            out.queues.setdefault(("T", 0), []).append(ConsumedMessage(message_id, "T", 0, offset))
            offset += 1
    return out


def reconciled(copies: dict[str, int]) -> ReconcileRun:
    messages = {m: (n, "ok") for m, n in copies.items()}
    return ReconcileRun(0, {"totals": {}}, messages, 0.0)


def test_a_stored_rejection_is_unexpected_unless_it_left_the_outcome_open() -> None:
    answers = [
        answer("a", Answer.REJECTED, OUTBOX_DOWN),
        answer("b", Answer.REJECTED, WAIT_SHORTFALL),
        answer("c", Answer.REJECTED, WAIT_SHORTFALL),
        answer("d", Answer.REJECTED, ANSWER_LOST),
    ]
    stored = {"a": 1, "b": 1, "d": 1}
    f = judge(answers, reconciled(stored), consumed(stored))
    assert f.rejected == 4
    assert f.ambiguous_rejected == 3
    assert f.samples["unexpected"] == ["a"]
    assert f.samples["recovered"] == ["b", "d"]
    assert f.lost == 0


def test_lost_and_duplicated() -> None:
    answers = [
        answer("a", Answer.SPOOLED),
        answer("b", Answer.STORED),
        answer("c", Answer.SPOOLED),
    ]
    stored = {"b": 2, "c": 1}
    f = judge(answers, reconciled(stored), consumed(stored))
    assert (f.lost, f.duplicated, f.duplicate_copies) == (1, 1, 1)
    assert f.samples["lost"] == ["a"]
    assert f.consumer_mismatch == 0


def test_the_row_shows_dead_entries() -> None:
    row = Row("s")
    row.findings.dead = 3
    row.drain_s = 1.0
    cells = dict(zip(COLUMNS, row.cells(), strict=True))
    assert cells["dead"] == "3"
    assert "| dead |" in markdown([row])
