"""The summary's figures as plain rows: what both engines' aggregates are shaped into.

Nothing here reads a table: the engines (summary.py for Spark, in_process/figures.py) aggregate,
and these functions turn their rows into summary.json's shapes, so the two engines' summaries
cannot differ in form. The segments' scan counts come from segment_scan.py's ``SegmentStats``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from broker.store.codec.scan import ScanEndKind
from reconcile.outcomes import COUNT_NAMES, LATENCY_BIN_EDGES_MS, LATENCY_PERCENTILES
from reconcile.segment_scan import (
    NOT_A_COMMITLOG,
    UNREADABLE,
    Segment,
    SegmentStats,
    segment_gaps,
)

DRILL_DOWN_COLUMNS = (
    "message_id", "topic", "event_time_ms", "copies", "parked_copies", "first_phy_offset",
    "last_phy_offset", "first_store_timestamp_ms", "ack_state", "ack_cause", "first_ack_ms",
    "outbox_state", "outbox_cause", "maybe_stored", "attempts", "last_error", "spooled_ms",
    "delivered_ms", "resend_pending",
)  # fmt: skip
MALFORMED_LEDGER_COLUMNS = ("source", "line", "message_id", "state", "time_ms")
# Where a segment's scan stopped early, as a stop's ``where`` says. A torn tail (a crash
# mid-append: the torn record in the last segment written, zeros only after it) is the one stop
# that leaves nothing written unread; every other is ``unread`` (reconcile/unread.py).
TORN_TAIL = "torn tail"
INSIDE_THE_LOG = "inside the log (not its last segment)"
BEFORE_WRITTEN_BYTES = "before bytes written after it in its segment"
NOT_A_COMMITLOG_SEGMENT = "not a commitlog segment"
UNREADABLE_SEGMENT = "unreadable segment"


def verdict_lost(summary: dict[str, Any]) -> int:
    """The losses a run's verdict counts: all it found, or an incremental run's settled ones
    (an open message's loss is provisional: its evidence may still be arriving)."""
    incremental = summary.get("incremental")
    counted = incremental["settled"] if incremental else summary["totals"]
    return int(counted["lost"])


def no_ledger() -> dict[str, Any]:
    return {"lines": 0, "malformed": 0, "stored": 0, "spooled": 0, "spooled_ambiguous": 0,
            "topics": []}  # fmt: skip


def summarise_ledger(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows of lines per (malformed, topic, state, ambiguous) as totals and the sorted scope
    topics: the topics the ledgers name, in which a stored message must have been acknowledged
    (outcomes.py)."""

    def lines(**match: Any) -> int:
        return sum(r["lines"] for r in rows if all(r[k] == v for k, v in match.items()))

    return {
        "lines": lines(),
        "malformed": lines(malformed=True),
        "stored": lines(malformed=False, state="STORED"),
        "spooled": lines(malformed=False, state="SPOOLED"),
        "spooled_ambiguous": lines(malformed=False, ambiguous=True),
        "topics": scope_topics(rows),
    }


def scope_topics(rows: list[dict[str, Any]]) -> list[str]:
    """The topics that well-formed lines of ``rows`` (lines per (malformed, topic, state,
    ambiguous)) name, sorted: the scope, or a ledger range's share of it."""
    return sorted({r["topic"] for r in rows if not r["malformed"]})


def counts_only(row: dict[str, Any]) -> dict[str, Any]:
    return {name: int(row.get(name) or 0) for name in COUNT_NAMES}


def with_key(row: dict[str, Any], key: str) -> dict[str, Any]:
    return {key: row[key], **counts_only(row)}


def with_bucket(row: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    start = int(row["bucket_start_ms"])
    keys: dict[str, Any] = {"bucket_start_ms": start, "bucket_start": iso_utc(start)}
    if key:
        keys[key] = row[key]
    return {**keys, **counts_only(row)}


def iso_utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def latency_document(stats: Iterable[dict[str, Any]], histogram: dict[int, int]) -> dict[str, Any]:
    """summary.json's ``delivery_latency`` from rows of (level 1 overall, 0 per ``topic``,
    ``messages``, ``percentiles_ms`` in LATENCY_PERCENTILES' order, ``max_ms``) and the messages
    per histogram bin (0 below LATENCY_BIN_EDGES_MS[0] …)."""
    rows = list(stats)
    edges = (0, *LATENCY_BIN_EDGES_MS)

    def percentiles(row: dict[str, Any]) -> dict[str, Any]:
        values = row["percentiles_ms"] or []
        return {
            "messages": int(row["messages"]),
            **{
                f"p{round(p * 100)}_ms": v for p, v in zip(LATENCY_PERCENTILES, values, strict=True)
            },
            "max_ms": row["max_ms"],
        }

    overall = next((percentiles(r) for r in rows if r["level"] == 1), {"messages": 0})
    return {
        **overall,
        "per_topic": {r["topic"]: percentiles(r) for r in rows if r["level"] == 0},
        "histogram": [
            {
                "from_ms": edges[b],
                "to_ms": edges[b + 1] if b + 1 < len(edges) else None,
                "messages": histogram[b],
            }
            for b in sorted(histogram)
        ],
    }


def commitlog_summary(
    segments: list[Segment], scanned: list[SegmentStats], limit: int
) -> dict[str, Any]:
    def total(name: str) -> int:
        return sum(int(getattr(s, name)) for s in scanned)

    # The tail is the last segment anything was written to: the broker may have prepared the
    # next one (AllocateMappedFileService), all zeros, under its real name already.
    tail = max((i for i, s in enumerate(scanned) if s.written), default=-1)
    stops = []
    for i, s in enumerate(scanned):
        where = _where_stopped(s, i < tail)
        if where is not None:
            stops.append(
                {
                    "segment": s.segment,
                    "phy_offset": s.end_phy_offset,
                    "kind": s.end_kind,
                    "where": where,
                    "reason": _stop_reason(s),
                    "written_after_phy_offset": s.written_after_phy_offset,
                    "unread": where != TORN_TAIL,
                }
            )
    return {
        "segments": len(segments),
        "segments_scanned": len(scanned),
        "segments_prepared_empty": sum(1 for s in scanned[tail + 1 :] if not s.written),
        "bytes": sum(s.size_bytes for s in segments),
        "records": total("records"),
        "kept_records": total("kept_records"),
        "parked_records": total("parked_records"),
        "system_topic_records": total("system_topic_records"),
        "rollback_records": total("rollback_records"),
        "records_without_id": total("records_without_id"),
        "blank_bytes": total("blank_bytes"),
        "stops": stops,
        "gaps": segment_gaps(segments),
        "first_store_timestamp_ms": min(
            (s.first_store_timestamp_ms for s in scanned if s.first_store_timestamp_ms),
            default=None,
        ),
        "last_store_timestamp_ms": max(
            (s.last_store_timestamp_ms for s in scanned if s.last_store_timestamp_ms), default=None
        ),
        "per_segment": [
            {k: getattr(s, k) for k in SegmentStats.__dataclass_fields__} for s in scanned[:limit]
        ],
    }


def _where_stopped(s: SegmentStats, later_segments_written: bool) -> str | None:
    """Where a segment's scan stopped early (a stop's ``where``), or None: it read all of it."""
    if s.end_kind == NOT_A_COMMITLOG:
        return NOT_A_COMMITLOG_SEGMENT
    if s.end_kind == UNREADABLE:
        return UNREADABLE_SEGMENT
    if s.written_after_phy_offset is not None:
        return BEFORE_WRITTEN_BYTES
    if s.end_kind == ScanEndKind.CORRUPT:
        return INSIDE_THE_LOG if later_segments_written else TORN_TAIL
    if later_segments_written and s.ends_early:
        return INSIDE_THE_LOG
    return None


def _stop_reason(s: SegmentStats) -> str:
    if s.end_reason:
        return s.end_reason
    if s.written_after_phy_offset is not None:
        return f"zeros, then bytes written at phy_offset {s.written_after_phy_offset:,}"
    return "zeros before the segment's end, records after them"
