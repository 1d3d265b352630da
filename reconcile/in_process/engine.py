"""The in-process engine: scan, read, classify and count in this process, with no JVM.

The segments are scanned one after another by segment_scan.py (the Spark engine's scan tasks run
the same code), the ledgers and the outbox read by inputs.py, the classification is classify.py
and the figures figures.py, all in Arrow. It writes what the Spark engine writes:
``details/messages`` and ``details/counts`` (Parquet directories), ``inputs/acks``.

With a record limit (the ``auto`` engine) it stops once the commitlog holds more records than
that, raising ``TooManyRecordsError``, and the Spark engine runs instead (config.py). An
incremental run (reconcile/incremental.py) reads its inputs from where the last run stopped and
hands them to ``find``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from reconcile.commitlog_sources import CommitlogSource
from reconcile.config import ENGINE_IN_PROCESS, JobConfig
from reconcile.figures import no_ledger, summarise_ledger
from reconcile.in_process import figures
from reconcile.in_process.classify import classify
from reconcile.in_process.inputs import read_ledgers, read_outbox
from reconcile.parquet_parts import write_directory
from reconcile.segment_scan import COMMITLOG_ARROW_SCHEMA, SegmentStats, scan_segment
from reconcile.summary_document import Found, Phases, split_scope

# The scan's columns the classification reads (the others are left behind at once).
RECORD_COLUMNS = ("message_id", "topic", "parked", "phy_offset", "store_timestamp_ms",
                  "store_host")  # fmt: skip
RECORDS_SCHEMA = pa.schema([COMMITLOG_ARROW_SCHEMA.field(name) for name in RECORD_COLUMNS])
# Seconds between two progress lines of a long scan.
PROGRESS_INTERVAL_S = 2.0
Progress = Callable[[str], None]


class TooManyRecordsError(Exception):
    """The commitlog holds more records than the in-process engine was allowed to take."""


@dataclass(slots=True)
class Inputs:
    records: pa.Table  # RECORDS_SCHEMA
    segments: list[SegmentStats]  # what each segment's scan found
    acks: pa.Table | None  # inputs.read_ledgers' columns; None without ledgers
    outbox: pa.Table  # inputs.read_outbox's columns
    ledger: dict[str, Any]  # figures.summarise_ledger's, its topics the scope


def ledger_summary(acks: pa.Table | None) -> dict[str, Any]:
    return summarise_ledger(figures.ledger_rows(acks)) if acks is not None else no_ledger()


def reconcile(
    config: JobConfig,
    sources: list[CommitlogSource],
    records_max: int | None,
    progress: Progress | None = None,
) -> Found:
    phase = Phases()
    with phase("scan"):
        records, segments = scan(sources, {}, config.scan_batch_records_max, records_max, progress)
    with phase("ledger_parse"):
        acks = read_ledgers(config.ledgers) if config.ledgers else None
    with phase("outbox_read"):
        outbox = read_outbox(config.outbox)
    inputs = Inputs(records, segments, acks, outbox, ledger_summary(acks))
    found, _ = find(config, len(sources) > 1, inputs, phase)
    found.where = {"records_max": records_max} if records_max is not None else {}
    return found


def find(
    config: JobConfig, fold_copies: bool, inputs: Inputs, phase: Phases
) -> tuple[Found, pa.Table]:
    """Classify the inputs and collect the figures; the Found and the classified table."""
    details = config.out_dir / "details"
    acks = inputs.acks
    if acks is not None:
        write_directory(acks, config.out_dir / "inputs" / "acks")
    ledger, scope = split_scope(
        summarise_ledger(figures.ledger_rows(acks)) if acks else no_ledger()
    )
    with phase("classify_write"):
        classified = classify(
            inputs.records, acks, inputs.outbox, scope, config.bucket_ms, fold_copies
        )
        write_directory(classified, details / "messages")
    limit = config.summary_rows_max
    with phase("counts"):
        counts = figures.counts(classified)
        write_directory(counts, details / "counts")
        total, per_topic, per_bucket, per_topic_bucket = figures.levels(counts, limit)
    with phase("latency"):
        latency = figures.latency(classified, limit)
    with phase("drill_down"):
        malformed = acks if ledger["malformed"] else None
        drill_down = figures.drill_down(classified, malformed, config.drill_down_ids_max)
    folded = int(pc.sum(classified["folded_copies"]).as_py() or 0)
    found = Found(
        engine=ENGINE_IN_PROCESS,
        where={},
        segments=inputs.segments,
        ledger=ledger,
        scope=scope,
        outbox=figures.outbox_stats(inputs.outbox),
        total=total,
        per_topic=per_topic,
        per_bucket=per_bucket,
        per_topic_bucket=per_topic_bucket,
        latency=latency,
        drill_down=drill_down,
        details={"messages": str(details / "messages"), "counts": str(details / "counts")},
        slave_copies=folded if fold_copies else None,
        phases=phase,
    )
    return found, classified


def scan(
    sources: list[CommitlogSource],
    start_positions: dict[tuple[int, str], int],
    batch_records_max: int,
    records_max: int | None,
    progress: Progress | None,
) -> tuple[pa.Table, list[SegmentStats]]:
    """The kept records of every segment, each from its start position (keyed by (source,
    segment name); 0 when absent), and what each scan found."""
    batches: list[pa.RecordBatch] = []
    scanned: list[SegmentStats] = []
    total = 0
    said = time.monotonic()
    segments = [segment for source in sources for segment in source.segments]
    for n, segment in enumerate(segments, 1):
        found = SegmentStats(segment.path.name, segment.file_from_offset, segment.source)
        start = start_positions.get((segment.source, segment.path.name), 0)
        for batch in scan_segment(segment.path, found, batch_records_max, start):
            batches.append(batch.select(list(RECORD_COLUMNS)))
            if records_max is not None and total + found.records > records_max:
                raise TooManyRecordsError(
                    f"the commitlog holds more than {records_max:,} records, the in-process "
                    "engine's limit"
                )
        total += found.records
        scanned.append(found)
        if progress is not None and time.monotonic() - said >= PROGRESS_INTERVAL_S:
            said = time.monotonic()
            progress(f"scanned {n:,} of {len(segments):,} segments: {total:,} records")
    return pa.Table.from_batches(batches, RECORDS_SCHEMA), scanned
