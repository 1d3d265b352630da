"""The in-process classification: every message id once, with its evidence and its outcome.

The same definitions as the Spark engine's classify.py (outcomes.py states them): each input is
aggregated by message id (Arrow's hash aggregation), the three are joined (a full outer join on
the id), and the outcome and the derived columns are computed over whole columns. The result has
the columns of the Spark engine's ``details/messages``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from reconcile.outcomes import BUCKET_MS_DEFAULT

_ID = "message_id"
_OUTBOX_FIELDS = (
    "topic", "state", "cause", "maybe_stored", "attempts", "last_error", "created_ms",
    "delivered_ms",
)  # fmt: skip


def classify(
    records: pa.Table,
    acks: pa.Table | None,
    outbox: pa.Table,
    scope_topics: list[str],
    bucket_ms: int = BUCKET_MS_DEFAULT,
    fold_copies: bool = False,
) -> pa.Table:
    """One row per message id (records: segment_scan's columns; acks and outbox: inputs.py's)."""
    assert bucket_ms > 0
    per_id = _from_log(records, fold_copies)
    if acks is not None:
        per_id = _joined(per_id, _from_ledgers(acks))
    per_id = _joined(per_id, _from_outbox(outbox))
    return _classified(per_id, scope_topics, bucket_ms)


def _joined(left: pa.Table, right: pa.Table) -> pa.Table:
    """The full outer join on message_id of two tables that each hold an id at most once (what
    _by_id and _from_outbox return), the id coalesced; a null id matches nothing.

    A merge, not Arrow's hash join: the two id columns are sorted as one (cheap: ids come nearly
    in order), so an id of both sides is two neighbours, the left's first (the sort is stable),
    and each side's columns are gathered once by the rows found. Profiled, the two hash joins
    took more CPU than the rest of the classification."""
    if not right.num_rows or not left.num_rows:  # nothing to match: one side's rows, widened
        return pa.concat_tables([left, right], promote_options="default")
    ids = pa.chunked_array([*left[_ID].chunks, *right[_ID].chunks], pa.string()).combine_chunks()
    order = np.asarray(pc.sort_indices(ids), np.int64)
    in_order = ids.take(pa.array(order))
    same = np.zeros(len(order), np.bool_)  # same[i]: row i's id is row i + 1's
    if len(order) > 1:
        equal = pc.equal(in_order.slice(0, len(order) - 1), in_order.slice(1))
        same[:-1] = np.asarray(pc.fill_null(equal, False).to_numpy(zero_copy_only=False))
    starts = np.flatnonzero(~np.concatenate([[False], same[:-1]]))
    first = order[starts]
    second = np.where(same[starts], order[np.minimum(starts + 1, len(order) - 1)], -1)
    lefts = left.num_rows
    left_rows = np.where(first < lefts, first, -1)
    right_rows = np.where(first >= lefts, first - lefts, np.where(second >= 0, second - lefts, -1))
    columns = {_ID: in_order.take(pa.array(starts))}
    for side, rows in ((left, left_rows), (right, right_rows)):
        taken = side.drop_columns([_ID]).take(pa.array(rows, pa.int64(), mask=rows < 0))
        columns.update(zip(taken.column_names, taken.columns, strict=True))
    return pa.table(columns)


def _from_log(records: pa.Table, fold: bool) -> pa.Table:
    """copies, parked_copies, folded_copies, the topic, the first and last store time and
    phy_offset. Folding (several logs) counts a record found in two logs once: the same
    (store host, phy_offset, store timestamp)."""
    keys = [_ID, "parked", "topic", "store_host", "phy_offset", "store_timestamp_ms"]
    if fold:
        distinct = records.group_by(keys).aggregate([(_ID, "count", pc.CountOptions("all"))])
        read = distinct[f"{_ID}_count"]
    else:
        distinct = records.select(keys)
        read = pa.chunked_array([np.ones(records.num_rows, np.int64)], pa.int64())
    parked = distinct["parked"]
    table = pa.table(
        {
            _ID: distinct[_ID],
            "c_topic": distinct["topic"],
            "store_ts": distinct["store_timestamp_ms"],
            "phy": distinct["phy_offset"],
            "copy": pc.cast(pc.invert(parked), pa.int64()),
            "parked_copy": pc.cast(parked, pa.int64()),
            "read": read,
        }
    )
    agg = _by_id(
        table,
        [
            ("copy", "sum"), ("parked_copy", "sum"), ("read", "sum"), ("c_topic", "min"),
            ("store_ts", "min"), ("store_ts", "max"), ("phy", "min"), ("phy", "max"),
        ],
    )  # fmt: skip
    copies, parked_copies = agg["copy_sum"], agg["parked_copy_sum"]
    folded = pc.subtract(pc.subtract(agg["read_sum"], copies), parked_copies)
    return pa.table(
        {
            _ID: agg[_ID],
            "copies": copies,
            "parked_copies": parked_copies,
            "folded_copies": folded,
            "c_topic": agg["c_topic_min"],
            "first_store_timestamp_ms": agg["store_ts_min"],
            "last_store_timestamp_ms": agg["store_ts_max"],
            "first_phy_offset": agg["phy_min"],
            "last_phy_offset": agg["phy_max"],
        }
    )


def _by_id(table: pa.Table, aggregations: list[tuple[str, str]]) -> pa.Table:
    """``table.group_by(message_id).aggregate(aggregations)``, columns named ``{column}_{how}``.

    Most ids occur once in an input (one record, one answer), and a group of one row needs no
    hashing: its sum, min, max or any is its value, its count 1 or 0. So the rows are sorted by
    id (cheap: ids come nearly in order), those of ids that occur once are passed through, and
    only the others are grouped. Profiled, the grouping was a large share of the
    classification."""
    names = [f"{column}_{how}" for column, how in aggregations]
    ordered = table.take(pc.sort_indices(table[_ID]))
    ids = ordered[_ID].combine_chunks()
    repeated = np.zeros(len(ids), np.bool_)
    if len(ids) > 1:
        same = pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1))
        same_np = np.asarray(pc.fill_null(same, False).to_numpy(zero_copy_only=False), np.bool_)
        repeated[1:] |= same_np
        repeated[:-1] |= same_np
    once = ordered.filter(pa.array(~repeated))
    passed = {_ID: once[_ID]}
    for (column, how), name in zip(aggregations, names, strict=True):
        value = once[column]
        passed[name] = pc.cast(pc.is_valid(value), pa.int64()) if how == "count" else value
    grouped = ordered.filter(pa.array(repeated)).group_by(_ID).aggregate(aggregations)
    grouped = grouped.select([_ID, *names])
    return pa.concat_tables([pa.table(passed).cast(grouped.schema), grouped])


def _from_ledgers(acks: pa.Table) -> pa.Table:
    good = acks.filter(pc.invert(acks["malformed"]))
    state = good["state"]
    spooled = pc.equal(state, "SPOOLED")
    ambiguous = pc.fill_null(pc.and_kleene(spooled, pc.equal(good["cause"], "AMBIGUOUS")), False)
    table = pa.table(
        {
            _ID: good[_ID],
            "stored": pc.equal(state, "STORED"),
            "spooled": spooled,
            "ambiguous": ambiguous,
            "time_ms": good["time_ms"],
            "spooled_ms": pc.if_else(spooled, good["time_ms"], pa.scalar(None, pa.int64())),
            "topic": good["topic"],
            "cause": good["cause"],
        }
    )
    agg = _by_id(
        table,
        [
            ("stored", "count"), ("stored", "any"), ("spooled", "any"), ("ambiguous", "any"),
            ("time_ms", "min"), ("spooled_ms", "min"), ("topic", "min"), ("cause", "min"),
        ],
    )  # fmt: skip
    return pa.table(
        {
            _ID: agg[_ID],
            "ack_lines": agg["stored_count"],
            "acked_stored": agg["stored_any"],
            "acked_spooled": agg["spooled_any"],
            "ack_ambiguous": agg["ambiguous_any"],
            "first_ack_ms": agg["time_ms_min"],
            "first_spooled_ms": agg["spooled_ms_min"],
            "l_topic": agg["topic_min"],
            "ack_cause": agg["cause_min"],
        }
    )


def _from_outbox(outbox: pa.Table) -> pa.Table:
    """Per id: its entries, and the latest one's fields (should an export hold an id twice,
    as two outboxes exported as one may)."""
    good = outbox.filter(pc.invert(outbox["malformed"]))
    order = pc.coalesce(good["state_changed_ms"], good["created_ms"], pa.scalar(0, pa.int64()))
    good = good.append_column("o_order", order)
    ranked = good.take(pc.sort_indices(good, [(_ID, "ascending"), ("o_order", "ascending")]))
    ids = ranked[_ID].to_numpy(zero_copy_only=False)
    last = np.ones(len(ids), np.bool_)
    last[:-1] = ids[1:] != ids[:-1]
    entries = np.diff(np.concatenate([[-1], np.flatnonzero(last)]))
    latest = ranked.filter(pa.array(last))
    return pa.table(
        {
            _ID: latest[_ID],
            "outbox_entries": pa.array(entries, pa.int64()),
            **{f"o_{name}": latest[name] for name in _OUTBOX_FIELDS},
        }
    )


def _yes(column: pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    return np.asarray(pc.fill_null(column, False).to_numpy(zero_copy_only=False), np.bool_)


def _zero(table: pa.Table, name: str) -> npt.NDArray[np.int64]:
    if name not in table.column_names:
        return np.zeros(table.num_rows, np.int64)
    return np.asarray(pc.fill_null(table[name], 0).to_numpy(zero_copy_only=False), np.int64)


def _column(table: pa.Table, name: str, kind: pa.DataType) -> pa.ChunkedArray:
    """``name``, or nulls when no input brought it (no ledgers: no ledger columns)."""
    if name in table.column_names:
        return table[name]
    return pa.chunked_array([pa.nulls(table.num_rows, kind)])


def _classified(t: pa.Table, scope_topics: list[str], bucket_ms: int) -> pa.Table:
    i64, text = pa.int64(), pa.string()
    copies, parked_copies = _zero(t, "copies"), _zero(t, "parked_copies")
    first_store = _column(t, "first_store_timestamp_ms", i64)
    first_ack = _column(t, "first_ack_ms", i64)
    o_state, o_created = _column(t, "o_state", text), _column(t, "o_created_ms", i64)
    topic = pc.coalesce(_column(t, "c_topic", text), _column(t, "l_topic", text), t["o_topic"])

    stored = (copies + parked_copies) > 0
    pending, dead = _yes(pc.equal(o_state, "PENDING")), _yes(pc.equal(o_state, "DEAD"))
    acked_stored = _yes(_column(t, "acked_stored", pa.bool_()))
    outcome = _outcome(t, topic, scope_topics, stored, acked_stored, pending, dead)
    event_time = pc.coalesce(first_ack, o_created, first_store)
    failed_at = pc.coalesce(o_created, _column(t, "first_spooled_ms", i64))
    waited = pc.max_element_wise(
        pc.subtract(first_store, failed_at), pa.scalar(0, i64), skip_nulls=False
    )
    latency = pc.if_else(pa.array(stored), waited, pa.scalar(None, i64))
    ack_state = _labelled(
        [acked_stored, _yes(_column(t, "acked_spooled", pa.bool_()))], ["STORED", "SPOOLED"], None
    )
    return pa.table(
        {
            "message_id": t["message_id"],
            "topic": topic,
            "bucket_start_ms": _bucket_start(event_time, bucket_ms),
            "event_time_ms": event_time,
            "duplicated": pa.array(copies > 1),
            "duplicate_copies": pa.array(np.maximum(copies - 1, 0)),
            "resend_pending": pa.array(stored & pending),
            "parked_only": pa.array((copies == 0) & (parked_copies > 0)),
            "copies": pa.array(copies),
            "parked_copies": pa.array(parked_copies),
            "folded_copies": pa.array(_zero(t, "folded_copies")),
            "first_store_timestamp_ms": first_store,
            "last_store_timestamp_ms": _column(t, "last_store_timestamp_ms", i64),
            "first_phy_offset": _column(t, "first_phy_offset", i64),
            "last_phy_offset": _column(t, "last_phy_offset", i64),
            "ack_state": ack_state,
            "ack_cause": _column(t, "ack_cause", text),
            "first_ack_ms": first_ack,
            "ack_lines": pa.array(_zero(t, "ack_lines")),
            "outbox_state": o_state,
            "outbox_cause": t["o_cause"],
            "maybe_stored": t["o_maybe_stored"],
            "attempts": t["o_attempts"],
            "last_error": t["o_last_error"],
            "spooled_ms": o_created,
            "delivered_ms": t["o_delivered_ms"],
            "delivery_latency_ms": latency,
            "outcome": outcome,
        }
    )


def _outcome(
    t: pa.Table,
    topic: pa.ChunkedArray,
    scope_topics: list[str],
    stored: npt.NDArray[np.bool_],
    acked_stored: npt.NDArray[np.bool_],
    pending: npt.NDArray[np.bool_],
    dead: npt.NDArray[np.bool_],
) -> pa.Array:
    """Each message's outcome: the first of outcomes.py's rules that applies."""
    ambiguous = (
        _yes(_column(t, "ack_ambiguous", pa.bool_()))
        | _yes(t["o_maybe_stored"])
        | _yes(pc.equal(t["o_cause"], "AMBIGUOUS"))
    )
    known = (_zero(t, "ack_lines") > 0) | (_zero(t, "outbox_entries") > 0)
    in_scope = _yes(pc.is_in(topic, value_set=pa.array(scope_topics, pa.string())))
    return _labelled(
        [
            stored & (ambiguous | pending | dead),
            stored & known,
            stored & in_scope,
            stored,
            acked_stored,
            pending,
            dead,
        ],
        ["recovered", "ok", "unexpected", "unchecked", "lost", "pending", "dead"],
        "lost",
    )


def _labelled(
    conditions: list[npt.NDArray[np.bool_]], labels: list[str], otherwise: str | None
) -> pa.Array:
    """The label of the first condition that holds, row by row (else ``otherwise``; None: null),
    made from small integer codes: a column of Python strings would cost a microsecond a row."""
    codes = np.select(conditions, list(range(len(labels))), -1).astype(np.int8)
    names = pa.array([*labels, otherwise], pa.string())
    codes[codes < 0] = len(labels)
    return pc.take(names, pa.array(codes))


def _bucket_start(event_time: pa.ChunkedArray, bucket_ms: int) -> pa.Array:
    """The start of the event time's bucket: buckets aligned to the epoch (floor, as pmod)."""
    missing = np.asarray(pc.is_null(event_time).to_numpy(zero_copy_only=False), np.bool_)
    ms = np.asarray(pc.fill_null(event_time, 0).to_numpy(zero_copy_only=False), np.int64)
    return pa.array(ms - np.mod(ms, bucket_ms), pa.int64(), mask=missing)
