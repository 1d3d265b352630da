"""The in-process engine's figures: the same aggregates as the Spark engine's summary.py, over
the classified Arrow table, shaped by figures.py.

Orders follow Spark's: ascending with nulls first. Percentiles are exact ("inverted_cdf": the
smallest latency that at least that fraction of messages do not exceed), which is what Spark's
percentile_approx gives below its accuracy of 10,000 values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reconcile.figures import DRILL_DOWN_COLUMNS, MALFORMED_LEDGER_COLUMNS, latency_document
from reconcile.input_formats import ENTRY_STATES
from reconcile.outcomes import (
    COUNT_NAMES,
    FINDINGS,
    LATENCY_BIN_EDGES_MS,
    LATENCY_PERCENTILES,
    OUTCOMES,
)

# details/counts' grouping levels, as the Spark engine's cube numbers them.
LEVEL_TOPIC_BUCKET, LEVEL_TOPIC, LEVEL_BUCKET, LEVEL_TOTAL = 0, 1, 2, 3


def counts(classified: pa.Table) -> pa.Table:
    """The outcome counts per (topic, bucket), per topic, per bucket and in total, with
    ``level`` (LEVEL_*): the Spark engine's ``details/counts``."""
    return roll_up(cells(classified))


def cells(classified: pa.Table) -> pa.Table:
    """The outcome counts per (topic, bucket): the cells every other level sums."""
    outcome = classified["outcome"]
    indicators: dict[str, Any] = {o: pc.cast(pc.equal(outcome, o), pa.int64()) for o in OUTCOMES}
    for name in ("duplicated", "resend_pending", "parked_only"):
        indicators[name] = pc.cast(classified[name], pa.int64())
    indicators["duplicate_copies"] = pc.cast(classified["duplicate_copies"], pa.int64())
    table = pa.table(
        {
            "topic": classified["topic"],
            "bucket_start_ms": classified["bucket_start_ms"],
            "messages": pa.array(np.ones(classified.num_rows, np.int64)),
            **indicators,
        }
    )
    return _summed(table, ["topic", "bucket_start_ms"])


def added_cells(*tables: pa.Table) -> pa.Table:
    """Several tables of cells (two runs', say) as one, a row per (topic, bucket)."""
    return _summed(pa.concat_tables(tables), ["topic", "bucket_start_ms"])


def roll_up(cells_table: pa.Table) -> pa.Table:
    """Cells (rows of topic, bucket and counts, a pair possibly in several rows: two runs'
    cells) summed into every level, with ``level``; no total row without messages, as Spark's
    cube of nothing."""
    parts = []
    levels = [
        (LEVEL_TOPIC_BUCKET, ["topic", "bucket_start_ms"]),
        (LEVEL_TOPIC, ["topic"]),
        (LEVEL_BUCKET, ["bucket_start_ms"]),
        (LEVEL_TOTAL, []),
    ]
    for level, keys in levels:
        if not keys and not cells_table.num_rows:
            continue
        grouped = _summed(cells_table, keys)
        rows = grouped.num_rows
        for key, kind in (("topic", pa.string()), ("bucket_start_ms", pa.int64())):
            if key not in keys:
                grouped = grouped.append_column(key, pa.nulls(rows, kind))
        grouped = grouped.append_column("level", pa.array([level] * rows, pa.int32()))
        parts.append(grouped.select(["topic", "bucket_start_ms", "level", *COUNT_NAMES]))
    if not parts:
        return (
            _summed(cells_table, ["topic", "bucket_start_ms"])
            .append_column("level", pa.array([], pa.int32()))
            .select(["topic", "bucket_start_ms", "level", *COUNT_NAMES])
        )
    return pa.concat_tables(parts)


def _summed(table: pa.Table, keys: list[str]) -> pa.Table:
    grouped = table.group_by(keys).aggregate([(n, "sum") for n in COUNT_NAMES])
    return grouped.rename_columns([n.removesuffix("_sum") for n in grouped.column_names])


def level_rows(
    counts_table: pa.Table, level: int, order: list[str], limit: int
) -> list[dict[str, Any]]:
    """Rows of one level, ordered, at most ``limit`` + 1 (to tell truncation)."""
    rows = counts_table.filter(pc.equal(counts_table["level"], level))
    if order:
        rows = _sorted(rows, [(key, "ascending") for key in order])
    found: list[dict[str, Any]] = rows.slice(0, limit + 1).to_pylist()
    return found


def levels(
    counts_table: pa.Table, limit: int
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The total row, and the rows per topic, per bucket and per (topic, bucket) in the
    summary's orders, each at most ``limit`` + 1."""
    total = level_rows(counts_table, LEVEL_TOTAL, [], 1)
    return (
        total[0] if total else {},
        level_rows(counts_table, LEVEL_TOPIC, ["topic"], limit),
        level_rows(counts_table, LEVEL_BUCKET, ["bucket_start_ms"], limit),
        level_rows(counts_table, LEVEL_TOPIC_BUCKET, ["bucket_start_ms", "topic"], limit),
    )


def total(cells_table: pa.Table) -> dict[str, int]:
    """The counts of every cell added up."""
    return {name: int(pc.sum(cells_table[name]).as_py() or 0) for name in COUNT_NAMES}


def latency(classified: pa.Table, limit: int) -> dict[str, Any]:
    timed = classified.filter(pc.is_valid(classified["delivery_latency_ms"]))
    values = np.asarray(timed["delivery_latency_ms"].to_numpy(), np.int64)
    stats = [_latency_row(values, None, 1)] if len(values) else []
    topics = timed["topic"].to_numpy(zero_copy_only=False)
    for topic in sorted({t for t in topics.tolist() if t is not None}):
        stats.append(_latency_row(values[topics == topic], topic, 0))
    if any(t is None for t in topics.tolist()):
        stats.append(_latency_row(values[[t is None for t in topics.tolist()]], None, 0))
    bins = np.searchsorted(np.asarray(LATENCY_BIN_EDGES_MS), values, side="right")
    found, per_bin = np.unique(bins, return_counts=True)
    histogram = {int(b): int(n) for b, n in zip(found, per_bin, strict=True)}
    return latency_document(stats[: limit + 1], histogram)


def _latency_row(values: np.ndarray[Any, Any], topic: str | None, level: int) -> dict[str, Any]:
    quantiles = np.quantile(values, LATENCY_PERCENTILES, method="inverted_cdf")
    return {
        "level": level,
        "topic": topic,
        "messages": len(values),
        "percentiles_ms": [int(v) for v in quantiles],
        "max_ms": int(values.max()),
    }


def drill_down(
    classified: pa.Table, acks: pa.Table | None, ids_max: int
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for finding in FINDINGS:
        rows = classified.filter(pc.equal(classified["outcome"], finding))
        rows = _sorted(rows, [("event_time_ms", "ascending"), ("message_id", "ascending")])
        out[finding] = rows.slice(0, ids_max).select(list(DRILL_DOWN_COLUMNS)).to_pylist()
    duplicated = classified.filter(classified["duplicated"])
    duplicated = _sorted(duplicated, [("copies", "descending"), ("message_id", "ascending")])
    columns = ["outcome", *DRILL_DOWN_COLUMNS]
    out["duplicated"] = duplicated.slice(0, ids_max).select(columns).to_pylist()
    if acks is not None:
        malformed = acks.filter(acks["malformed"]).slice(0, ids_max)
        out["malformed_ledger_lines"] = malformed.select(list(MALFORMED_LEDGER_COLUMNS)).to_pylist()
    return out


def drill_candidates(classified: pa.Table, ids_max: int) -> pa.Table:
    """The rows any drill-down list of these messages could name, each once: the first
    ``ids_max`` of each finding and of the duplicated. Candidates of several tables, put
    together, give the drill-down of all of them."""
    numbered = classified.append_column("_row", pa.array(np.arange(classified.num_rows)))
    rows: list[Any] = []
    for finding in FINDINGS:
        found = numbered.filter(pc.equal(numbered["outcome"], finding))
        found = _sorted(found, [("event_time_ms", "ascending"), ("message_id", "ascending")])
        rows += found["_row"].to_pylist()[:ids_max]
    duplicated = numbered.filter(numbered["duplicated"])
    duplicated = _sorted(duplicated, [("copies", "descending"), ("message_id", "ascending")])
    rows += duplicated["_row"].to_pylist()[:ids_max]
    return classified.take(pa.array(sorted(set(rows)), pa.int64()))


def ledger_rows(acks: pa.Table) -> list[dict[str, Any]]:
    """Lines per (malformed, topic, state, ambiguous), as figures.summarise_ledger takes them."""
    good = pc.invert(acks["malformed"])
    nothing = pa.scalar(None, pa.string())
    ambiguous = pc.and_kleene(
        pc.equal(acks["state"], "SPOOLED"), pc.equal(acks["cause"], "AMBIGUOUS")
    )
    table = pa.table(
        {
            "malformed": acks["malformed"],
            "topic": pc.if_else(good, acks["topic"], nothing),
            "state": pc.if_else(good, acks["state"], nothing),
            "ambiguous": pc.fill_null(pc.and_kleene(ambiguous, good), False),
            "lines": pa.array(np.ones(acks.num_rows, np.int64)),
        }
    )
    keys = ["malformed", "topic", "state", "ambiguous"]
    grouped = table.group_by(keys).aggregate([("lines", "sum")])
    rows: list[dict[str, Any]] = grouped.rename_columns([*keys, "lines"]).to_pylist()
    return rows


def outbox_stats(outbox: pa.Table) -> dict[str, int]:
    malformed = outbox["malformed"]
    good_states = pc.if_else(malformed, pa.scalar(None, pa.string()), outbox["state"])
    states = pc.value_counts(good_states).to_pylist()
    by_state = {s["values"]: s["counts"] for s in states}
    return {
        "entries": outbox.num_rows,
        "malformed": int(pc.sum(pc.cast(malformed, pa.int64())).as_py() or 0),
        **{state.lower(): int(by_state.get(state, 0)) for state in ENTRY_STATES},
    }


def _sorted(table: pa.Table, keys: list[tuple[str, str]]) -> pa.Table:
    if not table.num_rows:
        return table
    return table.take(pc.sort_indices(table, sort_keys=[(*key, "at_start") for key in keys]))
