"""The summary's figures: aggregates of the classified messages, collected within bounds.

Everything here reads the job's ``details/messages`` table and collects only aggregates (at most
``limit`` + 1 rows per list, to tell a truncated list) and drill-down samples (at most
``ids_max`` message ids per finding); the segments' scan counts come from the scan's accumulator.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from reconcile.classify import (
    FINDINGS,
    LATENCY_BIN_EDGES_MS,
    LATENCY_PERCENTILES,
    OUTCOMES,
    latency_histogram,
    latency_stats,
)
from reconcile.commitlog_source import Segment, SegmentStats, segment_gaps

DRILL_DOWN_COLUMNS = (
    "message_id", "topic", "event_time_ms", "copies", "parked_copies", "first_phy_offset",
    "last_phy_offset", "first_store_timestamp_ms", "ack_state", "ack_cause", "first_ack_ms",
    "outbox_state", "outbox_cause", "maybe_stored", "attempts", "last_error", "spooled_ms",
    "delivered_ms", "resend_pending",
)  # fmt: skip


def one_row(df: DataFrame) -> dict[str, Any]:
    row = df.first()
    assert row is not None, "a global aggregate has one row"
    return row.asDict()


def no_ledger() -> dict[str, Any]:
    return {"lines": 0, "malformed": 0, "stored": 0, "spooled": 0, "spooled_ambiguous": 0,
            "topics": []}  # fmt: skip


def level_rows(counts: DataFrame, level: int, order: list[str], limit: int) -> list[dict[str, Any]]:
    """Rows of one grouping level of the cube, at most ``limit`` + 1 (to tell truncation)."""
    rows = counts.where(sf.col("level") == level)
    if order:
        rows = rows.orderBy(*order)
    return [r.asDict() for r in rows.limit(limit + 1).collect()]


def counts_only(row: dict[str, Any]) -> dict[str, Any]:
    names = ("messages", *OUTCOMES, "duplicated", "duplicate_copies", "resend_pending",
             "parked_only")  # fmt: skip
    return {name: int(row.get(name) or 0) for name in names}


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


def commitlog_summary(
    segments: list[Segment], scanned: list[SegmentStats], limit: int
) -> dict[str, Any]:
    def total(name: str) -> int:
        return sum(int(getattr(s, name)) for s in scanned)

    # The tail is the last segment anything was written to: the broker may have prepared the
    # next one (AllocateMappedFileService), all zeros, under its real name already.
    tail = max((i for i, s in enumerate(scanned) if s.written), default=-1)
    stops = [
        {
            "segment": s.segment,
            "phy_offset": s.end_phy_offset,
            "kind": s.end_kind,
            "where": "torn tail" if i >= tail else "inside the log (not its last segment)",
            "reason": s.end_reason or "zeros before the segment's end, records after them",
        }
        for i, s in enumerate(scanned)
        if s.stopped_early or (i < tail and s.ends_early)
    ]
    return {
        "segments": len(segments),
        "segments_scanned": len(scanned),
        "segments_prepared_empty": sum(1 for s in scanned[tail + 1 :] if not s.written),
        "bytes": sum(s.size_bytes for s in segments),
        "records": total("records"),
        "kept_records": total("kept_records"),
        "parked_records": total("parked_records"),
        "system_topic_records": total("system_topic_records"),
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


def slave_copies(classified: DataFrame) -> int:
    """Records read more than once (a slave's copy of its master's) and counted once."""
    return int(one_row(classified.agg(sf.sum("folded_copies").alias("n")))["n"] or 0)


def latency_summary(classified: DataFrame, limit: int) -> dict[str, Any]:
    stats = [r.asDict() for r in latency_stats(classified).limit(limit + 1).collect()]
    histogram = {int(r["bin"]): int(r["messages"]) for r in latency_histogram(classified).collect()}
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

    overall = next((percentiles(r) for r in stats if r["level"] == 1), {"messages": 0})
    return {
        **overall,
        "per_topic": {r["topic"]: percentiles(r) for r in stats if r["level"] == 0},
        "histogram": [
            {
                "from_ms": edges[b],
                "to_ms": edges[b + 1] if b + 1 < len(edges) else None,
                "messages": histogram[b],
            }
            for b in sorted(histogram)
        ],
    }


def drill_down(
    classified: DataFrame, acks: DataFrame | None, ids_max: int
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for finding in FINDINGS:
        rows = (
            classified.where(sf.col("outcome") == finding)
            .orderBy("event_time_ms", "message_id")
            .select(*DRILL_DOWN_COLUMNS)
            .limit(ids_max)
            .collect()
        )
        out[finding] = [r.asDict() for r in rows]
    duplicated = (
        classified.where(sf.col("duplicated"))
        .orderBy(sf.col("copies").desc(), "message_id")
        .select("outcome", *DRILL_DOWN_COLUMNS)
        .limit(ids_max)
        .collect()
    )
    out["duplicated"] = [r.asDict() for r in duplicated]
    if acks is not None:
        malformed = (
            acks.where(sf.col("malformed"))
            .select("source", "line", "message_id", "state", "time_ms")
            .limit(ids_max)
            .collect()
        )
        out["malformed_ledger_lines"] = [r.asDict() for r in malformed]
    return out
