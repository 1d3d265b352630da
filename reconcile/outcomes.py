"""What the reconciliation calls each message: the definitions both engines implement.

The Spark engine (classify.py) and the in-process one (in_process/classify.py) classify by
these words; tests/reconcile/test_engines.py holds them to the same counts on the same data.

Definitions (summary.json and the README's "Reconciliation" section repeat them):

- A *message* is a message id found in any input. Its topic is the topic of its stored copy,
  else the ledger's, else the outbox's.
- *stored*: at least one copy in the commitlog as scanned (commitlog_source.py: before any torn
  tail), in an application topic or parked (a delayed message not yet due, a half message).
  *copies* counts the application-topic copies; parked copies are not counted.
- *acknowledged*: a ledger line STORED or SPOOLED. *ambiguous*: a ledger line SPOOLED with cause
  AMBIGUOUS, or an outbox entry marked maybe_stored or of cause AMBIGUOUS.

Each message gets exactly one outcome, the first that applies:

    not stored  lost        acknowledged STORED;
                pending     PENDING in the outbox (it will be resent);
                dead        DEAD in the outbox (the sidecar gave up; an operator must act);
                lost        acknowledged SPOOLED or DELIVERED in the outbox, yet neither stored
                            nor held by the outbox.
    stored      recovered   ambiguous, or still PENDING or DEAD in the outbox (its fate as the
                            sender saw it was open, yet it is stored). Those still PENDING are
                            also counted as ``resend_pending``: a resend would store it again;
                ok          acknowledged, or DELIVERED in the outbox;
                unexpected  in no ledger and no outbox entry, and its topic is in scope: a ledger
                            names the topic, so its sender kept books and this one is not in them.
                            From a sidecar's ledger after a crash, an upper bound: the answers
                            sent in its last moment may be missing (sidecar/ledger.py);
                unchecked   in no ledger and no outbox entry, and no ledger names its topic.

Besides its outcome, a message is *duplicated* when it has more than one copy
(``duplicate_copies`` = copies - 1); system-topic copies (retries, dead letters) and parked copies
are not copies. With several commitlogs (a cluster's, commitlog_sources.py) a copy is a distinct
(store host, phy_offset, store timestamp): a slave's copy of its master's record is the same
record, counted once (``folded_copies``), while a resend stored again is a second copy.

Time: a message is bucketed by its *event time*: its first acknowledgement (ledger ``time_ms``),
else its outbox entry's ``created_ms`` (when it was spooled), else its first store timestamp;
buckets are ``bucket_ms`` long (10 minutes), aligned to the epoch (UTC).
*Delivery latency* (time from first failure to delivery), for a stored message that failed first
(an outbox entry, or SPOOLED in a ledger): first store timestamp minus the failure time (the
entry's ``created_ms``, else the first SPOOLED acknowledgement), floored at 0 (an ambiguous send
may have been stored before it was spooled).
"""

from __future__ import annotations

BUCKET_MS_DEFAULT = 10 * 60 * 1000
OUTCOMES = ("lost", "pending", "dead", "recovered", "ok", "unexpected", "unchecked")
# The outcomes a drill-down lists message ids for (ok and unchecked are not findings).
FINDINGS = ("lost", "recovered", "unexpected", "pending", "dead")
# Upper edges of the delivery-latency histogram's bins, in ms; the last bin is open.
LATENCY_BIN_EDGES_MS = (
    1, 2, 5, 10, 20, 50, 100, 200, 500,
    1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000, 120_000, 300_000, 600_000,
    1_800_000, 3_600_000, 4 * 3_600_000, 12 * 3_600_000, 24 * 3_600_000, 7 * 24 * 3_600_000,
)  # fmt: skip
# Each the smallest latency that at least this fraction of the messages do not exceed (Spark's
# percentile_approx, exact below its 10,000-value accuracy; numpy's "inverted_cdf" in process).
LATENCY_PERCENTILES = (0.5, 0.9, 0.99)
# The counts every summary row carries (totals, per topic, per bucket, per topic and bucket).
COUNT_NAMES = (
    "messages", *OUTCOMES, "duplicated", "duplicate_copies", "resend_pending", "parked_only",
)  # fmt: skip
