"""Join the commitlog, the ledgers and the outbox on message id, and classify every message: the
Spark engine's classification, by the definitions in outcomes.py.

The three inputs are put under each other (a union by name) and grouped by message id once: one
shuffle, however many inputs, and no row of one input needs a partner in another. DataFrame API
only; nothing leaves the executors but the aggregates the driver asks for.
"""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from reconcile.outcomes import (
    BUCKET_MS_DEFAULT,
    COUNT_NAMES,
    LATENCY_BIN_EDGES_MS,
    LATENCY_PERCENTILES,
    OUTCOMES,
)

_ID_HASH = "_id_hash"
_OUTBOX_FIELDS = (
    "topic", "state", "cause", "maybe_stored", "attempts", "last_error", "created_ms",
    "delivered_ms", "state_changed_ms",
)  # fmt: skip


def classify(
    records: DataFrame,
    acks: DataFrame | None,
    outbox: DataFrame,
    scope_topics: list[str],
    bucket_ms: int = BUCKET_MS_DEFAULT,
    fold_copies: bool = False,
) -> DataFrame:
    """One row per message id, with its evidence, its outcome and its bucket. ``fold_copies``:
    the records come from several commitlogs, which may hold the same record (a slave's copy)."""
    assert bucket_ms > 0
    from_log = records.select(
        "message_id",
        sf.col("topic").alias("c_topic"),
        sf.col("parked").alias("c_parked"),
        sf.col("store_timestamp_ms").alias("c_store_ts"),
        sf.col("phy_offset").alias("c_phy_offset"),
        sf.struct("store_host", "phy_offset", "store_timestamp_ms").alias("c_record"),
    )
    parts = [from_log]
    if acks is not None:
        parts.append(
            acks.where(~sf.col("malformed")).select(
                "message_id",
                sf.col("topic").alias("l_topic"),
                sf.col("state").alias("l_state"),
                sf.col("time_ms").alias("l_time_ms"),
                sf.col("cause").alias("l_cause"),
            )
        )
    from_outbox = outbox.where(~sf.col("malformed")).select(
        "message_id",
        sf.struct(*_OUTBOX_FIELDS).alias("o"),
        # The latest entry wins should an export hold an id twice (two outboxes exported as one).
        sf.coalesce("state_changed_ms", "created_ms", sf.lit(0)).alias("o_order"),
    )
    parts.append(from_outbox)
    rows = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    if acks is None:
        # The columns a ledger would have brought, all null: one classification for both cases.
        rows = rows.select(
            "*",
            *(sf.lit(None).cast(t).alias(c) for c, t in
              (("l_topic", "string"), ("l_state", "string"), ("l_time_ms", "bigint"),
               ("l_cause", "string"))),
        )  # fmt: skip
    spooled = sf.col("l_state") == "SPOOLED"
    # Grouped by a 64-bit hash of the id first: the sort that groups the rows then orders 8-byte
    # keys (a radix sort) instead of comparing ids, which share their first characters (one
    # producer's ids begin alike) and so defeat the sort's 8-byte prefixes.
    per_id = rows.groupBy(sf.xxhash64("message_id").alias(_ID_HASH), "message_id").agg(
        *_copies(fold_copies),
        sf.min("c_topic").alias("c_topic"),
        sf.min("c_store_ts").alias("first_store_timestamp_ms"),
        sf.max("c_store_ts").alias("last_store_timestamp_ms"),
        sf.min("c_phy_offset").alias("first_phy_offset"),
        sf.max("c_phy_offset").alias("last_phy_offset"),
        sf.count("l_state").alias("ack_lines"),
        sf.max(sf.col("l_state") == "STORED").alias("acked_stored"),
        sf.max(spooled).alias("acked_spooled"),
        sf.max(spooled & (sf.col("l_cause") == "AMBIGUOUS")).alias("ack_ambiguous"),
        sf.min("l_time_ms").alias("first_ack_ms"),
        sf.min(sf.when(spooled, sf.col("l_time_ms"))).alias("first_spooled_ms"),
        sf.min("l_topic").alias("l_topic"),
        sf.min("l_cause").alias("ack_cause"),
        sf.count("o").alias("outbox_entries"),
        sf.max_by("o", "o_order").alias("o"),
    )
    return per_id.drop(_ID_HASH).select(*_classified(scope_topics, bucket_ms))


def _copies(fold: bool) -> list[Column]:
    """copies, parked_copies and folded_copies: records read, less those read twice when
    folding. A set per message id (of one or two records, a resend's few more) is the fold's
    whole cost: the grouping by id is the one shuffle either way."""
    parked = sf.col("c_parked")
    read = sf.count(sf.when(parked.isNotNull(), 1))
    if not fold:
        return [
            sf.count(sf.when(~parked, 1)).alias("copies"),
            sf.count(sf.when(parked, 1)).alias("parked_copies"),
            sf.lit(0).alias("folded_copies"),
        ]
    copies = sf.size(sf.collect_set(sf.when(~parked, sf.col("c_record"))))
    parked_copies = sf.size(sf.collect_set(sf.when(parked, sf.col("c_record"))))
    return [
        copies.alias("copies"),
        parked_copies.alias("parked_copies"),
        (read - copies - parked_copies).alias("folded_copies"),
    ]


def _classified(scope_topics: list[str], bucket_ms: int) -> list[Column | str]:
    def yes(name: str) -> Column:
        return sf.coalesce(sf.col(name), sf.lit(False))

    topic = sf.coalesce("c_topic", "l_topic", "o.topic")
    stored = (sf.col("copies") + sf.col("parked_copies")) > 0
    o_state = sf.col("o.state")
    held = o_state.isin("PENDING", "DEAD")
    ambiguous = (
        yes("ack_ambiguous")
        | yes("o.maybe_stored")
        | (sf.coalesce(sf.col("o.cause"), sf.lit("")) == "AMBIGUOUS")
    )
    known = (sf.col("ack_lines") > 0) | (sf.col("outbox_entries") > 0)
    in_scope = topic.isin(*scope_topics) if scope_topics else sf.lit(False)
    outcome = (
        sf.when(stored & (ambiguous | sf.coalesce(held, sf.lit(False))), "recovered")
        .when(stored & known, "ok")
        .when(stored & in_scope, "unexpected")
        .when(stored, "unchecked")
        .when(yes("acked_stored"), "lost")
        .when(o_state == "PENDING", "pending")
        .when(o_state == "DEAD", "dead")
        .otherwise("lost")
    )
    event_time = sf.coalesce("first_ack_ms", "o.created_ms", "first_store_timestamp_ms")
    failed_at = sf.coalesce("o.created_ms", "first_spooled_ms")
    latency = sf.when(
        stored & failed_at.isNotNull() & sf.col("first_store_timestamp_ms").isNotNull(),
        sf.greatest(sf.col("first_store_timestamp_ms") - failed_at, sf.lit(0)),
    )
    return [
        "message_id",
        topic.alias("topic"),
        (event_time - sf.pmod(event_time, sf.lit(bucket_ms))).alias("bucket_start_ms"),
        event_time.alias("event_time_ms"),
        (sf.col("copies") > 1).alias("duplicated"),
        sf.greatest(sf.col("copies") - 1, sf.lit(0)).alias("duplicate_copies"),
        (stored & sf.coalesce(o_state == "PENDING", sf.lit(False))).alias("resend_pending"),
        ((sf.col("copies") == 0) & (sf.col("parked_copies") > 0)).alias("parked_only"),
        "copies",
        "parked_copies",
        "folded_copies",
        "first_store_timestamp_ms",
        "last_store_timestamp_ms",
        "first_phy_offset",
        "last_phy_offset",
        sf.when(yes("acked_stored"), "STORED")
        .when(yes("acked_spooled"), "SPOOLED")
        .alias("ack_state"),
        "ack_cause",
        "first_ack_ms",
        "ack_lines",
        o_state.alias("outbox_state"),
        sf.col("o.cause").alias("outbox_cause"),
        sf.col("o.maybe_stored").alias("maybe_stored"),
        sf.col("o.attempts").alias("attempts"),
        sf.col("o.last_error").alias("last_error"),
        sf.col("o.created_ms").alias("spooled_ms"),
        sf.col("o.delivered_ms").alias("delivered_ms"),
        latency.alias("delivery_latency_ms"),
        outcome.alias("outcome"),
    ]


def outcome_counts() -> list[Column]:
    """The counts every summary row carries (of a classified DataFrame)."""
    return [
        sf.count(sf.lit(1)).alias("messages"),
        *(sf.count(sf.when(sf.col("outcome") == o, 1)).alias(o) for o in OUTCOMES),
        sf.count(sf.when(sf.col("duplicated"), 1)).alias("duplicated"),
        sf.coalesce(sf.sum("duplicate_copies"), sf.lit(0)).alias("duplicate_copies"),
        sf.count(sf.when(sf.col("resend_pending"), 1)).alias("resend_pending"),
        sf.count(sf.when(sf.col("parked_only"), 1)).alias("parked_only"),
    ]


def counts_by_topic_and_bucket(messages: DataFrame, folded: bool = False) -> DataFrame:
    """outcome_counts per (topic, bucket), per topic, per bucket and in total (a cube);
    ``level`` is 0 for (topic, bucket) rows, 1 per topic, 2 per bucket, 3 for the total.
    ``folded``: a ``folded_copies`` sum too (the slave copies, in the same pass).

    The messages are counted per (topic, bucket) first, in one pass of a hash aggregation, and
    the cube sums those few cells: a cube of the messages themselves would copy every message
    once per level."""
    extra = [sf.coalesce(sf.sum("folded_copies"), sf.lit(0)).alias("folded_copies")]
    cells = messages.groupBy("topic", "bucket_start_ms").agg(
        *outcome_counts(), *(extra if folded else [])
    )
    summed = [*COUNT_NAMES, *(["folded_copies"] if folded else [])]
    return cells.cube("topic", "bucket_start_ms").agg(
        sf.grouping_id().alias("level"), *(sf.sum(name).alias(name) for name in summed)
    )


def latency_bin() -> Column:
    """The histogram bin of a message's delivery latency: 0 below LATENCY_BIN_EDGES_MS[0] …"""
    latency = sf.col("delivery_latency_ms")
    return sum(
        (sf.when(latency >= edge, 1).otherwise(0) for edge in LATENCY_BIN_EDGES_MS), sf.lit(0)
    )


def histogram_column(bin_index: int) -> str:
    return f"bin_{bin_index}"


def latency_stats(messages: DataFrame) -> DataFrame:
    """Per topic and in total (topic null): count, percentiles and max of delivery latency, and
    the messages in each histogram bin (``histogram_column``), all in one pass."""
    latency = sf.col("delivery_latency_ms")
    with_bin = messages.where(latency.isNotNull()).select(
        "topic", "delivery_latency_ms", latency_bin().alias("bin")
    )
    bins = range(len(LATENCY_BIN_EDGES_MS) + 1)
    return with_bin.rollup("topic").agg(
        sf.grouping_id().alias("level"),
        sf.count(sf.lit(1)).alias("messages"),
        sf.percentile_approx(latency, list(LATENCY_PERCENTILES)).alias("percentiles_ms"),
        sf.max(latency).alias("max_ms"),
        *(sf.count(sf.when(sf.col("bin") == b, 1)).alias(histogram_column(b)) for b in bins),
    )
