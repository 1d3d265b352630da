"""The Spark engine's classification: the in-process classification, one bucket of ids a task.

    scan parts of the segments ─┬─► map tasks: each row to its id's bucket (id_buckets.py),
    the outbox export ──────────┘   written as a file of record batches by bucket
                                    (bucket_files.py); to each bucket, its batches in the file
    ledgers' byte ranges ─► map tasks: the lines written as inputs/acks' parts, and by bucket
        as a file of record batches (ledgers.py); to every bucket, its batches in the file and
        the range's topics
        ─► Spark's shuffle (where the rows are, not the rows), bucket b to partition b
        ─► a task a bucket: in_process/classify.py over the bucket's batches (the scope: the
           ranges' topics), written as ``details/messages``' part b (parquet_parts.py); its
           counts per (topic, bucket), drill-down candidates and slave copies handed back to
           the driver

A bucket holds every row of each of its ids, so classifying the buckets apart classifies the
whole: the same code as the in-process engine, on a share of the ids small enough for a task's
memory. Spark schedules the tasks, tells each bucket's task where its rows are and retries what
fails; it never moves a row, nor turns one into its own format, which was most of this job's
time when Spark grouped the rows by id itself (docs/benchmarks.md). Nothing per message reaches
the driver: a bucket's counts are a row per (topic, time bucket), its candidates at most a few
``drill_down_ids_max`` rows.

The ledgers are parsed in the same stage as the segments are scanned, so that neither waits for
the other's last task; the scope (the topics the ledgers name, outcomes.py) is known only when
every range is parsed, so each range tells every bucket its topics, and each bucket's task puts
the scope together itself. The driver's summary has the ranges' statistics from an accumulator.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import RDD, Accumulator, SparkContext

from reconcile.bucket_files import BucketRef, read_buckets, write_buckets
from reconcile.commitlog_source import StatsKey, parts, scan_part
from reconcile.id_buckets import to_ipc
from reconcile.in_process import figures
from reconcile.in_process.classify import classify
from reconcile.in_process.engine import RECORD_COLUMNS, RECORDS_SCHEMA
from reconcile.in_process.inputs import read_outbox
from reconcile.input_formats import OUTBOX_ARROW_SCHEMA
from reconcile.ledgers import ACKS_CLASSIFIED_SCHEMA, Range, parse_range
from reconcile.parquet_parts import write_part
from reconcile.segment_scan import Segment, SegmentStats

# Input bytes (segments and ledgers) a bucket of ids gets: about 240k records of 1 KiB
# bodies with their ledger lines: a Python worker's memory stays moderate, twice as many buckets
# took longer and half as many no less time (docs/benchmarks.md).
# Sized by bytes, as the records are not counted before the scan: a log of small messages puts
# more ids in a bucket (bodies of 100 B: about a million; --shuffle-partitions sets more buckets).
BUCKET_INPUT_BYTES = 256 * 1024 * 1024
# At least this many buckets a core, so that no core waits long for the last.
BUCKETS_PER_CORE = 4
# Rows a map task gathers before it cuts them into buckets: its memory, and the size of the
# record batches it writes (fewer, larger batches cost less to write and to read).
MAP_ROWS_MAX = 1_000_000
KIND_LOG, KIND_OUTBOX, KIND_LEDGER = 0, 1, 2
# read_outbox's columns: the export's fields, any of which an entry may lack, and malformed.
OUTBOX_SCHEMA = pa.schema(
    [*(f.with_nullable(True) for f in OUTBOX_ARROW_SCHEMA), pa.field("malformed", pa.bool_())]
)
_SCHEMAS = {KIND_LOG: RECORDS_SCHEMA, KIND_OUTBOX: OUTBOX_SCHEMA}
# What a ledger range tells each bucket: (the bucket's lines in the range's file or None, the
# range's topics). The files' names keep the ledgers' order (ledgers.py).
LedgerRef = tuple[BucketRef | None, tuple[str, ...]]
Unit = tuple[Any, ...]  # (kind, ...) : what one map task reads


@dataclass(frozen=True, slots=True)
class Classification:
    """What the driver hands every task: where and how to classify."""

    messages_dir: str  # details/messages
    acks_dir: str  # inputs/acks
    exchange_dir: str  # the map tasks' files of rows by bucket (bucket_files.py)
    buckets: int
    bucket_ms: int
    fold_copies: bool
    ledgers: bool  # any ledger read (none: no message is checked against one)
    ids_max: int
    batch_records_max: int


@dataclass(slots=True)
class Classified:
    """The buckets' findings, put together on the driver."""

    messages: int
    cells: pa.Table  # figures.cells of every bucket, concatenated
    candidates: pa.Table  # figures.drill_candidates of every bucket, concatenated
    folded_copies: int
    timed_messages: int  # messages with a delivery latency


def bucket_count(input_bytes: int, cores: int, asked: int | None) -> int:
    """Buckets for ``input_bytes`` of inputs on ``cores``: ``asked`` (the session's shuffle
    partitions) when set, else one per BUCKET_INPUT_BYTES, at least BUCKETS_PER_CORE a core, and
    a whole number a core: buckets take about as long each, and one left over ran alone while
    the other cores waited."""
    if asked:
        return asked
    cores = max(1, cores)
    wanted = max(BUCKETS_PER_CORE * cores, -(-input_bytes // BUCKET_INPUT_BYTES))
    return -(-wanted // cores) * cores


def units(
    segments: list[Segment],
    part_bytes_max: int,
    whole: frozenset[tuple[int, int]],
    outbox: Path,
    ledgers: Sequence[Range] = (),
) -> list[Unit]:
    """The map tasks' inputs: each part of each segment (the segments in ``whole`` in one
    part), each range of the ledgers, the outbox export."""
    found: list[Unit] = [
        (KIND_LOG, str(s.path), s.file_from_offset, s.source, start, end)
        for s in segments
        for start, end in (
            [(0, None)] if (s.source, s.file_from_offset) in whole else parts(s, part_bytes_max)
        )
    ]
    found.extend((KIND_LEDGER, *r) for r in ledgers)
    found.append((KIND_OUTBOX, str(outbox)))
    return found


@dataclass(frozen=True, slots=True)
class InputStats:
    """Where the map tasks report what they read (commitlog_source.stats_accumulator's)."""

    scan: Accumulator[dict[StatsKey, dict[str, Any]]]  # per part of a segment
    outbox: Accumulator[dict[StatsKey, dict[str, Any]]]  # the outbox's figures.outbox_stats
    ledger: Accumulator[dict[StatsKey, Any]]  # ledgers.ParsedRange a range, key (index, 0, 0)


def run(sc: SparkContext, job: Classification, inputs: list[Unit], stats: InputStats) -> Classified:
    """Classify every id of ``inputs`` into ``job.messages_dir`` (emptied by the caller)."""
    # A bucket's number is its partition's: partitionBy takes the function's value modulo.
    shuffled = mapped(sc, job, inputs, stats).partitionBy(job.buckets, _identity)
    found = shuffled.mapPartitionsWithIndex(functools.partial(_classify_bucket, job)).collect()
    return Classified(
        messages=sum(f[0] for f in found),
        cells=pa.concat_tables([pa.ipc.open_stream(f[1]).read_all() for f in found]),
        candidates=pa.concat_tables([pa.ipc.open_stream(f[2]).read_all() for f in found]),
        folded_copies=sum(f[3] for f in found),
        timed_messages=sum(f[4] for f in found),
    )


Mapped = tuple[int, tuple[int, Any]]  # (bucket, (kind, a BucketRef or a LedgerRef))


def mapped(
    sc: SparkContext, job: Classification, inputs: list[Unit], stats: InputStats
) -> RDD[Mapped]:
    """The map stage: every unit's rows written by bucket (bucket_files.py), and for each
    bucket (bucket, (kind, BucketRef)); every ledger range's part written, and to every bucket
    (bucket, (KIND_LEDGER, LedgerRef)); a task a unit."""
    return sc.parallelize(inputs, len(inputs)).flatMap(functools.partial(_map_unit, job, stats))


def _identity(bucket: int) -> int:
    return bucket


def heap_frozen_for_the_task() -> None:
    """What is alive as a task starts (modules, caches) taken out of the collector's reach.

    PySpark's reused worker runs a full ``gc.collect()`` after every task (pyspark/daemon.py).
    A worker holding pyarrow, numpy, PySpark and this package tracks enough objects that the
    collection was a large share of the workers' CPU (py-spy, docs/benchmarks.md). Frozen
    (``gc.freeze``), they are skipped: the collection after the task looks at what the task
    made. The previous task's garbage was collected before this one started, so only live
    objects are frozen; one that later becomes cyclic garbage stays until the worker exits."""
    gc.freeze()


def _map_unit(job: Classification, stats: InputStats, unit: Unit) -> Iterator[Mapped]:
    """A map task: the unit's rows written by bucket, and where each bucket's are; a ledger
    range's part, and a LedgerRef to every bucket."""
    heap_frozen_for_the_task()
    kind = unit[0]
    if kind == KIND_LOG:
        _, path, from_offset, source, part_from, part_to = unit
        found = SegmentStats(Path(path).name, from_offset, source)
        batches = (
            b.select(list(RECORD_COLUMNS))
            for b in scan_part(Path(path), found, job.batch_records_max, part_from, part_to)
        )
        name = f"log-{source}-{from_offset}-{part_from}.arrow"
        refs = _written(job, _gathered(batches, RECORDS_SCHEMA), RECORDS_SCHEMA, name)
        # After the part's last record: the stats are complete only once the scan has ended.
        stats.scan.add({(source, from_offset, part_from): asdict(found)})
        yield from ((bucket, (KIND_LOG, ref)) for bucket, ref in refs.items())
    elif kind == KIND_LEDGER:
        index = unit[1]
        exchange = Path(job.exchange_dir)
        parsed = parse_range(Path(job.acks_dir), exchange, job.ids_max, job.buckets, unit[1:])
        stats.ledger.add({(index, 0, 0): parsed})
        topics = parsed.topics
        for bucket in range(job.buckets):
            yield bucket, (KIND_LEDGER, (parsed.refs.get(bucket), topics))
    else:
        entries = read_outbox(Path(unit[1]))
        stats.outbox.add({(-1, 0, 0): figures.outbox_stats(entries)})
        good = entries.filter(pc.invert(entries["malformed"])).cast(OUTBOX_SCHEMA)
        refs = _written(job, [good], OUTBOX_SCHEMA, "outbox.arrow")
        yield from ((bucket, (KIND_OUTBOX, ref)) for bucket, ref in refs.items())


def _gathered(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.Table]:
    """The batches as tables of at most about MAP_ROWS_MAX rows."""
    held: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        held.append(batch)
        rows += batch.num_rows
        if rows >= MAP_ROWS_MAX:
            yield pa.Table.from_batches(held, schema)
            held, rows = [], 0
    if held:
        yield pa.Table.from_batches(held, schema)


def _written(
    job: Classification, tables: Iterable[pa.Table], schema: pa.Schema, name: str
) -> dict[int, BucketRef]:
    return write_buckets(tables, schema, Path(job.exchange_dir) / name, job.buckets)


def _classify_bucket(
    job: Classification, bucket: int, rows: Iterator[Mapped]
) -> Iterator[tuple[int, bytes, bytes, int, int]]:
    """A reduce task: the bucket's ids classified and written as part ``bucket``; its message
    count, cells (IPC), drill-down candidates (IPC), slave copies and messages with a delivery
    latency."""
    heap_frozen_for_the_task()
    payloads: dict[int, list[Any]] = {kind: [] for kind in (*_SCHEMAS, KIND_LEDGER)}
    for found_bucket, (kind, payload) in rows:
        assert found_bucket == bucket, f"bucket {found_bucket} in partition {bucket}"
        payloads[kind].append(payload)
    inputs = {kind: read_buckets(payloads[kind], schema) for kind, schema in _SCHEMAS.items()}
    refs: list[LedgerRef] = payloads[KIND_LEDGER]
    # Every range told every bucket its topics: the scope is theirs, as the driver's summary has
    # it (figures.summarise_ledger).
    scope = sorted({topic for _, topics in refs for topic in topics})
    classified = classify(
        inputs[KIND_LOG],
        _acks(refs) if job.ledgers else None,
        inputs[KIND_OUTBOX],
        scope,
        job.bucket_ms,
        job.fold_copies,
    )
    write_part(classified, Path(job.messages_dir), bucket)
    folded = int(pc.sum(classified["folded_copies"]).as_py() or 0)
    yield (
        classified.num_rows,
        to_ipc(figures.cells(classified)),
        to_ipc(figures.drill_candidates(classified, job.ids_max)),
        folded,
        classified.num_rows - classified["delivery_latency_ms"].null_count,
    )


def _acks(refs: list[LedgerRef]) -> pa.Table:
    """The bucket's ledger lines, mapped from the ranges' exchange files, in the ledgers'
    order."""
    found = [ref for ref, _ in refs if ref is not None]
    return read_buckets(found, ACKS_CLASSIFIED_SCHEMA)
