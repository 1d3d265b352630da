"""summary.json put together from what an engine found: one shape, whichever engine ran.

An engine (spark_engine.py, in_process/engine.py) fills a ``Found``; ``summary`` adds the inputs,
the commitlog's figures per source, the verdict and the time each phase took. The verdict is
``NOTHING_LOST`` or ``LOST`` only when the whole commitlog was read; else it is ``UNREAD`` and
``unread`` says what could not be read (unread.py), whatever the counts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from reconcile.commitlog_sources import CommitlogSource, sources_summary
from reconcile.config import JobConfig
from reconcile.errors import InputError
from reconcile.figures import counts_only, verdict_lost, with_bucket, with_key
from reconcile.segment_scan import SegmentStats
from reconcile.unread import VERDICT_UNREAD, unread_state

LOG = logging.getLogger(__name__)
# Topics the ledgers may name: each becomes a literal of the scope test in the classification.
SCOPE_TOPICS_MAX = 10_000


class Phases:
    """Wall time per phase, for the summary (where does a run spend its time?)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - began, 3)
            LOG.info("reconcile: %s took %.1f s", name, self.seconds[name])


@dataclass(slots=True)
class Found:
    """An engine's findings, each list at most ``summary_rows_max`` + 1 rows (to tell a cut)."""

    engine: str  # config.ENGINE_SPARK or config.ENGINE_IN_PROCESS
    where: dict[str, Any]  # how it ran: the Spark master, or the in-process engine's limit
    segments: list[SegmentStats]
    ledger: dict[str, Any]  # figures.summarise_ledger without its topics
    scope: list[str]
    outbox: dict[str, Any]
    total: dict[str, Any]
    per_topic: list[dict[str, Any]]
    per_bucket: list[dict[str, Any]]
    per_topic_bucket: list[dict[str, Any]]
    latency: dict[str, Any]
    drill_down: dict[str, list[dict[str, Any]]]
    details: dict[str, str]
    slave_copies: int | None = None  # only when several commitlogs were read
    phases: Phases = field(default_factory=Phases)
    incremental: dict[str, Any] | None = None  # an incremental run's own figures


def split_scope(ledger: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The ledger's figures and, apart, the topics it names (InputError beyond the limit)."""
    figures = dict(ledger)
    scope: list[str] = figures.pop("topics") or []
    if len(scope) > SCOPE_TOPICS_MAX:
        raise InputError(f"the ledgers name {len(scope)} topics, more than {SCOPE_TOPICS_MAX}")
    return figures, scope


def counts_section(
    total: dict[str, Any],
    per_topic: list[dict[str, Any]],
    per_bucket: list[dict[str, Any]],
    per_topic_bucket: list[dict[str, Any]],
    limit: int,
) -> dict[str, Any]:
    """``totals``, ``per_topic``, ``per_bucket`` and ``per_topic_bucket`` as summary.json has
    them (a run's, or an incremental run's cumulative ones), each list cut to ``limit``."""
    return {
        "totals": counts_only(total),
        "per_topic": [with_key(r, "topic") for r in per_topic[:limit]],
        "per_bucket": [with_bucket(r) for r in per_bucket[:limit]],
        "per_topic_bucket": [with_bucket(r, "topic") for r in per_topic_bucket[:limit]],
    }


def summary(
    config: JobConfig, sources: list[CommitlogSource], found: Found, started: float
) -> dict[str, Any]:
    limit = config.summary_rows_max
    counted = counts_section(
        found.total, found.per_topic, found.per_bucket, found.per_topic_bucket, limit
    )
    done: dict[str, Any] = {
        "verdict": "",
        "verdict_lost": 0,
        "engine": found.engine,
        "inputs": {
            "commitlogs": [str(s.directory) for s in sources],
            "outbox": str(config.outbox),
            "ledgers": [str(p) for p in config.ledgers],
            "engine": found.engine,
            **found.where,
            **config.extra,
        },
        "bucket_ms": config.bucket_ms,
        "totals": counted["totals"],
        "commitlog": sources_summary(sources, found.segments, limit),
        "ledgers": {**found.ledger, "scope_topics": found.scope[:limit]},
        "outbox": found.outbox,
        "per_topic": counted["per_topic"],
        "per_bucket": counted["per_bucket"],
        "per_topic_bucket": counted["per_topic_bucket"],
        "truncated": {
            "per_topic": len(found.per_topic) > limit,
            "per_bucket": len(found.per_bucket) > limit,
            "per_topic_bucket": len(found.per_topic_bucket) > limit,
        },
        "delivery_latency": found.latency,
        "drill_down": found.drill_down,
        "details": found.details,
        "phases_s": found.phases.seconds,
    }
    if found.slave_copies is not None:
        done["commitlog"]["slave_copies"] = found.slave_copies
    if found.incremental is not None:
        done["incremental"] = found.incremental
    done["verdict_lost"] = verdict_lost(done)
    done["unread"] = unread_state(done)
    if done["unread"] is not None:
        done["verdict"] = VERDICT_UNREAD
    else:
        done["verdict"] = "LOST" if done["verdict_lost"] else "NOTHING_LOST"
    done["elapsed_s"] = round(time.monotonic() - started, 3)
    return done
