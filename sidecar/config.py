"""The sidecar's configuration: typed, frozen, built once by the CLI (rocketbox/cli.py), whose
options, ``ROCKETBOX_*`` environment variables and the Helm values map onto these fields."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from outbox.entry import OutboxLimits
from rocketbox_api.credentials import Credentials
from sidecar.coalescer import CoalesceConfig
from sidecar.health_log import STATE_LOG_INTERVAL_MS_DEFAULT
from sidecar.ledger import ACK_LEDGER_FLUSH_INTERVAL_MS_DEFAULT
from sidecar.producer import ProducerConfig
from sidecar.security import front_refusal

# A sidecar id, with ``/<incarnation>`` after it, is a lease owner (MySQL holds 255 characters).
SIDECAR_ID_CHARS_MAX = 128
# A bound on one message's bytes in a request besides its body, from intake's limits (properties
# 16 KiB, topic, ids, group, times) and protobuf's framing: generous, so that no valid request is
# refused by gRPC's own receive cap.
MESSAGE_FIELDS_BYTES_MAX = 32 * 1024
_SIDECAR_ID = re.compile(r"[A-Za-z0-9._:-]+")


def default_sidecar_id(listen_port: int) -> str:
    """This host's name and the port apps reach the sidecar on: in Kubernetes the pod's name,
    which a restarted container keeps. The port tells apart sidecars of one host sharing an
    outbox (two cannot listen on one port). Port 0 names no stable address, so the process id
    stands in: such a sidecar's restart waits out its dead leases."""
    host = socket.gethostname() or "rocketbox-sidecar"
    return f"{host}:{listen_port}" if listen_port else f"{host}:pid{os.getpid()}"


def check_sidecar_id(sidecar_id: str) -> None:
    if not sidecar_id or len(sidecar_id) > SIDECAR_ID_CHARS_MAX:
        raise ValueError(
            f"sidecar_id must be 1 to {SIDECAR_ID_CHARS_MAX} characters, got {len(sidecar_id)}"
        )
    if not _SIDECAR_ID.fullmatch(sidecar_id):
        raise ValueError(
            f"sidecar_id {sidecar_id!r} may hold letters, digits and . _ : - only "
            "(no '/': it separates the id from the incarnation in a lease owner)"
        )


@dataclass(frozen=True, slots=True)
class ResendConfig:
    """The resend pool (sidecar/resend_pool.py)."""

    # Resends in flight at once, over all claimed entries.
    resend_concurrency_max: int = 64
    # Entries one claim leases: one outbox round trip and commit whatever the count, so a drain
    # wants them large (MySQL drained faster at 512 than at 256; RocksDB and Redis the same at
    # either); they are held in memory until resent, bodies and all.
    claim_batch_max: int = 512
    # How long a claimed entry is ours: longer than a send with all its retries.
    lease_ms: int = 30_000
    # How often an idle pool looks for due entries (a spool wakes it at once).
    poll_interval_ms: int = 200
    # The default delivery budget: an entry still not delivered this long after its spool is
    # given up (DEAD), unless its message carries its own (sidecar/delivery_budget.py). Failed
    # resends never bury by count.
    age_max_s: int = 7 * 24 * 3600
    # Back-off between resends of one entry: exponential from initial to max, with jitter.
    backoff_initial_ms: int = 500
    backoff_max_ms: int = 60_000
    # While the broker takes no sends, one entry probes it per interval, growing to this
    # (sidecar/outage.py): how long the drain may wait, at most, once the broker is back.
    probe_interval_max_ms: int = 5_000
    # A send stored this recently shows the broker takes sends: a failure then is its message's
    # own, and no outage.
    outage_evidence_window_ms: int = 2_000
    # Ids of entries waiting out an UNAVAILABLE back-off, kept to pull them in once their topic's
    # sends are stored again (sidecar/pull_in.py); ~200 bytes each. Past it the oldest keep their
    # back-off. 0: off.
    pull_in_ids_max: int = 65_536
    # Delivered tombstones are kept this long for the reconciliation, then purged.
    delivered_retention_hours: float = 72.0
    purge_interval_ms: int = 60_000

    def __post_init__(self) -> None:
        positive = (
            "resend_concurrency_max", "claim_batch_max", "lease_ms", "poll_interval_ms",
            "age_max_s", "backoff_initial_ms", "purge_interval_ms", "probe_interval_max_ms",
        )  # fmt: skip
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.backoff_max_ms < self.backoff_initial_ms:
            raise ValueError("backoff_max_ms must be >= backoff_initial_ms")
        if self.outage_evidence_window_ms < 0:
            raise ValueError(
                f"outage_evidence_window_ms must be >= 0, got {self.outage_evidence_window_ms}"
            )
        if self.pull_in_ids_max < 0:
            raise ValueError(f"pull_in_ids_max must be >= 0, got {self.pull_in_ids_max}")


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    producer: ProducerConfig
    outbox_url: str
    outbox_limits: OutboxLimits = field(default_factory=OutboxLimits)
    resend: ResendConfig = field(default_factory=ResendConfig)
    listen_host: str = "127.0.0.1"
    listen_port: int = 8980
    # Threads for the outbox's blocking calls: spool writes (one at a time, each carrying every
    # spool that waited), the resend pool's claims and marks, readiness and the FIFO fence.
    outbox_threads: int = 64
    send_batch_entries_max: int = 1_000
    send_batch_bytes_max: int = 16 * 1024 * 1024
    send_stream_in_flight_max: int = 1_024
    # Admission control: messages inside the sidecar at once, over all calls; one more is
    # refused at once (RESOURCE_EXHAUSTED, retry-after). At least one full batch or stream.
    intake_in_flight_max: int = 2_048
    # Calls gRPC holds before the sidecar's code takes them (grpc.server.max_pending_requests,
    # soft and hard): the queue in front of admission control. Past it gRPC refuses a call at
    # once (CANCELLED); unbounded, a saturated sidecar lets calls wait there for seconds.
    pending_calls_max: int = 256
    coalesce: CoalesceConfig = field(default_factory=CoalesceConfig)
    # How often the in-memory FIFO fence is re-read from the outbox (sidecar/fifo_fence.py):
    # lifts fences whose entries another sidecar delivered, fences groups another one spooled.
    fifo_fence_refresh_interval_ms: int = 1_000
    # Time in-flight calls get to finish on SIGTERM before they are cancelled.
    shutdown_grace_ms: int = 10_000
    # How often readiness re-checks that the outbox is writable.
    readiness_interval_ms: int = 1_000
    # How often a lasting outage (broker not taking messages, outbox unreachable) is logged
    # again, with counts since the last line (sidecar/health_log.py); changes are logged at once.
    state_log_interval_ms: int = STATE_LOG_INTERVAL_MS_DEFAULT
    # The RocketMQ front (sidecar/rocketmq_front): apache.rocketmq.v2 for apps written against
    # an official RocketMQ 5 SDK. None: off. Port 0: a free port.
    rocketmq_listen_host: str | None = None
    rocketmq_listen_port: int = 0
    # The endpoint the front's routes name; None: the address each app reached it on.
    rocketmq_advertised: str | None = None
    # Prometheus endpoint (sidecar/metrics.py); None: off. Port 0: a free port.
    metrics_host: str | None = None
    metrics_port: int = 0
    # How often the outbox gauges are refreshed from the outbox's stats.
    outbox_stats_interval_ms: int = 5_000
    # Refresh them without a metrics endpoint of this sidecar's own: another serves its
    # registry (rocketbox up's one endpoint for the broker and the sidecar).
    outbox_stats_enable: bool = False
    # Optional acknowledgement ledger (JSON lines): the answers sent to apps, for reconciliation.
    ack_ledger_path: Path | None = None
    # When a sent answer reaches the ledger's file: 0 at once; N: every N ms (sidecar/ledger.py
    # says what each can lose in a crash).
    ack_ledger_flush_interval_ms: int = ACK_LEDGER_FLUSH_INTERVAL_MS_DEFAULT
    # This sidecar across its restarts (sidecar/sidecar.py, "Identity"): the leases an earlier
    # run of the same id left are ended at start. Each sidecar sharing an outbox needs its own.
    # "": default_sidecar_id(listen_port).
    sidecar_id: str = ""
    # TLS of the listeners apps reach (rocketbox.v1 and the RocketMQ front), PEM files read once
    # at start (sidecar/security.py); with a client CA, mTLS. None: plaintext.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    # The bearer token every rocketbox.v1 and outbox admin call must carry; None: no check.
    api_token: str | None = field(default=None, repr=False)
    # The apps' access keys the RocketMQ front verifies each call's signature against; empty: no
    # check (sidecar/rocketmq_front/auth.py). A front checking nothing while the API is
    # protected must be chosen by name (rocketmq_front_insecure; sidecar/security.py).
    front_credentials: tuple[Credentials, ...] = field(default=(), repr=False)
    rocketmq_front_insecure: bool = False
    # grpc.health.v1 alone, in plaintext, for probes that cannot speak TLS. None: off.
    health_listen_host: str | None = None
    health_listen_port: int = 0

    @property
    def grpc_receive_bytes_max(self) -> int:
        """gRPC's own cap on one received request (``grpc.max_receive_message_length``). Past it
        gRPC's core refuses the request before any handler runs, with its own RESOURCE_EXHAUSTED
        ("Received message larger than max"), which apps read as "full, retry later". So the cap
        is the largest valid request (``send_batch_bytes_max`` of bodies plus every message's
        other fields) and as much again as ``send_batch_bytes_max`` above it: a request over
        the API's limits but under the cap reaches the handlers, which answer INVALID_ARGUMENT
        naming the size and the limit. Above the cap nothing can be done at the server (the
        bytes are never read); rocketbox_client maps that answer to RequestTooLargeError, which
        is not retriable."""
        valid_bytes_max = (
            self.send_batch_bytes_max + self.send_batch_entries_max * MESSAGE_FIELDS_BYTES_MAX
        )
        return valid_bytes_max + self.send_batch_bytes_max

    def __post_init__(self) -> None:
        if not self.sidecar_id:
            # A frozen dataclass sets a derived default through object.__setattr__.
            object.__setattr__(self, "sidecar_id", default_sidecar_id(self.listen_port))
        check_sidecar_id(self.sidecar_id)
        for name in (
            "intake_in_flight_max", "pending_calls_max", "fifo_fence_refresh_interval_ms",
            "state_log_interval_ms",
        ):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together (--tls-cert, --tls-key)")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError(
                "tls_client_ca_file (--tls-client-ca) needs tls_cert_file (--tls-cert)"
            )
        refusal = front_refusal(
            front_on=self.rocketmq_listen_host is not None,
            api_token=self.api_token is not None,
            client_ca=self.tls_client_ca_file is not None,
            front_credentials=bool(self.front_credentials),
            front_insecure=self.rocketmq_front_insecure,
        )
        if refusal is not None:
            raise ValueError(refusal)
        if self.ack_ledger_flush_interval_ms < 0:
            raise ValueError(
                "ack_ledger_flush_interval_ms must be >= 0, "
                f"got {self.ack_ledger_flush_interval_ms}"
            )
