"""The chaos suite's checker: after a scenario, what happened to every message, in Jepsen's queue
categories, from three independent books.

1. The load generator's record (chaos/load.py): every message sent and its answer.
2. ``rocketbox reconcile`` over the broker's commitlog, the outbox and the ack ledgers (the load
   generator's, and the sidecar's own): run as the operator runs it, as a process, ``--json``;
   its per-message table (``details/messages``) is read back.
3. The consumer side (chaos/consume.py): every message read back through the broker's
   consumer protocol, in queue order.

Categories, per message id (a message is in as many as apply):

- lost: acknowledged to the load (STORED or SPOOLED) and never consumed; or the reconciliation
  calls it lost (an acknowledgement in the sidecar's own ledger counts too);
- duplicated: consumed, or in the commitlog, more than once;
- recovered: the load got no answer (the call failed as a whole), or a rejection that leaves the
  outcome open (below), yet it is stored;
- unexpected: stored, though the load never sent it or was told REJECTED (but for a rejection
  that leaves the outcome open).

A rejection leaves the outcome open when the outbox may have written the spool without
confirming it: a Redis outbox with ``wait_replicas`` whose replicas did not acknowledge the
write in time (``ReplicasNotAcknowledgedError``: "the master executed the write […]"), or a
write whose answer was lost (the server killed after it logged the write). The sidecar answers
it UNAVAILABLE saying so (``SPOOL_OUTCOME_OPEN``: it may still be delivered, to be sent again with
the same message id), and the entry may be kept, and sent, or not; ``ambiguous_rejected`` counts
those answers.

And one count of the outbox's own: dead, its entries in the DEAD state once drained (given up by
the sidecar; the runner reads it from the outbox, and from the reconciliation's summary).

Besides: FIFO order (within each message group, the consumed order of first copies follows the
order the load sent them in; a group spread over several queues is out of order too), and the
consumer's copies equal to the commitlog's for every id.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from chaos.consume import Consumed
from chaos.load import Answer
from chaos.processes import REPO_ROOT
from outbox.backends.redis.connection import ReplicasNotAcknowledgedError
from sidecar.errors import SPOOL_OUTCOME_OPEN

RECONCILE_MASTER_DEFAULT = "local[2]"
RECONCILE_SHUFFLE_PARTITIONS_DEFAULT = 4
RECONCILE_DEADLINE_S = 900.0
# Exit codes of rocketbox reconcile that still wrote a summary: nothing lost, something lost.
RECONCILE_ANSWERED = (0, 1)
SAMPLE_IDS_MAX = 50
# What the reason of a rejection whose spool was written, but not as durably as asked, names.
AMBIGUOUS_REJECTION_MARKERS = (ReplicasNotAcknowledgedError.__name__, SPOOL_OUTCOME_OPEN)


@dataclass(slots=True)
class ReconcileRun:
    exit_code: int
    summary: dict[str, Any] | None
    # message id → (copies in the commitlog, the reconciliation's outcome)
    messages: dict[str, tuple[int, str]]
    elapsed_s: float
    error: str = ""


def run_reconcile(
    store_dir: Path,
    outbox: str,
    ledgers: list[Path],
    out_dir: Path,
    *,
    master: str = RECONCILE_MASTER_DEFAULT,
    shuffle_partitions: int = RECONCILE_SHUFFLE_PARTITIONS_DEFAULT,
    deadline_s: float = RECONCILE_DEADLINE_S,
) -> ReconcileRun:
    """``rocketbox reconcile --json`` as a process; its stderr goes to ``reconcile.log`` beside
    ``out_dir``, its outputs (summary.json, report.html, details/) into ``out_dir``."""
    args = [
        sys.executable, "-m", "rocketbox", "reconcile", "--commitlog", str(store_dir),
        "--outbox", outbox, "--out", str(out_dir), "--master", master,
        "--shuffle-partitions", str(shuffle_partitions), "--drill-down-ids-max", "1000", "--json",
        *(arg for ledger in ledgers if ledger.is_file() for arg in ("--acks", str(ledger))),
    ]  # fmt: skip
    log_path = out_dir.parent / "reconcile.log"
    started = time.monotonic()
    with log_path.open("w", encoding="utf-8") as log:
        log.write(" ".join(args) + "\n")
        log.flush()
        try:
            done = subprocess.run(
                args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
                timeout=deadline_s, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return ReconcileRun(-1, None, {}, deadline_s, f"did not end in {deadline_s} s")
    elapsed_s = time.monotonic() - started
    if done.returncode not in RECONCILE_ANSWERED:
        return ReconcileRun(
            done.returncode, None, {}, elapsed_s,
            f"exited {done.returncode}: see {log_path}",
        )  # fmt: skip
    summary: dict[str, Any] = json.loads(done.stdout)
    table = pq.read_table(
        summary["details"]["messages"], columns=["message_id", "copies", "outcome"]
    )
    messages = {
        row["message_id"]: (int(row["copies"]), str(row["outcome"])) for row in table.to_pylist()
    }
    return ReconcileRun(done.returncode, summary, messages, elapsed_s)


@dataclass(slots=True)
class Findings:
    sent: int = 0
    stored: int = 0
    spooled: int = 0
    rejected: int = 0
    # Of the rejected, those whose reason leaves the outcome open (module docstring).
    ambiguous_rejected: int = 0
    no_answer: int = 0
    lost: int = 0
    duplicated: int = 0
    duplicate_copies: int = 0
    recovered: int = 0
    unexpected: int = 0
    groups_out_of_order: int = 0
    # Ids whose consumed copies differ from their commitlog copies.
    consumer_mismatch: int = 0
    consumed: int = 0
    # DEAD entries in the outbox after the drain (the runner's, not judge's).
    dead: int = 0
    # The lost, by what the reconciliation says of them (lost, pending, dead …).
    lost_by_outcome: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, category: str, message_id: str) -> None:
        ids = self.samples.setdefault(category, [])
        if len(ids) < SAMPLE_IDS_MAX:
            ids.append(message_id)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(answers: list[dict[str, Any]], reconciled: ReconcileRun, consumed: Consumed) -> Findings:
    """Every message's categories, from the three books."""
    f = Findings(consumed=consumed.messages)
    by_id = {a["message_id"]: a for a in answers}
    states = Counter(a["state"] for a in answers)
    f.sent = len(answers)
    f.stored = states[Answer.STORED]
    f.spooled = states[Answer.SPOOLED]
    f.rejected = states[Answer.REJECTED]
    f.no_answer = states[Answer.NO_ANSWER]
    universe = set(by_id) | set(reconciled.messages) | set(consumed.copies)
    for message_id in sorted(universe):
        state = by_id[message_id]["state"] if message_id in by_id else None
        if state == Answer.REJECTED and ambiguous_rejection(by_id[message_id]):
            f.ambiguous_rejected += 1
            state = Answer.NO_ANSWER
        log_copies, outcome = reconciled.messages.get(message_id, (0, ""))
        read = consumed.copies[message_id]
        present = read > 0 or log_copies > 0
        if (state in (Answer.STORED, Answer.SPOOLED) and read == 0) or outcome == "lost":
            f.lost += 1
            f.note("lost", message_id)
            why = outcome or "not in the commitlog"
            f.lost_by_outcome[why] = f.lost_by_outcome.get(why, 0) + 1
        if max(read, log_copies) > 1:
            f.duplicated += 1
            f.duplicate_copies += max(read, log_copies) - 1
            f.note("duplicated", message_id)
        if state == Answer.NO_ANSWER and present:
            f.recovered += 1
            f.note("recovered", message_id)
        if present and state in (None, Answer.REJECTED):
            f.unexpected += 1
            f.note("unexpected", message_id)
        if reconciled.summary is not None and read != log_copies:
            f.consumer_mismatch += 1
            f.note("consumer_mismatch", message_id)
    for group in groups_out_of_order(by_id, consumed):
        f.groups_out_of_order += 1
        f.note("groups_out_of_order", group)
    return f


def ambiguous_rejection(answer: dict[str, Any]) -> bool:
    """Whether a REJECTED answer leaves open whether the message was spooled."""
    reason = str(answer.get("reason", ""))
    return any(marker in reason for marker in AMBIGUOUS_REJECTION_MARKERS)


def groups_out_of_order(answers: dict[str, dict[str, Any]], consumed: Consumed) -> list[str]:
    """The FIFO groups whose first copies were consumed out of the load's send order, or from
    more than one queue."""
    seen: set[str] = set()
    sequence: dict[str, list[int]] = defaultdict(list)
    queues: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for queue, messages in consumed.queues.items():
        for m in messages:
            answer = answers.get(m.message_id)
            if answer is None or answer.get("group") is None or m.message_id in seen:
                continue
            seen.add(m.message_id)
            sequence[answer["group"]].append(int(answer["group_seq"]))
            queues[answer["group"]].add(queue)
    return sorted(
        group
        for group, seqs in sequence.items()
        if len(queues[group]) > 1 or any(b <= a for a, b in itertools.pairwise(seqs))
    )
