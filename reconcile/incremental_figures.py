"""An incremental run's own figures, gathered chunk by chunk, and its ``incremental`` block.

A run that catches up in several chunks (incremental_inputs.py) classifies a message once it has
settled, or at the end if it is still open. Each such set of messages adds its counts per
(topic, bucket), its delivery latencies and its drill-down candidates here; at the end they make
the run's totals, latency and drill-down as one table of them all would, without holding the
run's every message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from reconcile.checkpoint import State
from reconcile.config import ENGINE_IN_PROCESS, JobConfig
from reconcile.figures import counts_only, iso_utc
from reconcile.in_process import figures
from reconcile.segment_scan import SegmentStats
from reconcile.summary_document import Found, Phases, counts_section

LEDGER_COUNTS = ("lines", "malformed", "stored", "spooled", "spooled_ambiguous")


@dataclass(slots=True)
class RunFigures:
    ids_max: int
    cells: list[pa.Table] = field(default_factory=list)
    timed: list[pa.Table] = field(default_factory=list)  # topic and latency, where one is known
    candidates: list[pa.Table] = field(default_factory=list)
    malformed: list[pa.Table] = field(default_factory=list)  # malformed ledger lines read
    settled: list[pa.Table] = field(default_factory=list)  # cells of the settled messages
    open_cells: pa.Table | None = None  # cells of the messages open at the end
    folded: int = 0
    segments: list[SegmentStats] = field(default_factory=list)
    ledger: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEDGER_COUNTS, 0))
    new_records: int = 0
    new_ledger_lines: int = 0
    unfinished_ledger_lines: int = 0
    chunks: int = 0

    def add(self, classified: pa.Table, settled_cells: pa.Table | None = None) -> None:
        """Messages a chunk settled, with their cells; or, without, those open at the end."""
        cells = settled_cells if settled_cells is not None else figures.cells(classified)
        self.cells.append(cells)
        if settled_cells is not None:
            self.settled.append(cells)
        else:
            self.open_cells = cells
        latency = classified["delivery_latency_ms"]
        self.timed.append(
            classified.filter(pc.is_valid(latency)).select(["topic", "delivery_latency_ms"])
        )
        self.candidates.append(figures.drill_candidates(classified, self.ids_max))
        self.folded += int(pc.sum(classified["folded_copies"]).as_py() or 0)

    def add_lines(self, lines: pa.Table | None, ledger: dict[str, Any]) -> None:
        if lines is None:
            return
        bad = lines.filter(lines["malformed"]).slice(0, self.ids_max)
        self.malformed.append(bad)
        for name in LEDGER_COUNTS:
            self.ledger[name] += int(ledger[name])

    def found(
        self,
        config: JobConfig,
        scope: list[str],
        outbox: dict[str, int],
        details: dict[str, str],
        phases: Phases,
        fold_copies: bool,
    ) -> tuple[Found, pa.Table]:
        """The run's Found, and its counts at every level (details/counts)."""
        limit = config.summary_rows_max
        counts = figures.roll_up(pa.concat_tables(self.cells))
        total, per_topic, per_bucket, per_topic_bucket = figures.levels(counts, limit)
        malformed = pa.concat_tables(self.malformed) if self.malformed else None
        return Found(
            engine=ENGINE_IN_PROCESS,
            where={},
            segments=self.segments,
            ledger={**self.ledger},
            scope=scope,
            outbox=outbox,
            total=total,
            per_topic=per_topic,
            per_bucket=per_bucket,
            per_topic_bucket=per_topic_bucket,
            latency=figures.latency(pa.concat_tables(self.timed), limit),
            drill_down=figures.drill_down(
                pa.concat_tables(self.candidates),
                malformed if malformed is not None and malformed.num_rows else None,
                self.ids_max,
            ),
            details=details,
            slave_copies=self.folded if fold_copies else None,
            phases=phases,
        ), counts


def incremental_block(
    config: JobConfig,
    state: State,
    saved: Path,
    run: RunFigures,
    settled_cells: pa.Table,
    tail_figures: dict[str, Any],
) -> dict[str, Any]:
    """summary.json's ``incremental``: what this run read, settled and left open, and the
    figures since the checkpoint began (every settled message, and those open now)."""
    assert run.open_cells is not None, "the run's open messages are added last"
    cumulative = figures.roll_up(pa.concat_tables([settled_cells, run.open_cells]))
    limit = config.summary_rows_max
    return {
        "run": state.run,
        "chunks": run.chunks,
        "checkpoint": str(saved),
        "started_over": config.full,
        "settle_ms": config.settle_ms,
        "watermark_ms": state.watermark_ms,
        "watermark": iso_utc(state.watermark_ms) if state.watermark_ms is not None else None,
        "new_records": run.new_records,
        "new_ledger_lines": run.new_ledger_lines,
        "unfinished_ledger_lines": run.unfinished_ledger_lines,
        "settled": counts_only(figures.total(pa.concat_tables(run.settled))),
        "open": counts_only(figures.total(run.open_cells)),
        "cumulative": {
            **counts_section(*figures.levels(cumulative, limit), limit),
            "ledgers": {
                name: int(state.ledger_figures.get(name, 0)) + int(tail_figures.get(name, 0))
                for name in LEDGER_COUNTS
            },
        },
    }
