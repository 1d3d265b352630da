"""The in-process engine: scan, read, classify and count in this process, with no JVM.

The segments are scanned one after another by segment_scan.py (the Spark engine's scan tasks run
the same code), the ledgers and the outbox read by inputs.py, the classification is classify.py
and the figures figures.py, all in Arrow. It writes what the Spark engine writes:
``details/messages`` and ``details/counts`` (Parquet directories), ``inputs/acks``.

With a record limit (the ``auto`` engine) it stops once the commitlog holds more records than
that, raising ``TooManyRecordsError``, and the Spark engine runs instead (config.py).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from reconcile.commitlog_sources import CommitlogSource
from reconcile.config import ENGINE_IN_PROCESS, JobConfig
from reconcile.figures import no_ledger, summarise_ledger
from reconcile.in_process import figures
from reconcile.in_process.classify import classify
from reconcile.in_process.inputs import read_ledgers, read_outbox
from reconcile.segment_scan import COMMITLOG_ARROW_SCHEMA, SegmentStats, scan_segment
from reconcile.summary_document import Found, Phases, split_scope

# The scan's columns the classification reads (the others are left behind at once).
_RECORD_COLUMNS = ["message_id", "topic", "parked", "phy_offset", "store_timestamp_ms",
                   "store_host"]  # fmt: skip
# Seconds between two progress lines of a long scan.
PROGRESS_INTERVAL_S = 2.0
_PART = "part-00000.parquet"


class TooManyRecordsError(Exception):
    """The commitlog holds more records than the in-process engine was allowed to take."""


def reconcile(
    config: JobConfig,
    sources: list[CommitlogSource],
    records_max: int | None,
    progress: Callable[[str], None] | None = None,
) -> Found:
    phase = Phases()
    details = config.out_dir / "details"
    with phase("scan"):
        records, segments = _scan(config, sources, records_max, progress)
    with phase("ledger_parse"):
        acks = read_ledgers(config.ledgers) if config.ledgers else None
        if acks is not None:
            _write(acks, config.out_dir / "inputs" / "acks")
    ledger, scope = split_scope(
        summarise_ledger(figures.ledger_rows(acks)) if acks else no_ledger()
    )
    with phase("outbox_read"):
        outbox = read_outbox(config.outbox)
    fold_copies = len(sources) > 1
    with phase("classify_write"):
        if progress is not None:
            progress(f"joining {records.num_rows:,} records by message id")
        classified = classify(records, acks, outbox, scope, config.bucket_ms, fold_copies)
        _write(classified, details / "messages")
    limit = config.summary_rows_max
    with phase("counts"):
        counts = figures.counts(classified)
        _write(counts, details / "counts")
        total = figures.level_rows(counts, figures.LEVEL_TOTAL, [], 1)
    with phase("latency"):
        latency = figures.latency(classified, limit)
    with phase("drill_down"):
        malformed = acks if ledger["malformed"] else None
        drill_down = figures.drill_down(classified, malformed, config.drill_down_ids_max)
    folded = int(pc.sum(classified["folded_copies"]).as_py() or 0)
    return Found(
        engine=ENGINE_IN_PROCESS,
        where={"records_max": records_max} if records_max is not None else {},
        segments=segments,
        ledger=ledger,
        scope=scope,
        outbox=figures.outbox_stats(outbox),
        total=total[0] if total else {},
        per_topic=figures.level_rows(counts, figures.LEVEL_TOPIC, ["topic"], limit),
        per_bucket=figures.level_rows(counts, figures.LEVEL_BUCKET, ["bucket_start_ms"], limit),
        per_topic_bucket=figures.level_rows(
            counts, figures.LEVEL_TOPIC_BUCKET, ["bucket_start_ms", "topic"], limit
        ),
        latency=latency,
        drill_down=drill_down,
        details={"messages": str(details / "messages"), "counts": str(details / "counts")},
        slave_copies=folded if fold_copies else None,
        phases=phase,
    )


def _scan(
    config: JobConfig,
    sources: list[CommitlogSource],
    records_max: int | None,
    progress: Callable[[str], None] | None,
) -> tuple[pa.Table, list[SegmentStats]]:
    batches: list[pa.RecordBatch] = []
    scanned: list[SegmentStats] = []
    total = 0
    said = time.monotonic()
    segments = [segment for source in sources for segment in source.segments]
    for n, segment in enumerate(segments, 1):
        found = SegmentStats(segment.path.name, segment.file_from_offset, segment.source)
        for batch in scan_segment(segment.path, found, config.scan_batch_records_max):
            batches.append(batch.select(_RECORD_COLUMNS))
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
    schema = pa.schema([COMMITLOG_ARROW_SCHEMA.field(name) for name in _RECORD_COLUMNS])
    return pa.Table.from_batches(batches, schema), scanned


def _write(table: pa.Table, directory: Path) -> None:
    """A Parquet directory of one file, replaced whole (as Spark's overwrite does)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    pq.write_table(table, directory / _PART)
