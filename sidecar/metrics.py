"""The sidecar's Prometheus metrics, served on ``--metrics-listen`` (off by default).

- ``rocketbox_sidecar_sends_total{state, cause}``: every answer given to an app (state STORED,
  SPOOLED or REJECTED; cause the spool cause, the rejection's gRPC code, or "" when stored).
- ``rocketbox_sidecar_send_seconds{state}``: intake to answer.
- ``rocketbox_sidecar_resends_total{outcome}``: the resend pool's DELIVERED, RESCHEDULED, BURIED.
- ``rocketbox_sidecar_resends_unchecked_total``: outbox entries that may already be stored (an
  ambiguous send) resent without the broker's index check, because no access point offers it (a
  RocketMQ proxy): each may be delivered twice. 0 against rocketbox's broker.
- ``rocketbox_sidecar_resends_pulled_in_total``: outbox entries made due at once because their
  topic's sends were stored again (sidecar/pull_in.py), instead of waiting out their back-off.
- ``rocketbox_sidecar_intake_in_flight``: messages inside the sidecar now (admission control's
  count, bounded by ``intake_in_flight_max``).
- ``rocketbox_sidecar_fifo_fenced_groups``: FIFO groups whose new messages are spooled behind
  their entries in the outbox (the in-memory fence).
- ``rocketbox_sidecar_broker_send_messages``: messages per SendMessage request (coalescing).
- ``rocketbox_sidecar_front_forwarded_total{method, code}``: calls the RocketMQ front forwarded to
  the broker, by method and the gRPC code of the answer (INTERNAL: a fault of the front).
- ``rocketbox_outbox_put_seconds``: one durable spool write (shared by concurrent spools).
- ``rocketbox_outbox_put_entries``: entries per spool write.
- ``rocketbox_outbox_entries{outbox, state}``: depth by PENDING, IN_FLIGHT, DELIVERED, DEAD.
- ``rocketbox_outbox_bytes{outbox}``: body bytes counted against ``outbox_bytes_max``.
- ``rocketbox_outbox_oldest_pending_age_seconds{outbox}``: 0 when nothing is pending.
- ``rocketbox_sidecar_ready{reason}``: 1 for the readiness reason now, 0 for the others: READY,
  or why not: OUTBOX_NO_SPACE (the outbox's storage is full: spools refused, the drain goes on),
  OUTBOX_UNAVAILABLE (the outbox cannot be written). Refreshed with readiness.
- ``rocketbox_outbox_no_space``: 1 while the outbox refuses spools for want of space (a full
  disk, Redis at maxmemory), while what it holds is still delivered.

The outbox gauges (the last three) are the whole outbox's, however many sidecars share it: every
sidecar sharing one exports the same figures under the same ``outbox`` label (``outbox_label``:
the backend's name of it, without credentials; for an outbox no other sidecar opens, qualified by
the sidecar's id), so dashboards and alerts count it once with ``max by (outbox)``, never
``sum``. They are refreshed every ``outbox_stats_interval_ms`` by ``Outbox.shared_stats``, not per
scrape: its totals come from the backend's counters, and what needs a scan (MySQL's in flight)
is read by one sidecar at a time and published to the others.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from outbox.entry import OutboxStats
from outbox.factory import backend_class

# Seconds: a local send takes about a millisecond; a spool after retries up to the send timeout.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Messages per request or entries per write: 1 is the uncoalesced case.
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# The sidecar's readiness reasons (sidecar/sidecar.py).
READY, OUTBOX_NO_SPACE, OUTBOX_UNAVAILABLE = "READY", "OUTBOX_NO_SPACE", "OUTBOX_UNAVAILABLE"
READINESS_REASONS = (READY, OUTBOX_NO_SPACE, OUTBOX_UNAVAILABLE)


class SidecarMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.sends = Counter(
            "rocketbox_sidecar_sends", "Messages answered, by state and cause.",
            ["state", "cause"], registry=r,
        )  # fmt: skip
        self.send_seconds = Histogram(
            "rocketbox_sidecar_send_seconds", "Intake to answer.", ["state"],
            buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self._resend_metrics(r)
        self.front_forwarded = Counter(
            "rocketbox_sidecar_front_forwarded",
            "Calls the RocketMQ front forwarded to the broker, by method and answer code.",
            ["method", "code"], registry=r,
        )  # fmt: skip
        self.put_seconds = Histogram(
            "rocketbox_outbox_put_seconds", "One durable spool write.",
            buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.put_entries = Histogram(
            "rocketbox_outbox_put_entries", "Entries per spool write.",
            buckets=BATCH_SIZE_BUCKETS, registry=r,
        )  # fmt: skip
        self.broker_send_messages = Histogram(
            "rocketbox_sidecar_broker_send_messages", "Messages per SendMessage request.",
            buckets=BATCH_SIZE_BUCKETS, registry=r,
        )  # fmt: skip
        self.fifo_fenced_groups = Gauge(
            "rocketbox_sidecar_fifo_fenced_groups", "FIFO groups fenced behind the outbox.",
            registry=r,
        )  # fmt: skip
        self.intake_in_flight = Gauge(
            "rocketbox_sidecar_intake_in_flight", "Messages inside the sidecar now.", registry=r
        )
        self._outbox_gauges(r)
        self.ready = Gauge(
            "rocketbox_sidecar_ready", "1 for the readiness reason now (READY or why not).",
            ["reason"], registry=r,
        )  # fmt: skip
        self.outbox_no_space = Gauge(
            "rocketbox_outbox_no_space",
            "1 while the outbox refuses spools for want of space (what it holds still drains).",
            registry=r,
        )  # fmt: skip

    def _resend_metrics(self, r: CollectorRegistry) -> None:
        """The resend pool's (sidecar/resend_pool.py)."""
        self.resends = Counter(
            "rocketbox_sidecar_resends", "Resend outcomes.", ["outcome"], registry=r
        )
        self.resends_unchecked = Counter(
            "rocketbox_sidecar_resends_unchecked",
            "Resends of outbox entries that may already be stored, made without the broker's "
            "index check (no access point offers it): each may be delivered twice.",
            registry=r,
        )
        self.resends_pulled_in = Counter(
            "rocketbox_sidecar_resends_pulled_in",
            "Outbox entries made due at once when their topic's sends were stored again.",
            registry=r,
        )
        self.broker_probes = Counter(
            "rocketbox_sidecar_broker_probes",
            "Sends that probed a broker in an outage (an entry resent alone or a message "
            "intake sent; every other message waits in the outbox).",
            registry=r,
        )
        self.resend_attempts = Histogram(
            "rocketbox_sidecar_resend_attempts",
            "Resends an outbox entry took, observed when it was delivered or buried.",
            buckets=(1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
            registry=r,
        )

    def _outbox_gauges(self, r: CollectorRegistry) -> None:
        """The whole outbox's figures, labelled by it (module docstring)."""
        self.entries = Gauge(
            "rocketbox_outbox_entries", "Outbox entries by state (the whole outbox's).",
            ["outbox", "state"], registry=r,
        )  # fmt: skip
        self.bytes = Gauge(
            "rocketbox_outbox_bytes", "Body bytes of pending and dead entries.", ["outbox"],
            registry=r,
        )  # fmt: skip
        self.oldest_pending_age = Gauge(
            "rocketbox_outbox_oldest_pending_age_seconds",
            "Age of the oldest pending entry (0: none).", ["outbox"], registry=r,
        )  # fmt: skip

    def observe_readiness(self, reason: str) -> None:
        for known in READINESS_REASONS:
            self.ready.labels(known).set(1 if known == reason else 0)
        self.outbox_no_space.set(1 if reason == OUTBOX_NO_SPACE else 0)

    def observe_stats(self, stats: OutboxStats, now_ms: int, outbox: str) -> None:
        """The outbox gauges of ``outbox`` (its ``outbox_label``) from its stats."""
        self.entries.labels(outbox, "PENDING").set(stats.pending)
        self.entries.labels(outbox, "IN_FLIGHT").set(stats.in_flight)
        self.entries.labels(outbox, "DELIVERED").set(stats.delivered)
        self.entries.labels(outbox, "DEAD").set(stats.dead)
        self.bytes.labels(outbox).set(stats.bytes)
        oldest = stats.oldest_pending_created_ms
        age_s = 0 if oldest is None else max(0, now_ms - oldest) / 1000.0
        self.oldest_pending_age.labels(outbox).set(age_s)


def outbox_label(url: str, sidecar_id: str) -> str:
    """The ``outbox`` label of the outbox ``url`` names (module docstring): the same in every
    sidecar given that URL, without credentials (``Outbox.label``)."""
    backend = backend_class(urlsplit(url).scheme.lower())
    label = backend.label(url)
    if backend.features.shared_by_sidecars:
        return label
    # No other sidecar opens it: the same path in another pod is another outbox.
    return f"{label} on {sidecar_id}"
