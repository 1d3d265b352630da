"""Acknowledgement ledgers, parsed by the Spark engine's tasks: what each sender was told about
each message.

The format and what makes a line malformed are input_formats.py's. Several ledgers (several
sidecars or load generators) are read as one.

The lines are parsed by Arrow's JSON reader, as the in-process engine parses them
(in_process/inputs.py's ``read_ledgers``, the one definition of a ledger line as read): each
ledger is cut at line ends into byte ranges (on the driver, reading a few bytes at each cut; a
range is a share of the cores' work, within bounds), and a map task of the classification's
stage parses each, beside the tasks that scan the segments (spark_classify.py). Its rules for a
malformed line are Spark's permissive reader's (tests/reconcile/test_engines.py holds the two
engines to it).

The job parses the JSON once: each task writes its range's lines as a Parquet part of the job's
``inputs/acks`` itself (parquet_parts.py, an output of the job), and the columns the
classification reads, by bucket of ids, as a file of the job's exchange (bucket_files.py), which
the classification's tasks map (reading the Parquet back cost them many times what mapping the
file does); it hands on only where each bucket's rows are in that file, its statistics and its
first malformed lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from reconcile.bucket_files import BucketRef, write_split
from reconcile.errors import InputError
from reconcile.figures import scope_topics
from reconcile.id_buckets import from_ipc, split, to_ipc
from reconcile.in_process.figures import ledger_rows
from reconcile.in_process.inputs import line_end_after
from reconcile.in_process.inputs import read_ledgers as read_ledger_range
from reconcile.input_formats import LEDGER_ARROW_SCHEMA
from reconcile.parquet_parts import write_part
from reconcile.summary_document import SCOPE_TOPICS_MAX

# Bytes of a ledger one task parses: at most the MAX (about 400k lines), and at least the MIN
# (a task's start stays small beside its work); in between, enough tasks that every core gets
# LEDGER_TASKS_PER_CORE of them (so that no core waits long for the last).
LEDGER_PART_BYTES_MAX = 64 * 1024 * 1024
LEDGER_PART_BYTES_MIN = 8 * 1024 * 1024
LEDGER_TASKS_PER_CORE = 2
# What ``inputs/acks`` holds: the columns the classification reads, malformed, the text of a
# malformed line, and the file.
ACKS_ARROW_SCHEMA = pa.schema(
    [
        *(LEDGER_ARROW_SCHEMA.field(c) for c in ("message_id", "topic", "state", "time_ms")),
        LEDGER_ARROW_SCHEMA.field("cause"),
        pa.field("malformed", pa.bool_()),
        pa.field("line", pa.string()),
        pa.field("source", pa.string()),
    ]
)
# The columns of inputs/acks the classification reads: what a range's exchange file holds.
ACKS_CLASSIFIED_SCHEMA = pa.schema(
    [
        ACKS_ARROW_SCHEMA.field(name)
        for name in ("message_id", "topic", "state", "time_ms", "cause", "malformed")
    ]
)


Range = tuple[int, str, int, int]  # (index, path, start, end): what one task parses


@dataclass(frozen=True, slots=True)
class ParsedRange:
    """What a task that parsed one range hands on."""

    refs: dict[int, BucketRef]  # each id bucket's lines in its exchange file (none: no lines)
    rows: list[dict[str, Any]]  # lines per (malformed, topic, state, ambiguous), bounded
    malformed: bytes  # its first malformed lines (IPC, ACKS_ARROW_SCHEMA)

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics its well-formed lines name: its share of the scope."""
        return tuple(scope_topics(self.rows))


@dataclass(slots=True)
class ParsedLedgers:
    rows: list[dict[str, Any]]  # lines per (malformed, topic, state, ambiguous), per range
    malformed: pa.Table  # the first malformed lines (ACKS_ARROW_SCHEMA), at most ids_max


def ledger_ranges(paths: tuple[Path, ...], cores: int) -> list[Range]:
    """The ledgers cut at line ends into ranges sized for the cores, numbered in the ledgers'
    order."""
    part_bytes_max = _part_bytes(paths, cores)
    ranges = [(str(p), start, end) for p in paths for start, end in line_ranges(p, part_bytes_max)]
    return [(index, *r) for index, r in enumerate(ranges)]


def parse_range(
    out: Path, exchange: Path, malformed_max: int, buckets: int, unit: Range
) -> ParsedRange:
    """A task: one byte range's lines written as part ``index`` of ``out``, in the ledger's
    order, and their classified columns as the file ``ledger-{index}.arrow`` of ``exchange``,
    by bucket of message ids (id_buckets.py, of ``buckets``), so that the lines never cross
    Spark's shuffle; where each bucket's are, the range's statistics and first malformed lines.
    Only the classified columns are put in bucket order: gathering every column in that order
    (a line's text, its file) for the Parquet part was a tenth of a range's CPU."""
    index, path, start, end = unit
    table = read_ledger_range((Path(path),), ((start, end),)).cast(ACKS_ARROW_SCHEMA)
    write_part(table, out, index)
    # Named by index, zero-padded: a bucket's task reads the files in name order, the ledgers'.
    refs = write_split(
        split(table.select(ACKS_CLASSIFIED_SCHEMA.names), buckets),
        ACKS_CLASSIFIED_SCHEMA,
        exchange / f"ledger-{index:06d}.arrow",
    )
    malformed = table.filter(table["malformed"]).slice(0, malformed_max)
    return ParsedRange(refs, _bounded(ledger_rows(table)), to_ipc(malformed))


def parsed_ledgers(found: dict[int, ParsedRange], malformed_max: int) -> ParsedLedgers:
    """The ranges' findings (by index) put together on the driver, in the ledgers' order."""
    ordered = [found[index] for index in sorted(found)]
    malformed = from_ipc([f.malformed for f in ordered], ACKS_ARROW_SCHEMA)
    return ParsedLedgers(
        rows=[row for f in ordered for row in f.rows], malformed=malformed.slice(0, malformed_max)
    )


def _part_bytes(paths: tuple[Path, ...], cores: int) -> int:
    total = sum(p.stat().st_size for p in paths)
    even = -(-total // max(1, LEDGER_TASKS_PER_CORE * cores))
    return min(LEDGER_PART_BYTES_MAX, max(LEDGER_PART_BYTES_MIN, even))


def line_ranges(path: Path, part_bytes_max: int) -> list[tuple[int, int]]:
    """[start, end) byte ranges covering the file, each cut just after a line end (or at the
    file's end), about ``part_bytes_max`` apart; one empty range for an empty file."""
    assert part_bytes_max > 0
    try:
        size = path.stat().st_size
        cuts = [0]
        with path.open("rb") as f:
            while cuts[-1] + part_bytes_max < size:
                cut = line_end_after(f, cuts[-1] + part_bytes_max, size)
                if cut >= size:
                    break
                cuts.append(cut)
    except OSError as e:
        raise InputError(f"cannot read acknowledgement ledger {path}: {e}") from e
    ends = [*cuts[1:], size]
    return list(zip(cuts, ends, strict=True))


def _bounded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of at most SCOPE_TOPICS_MAX + 1 topics: enough for the driver to refuse too
    many (summary_document.split_scope), without sending it a row per topic of a ledger that
    names a topic a line."""
    topics = scope_topics(rows)
    if len(topics) <= SCOPE_TOPICS_MAX:
        return rows
    kept = set(topics[: SCOPE_TOPICS_MAX + 1])
    return [r for r in rows if r["malformed"] or r["topic"] in kept]
