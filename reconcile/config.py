"""What a reconciliation run is asked to do: its inputs, its limits and the engine that runs it.

Two engines classify by the same definitions (outcomes.py) and write the same summary:

- ``spark`` (spark_engine.py): any size, locally (``local[N]``) or on a cluster;
- ``in-process`` (in_process/): Arrow and numpy in this process, no JVM. Seconds on small data,
  but everything is held in this process's memory, hence a limit on the records it takes.

Incremental runs (a checkpoint, incremental.py) run in process, on what is new since the last.
``auto`` (the default) starts in process and hands over to Spark when the commitlog holds more
than ``in_process_records_max`` records: the scan that found out is then wasted, at most that
many records' worth, which is small beside a JVM's start of several seconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from reconcile.outcomes import BUCKET_MS_DEFAULT
from reconcile.segment_scan import SCAN_BATCH_RECORDS_MAX

APP_NAME = "rocketbox-reconcile"
MASTER_DEFAULT = "local[*]"
ENGINE_AUTO, ENGINE_SPARK, ENGINE_IN_PROCESS = "auto", "spark", "in-process"
ENGINES = (ENGINE_AUTO, ENGINE_SPARK, ENGINE_IN_PROCESS)
# Commitlog records the in-process engine takes (auto hands more to Spark; an incremental run
# catches up in chunks of this many): a million records with their ledger lines stay within the
# chart's 2 GiB for the CronJob (their peak: docs/benchmarks.md).
IN_PROCESS_RECORDS_MAX_DEFAULT = 1_000_000
# An incremental run settles a message once nothing about it was seen for this long before the
# latest time seen: evidence of one message (its record, its answer, a slave's copy) is assumed
# to arrive within it, as it does within milliseconds to seconds; a message the outbox holds
# stays open however long its outage lasts.
SETTLE_MS_DEFAULT = 10 * 60 * 1000
DRILL_DOWN_IDS_MAX_DEFAULT = 100
SUMMARY_ROWS_MAX_DEFAULT = 10_000
LOCAL_MASTER = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$")


@dataclass(frozen=True, slots=True)
class SparkSettings:
    master: str = MASTER_DEFAULT
    app_name: str = APP_NAME
    shuffle_partitions: int | None = None  # None: 4 per core locally, Spark's default otherwise
    conf: tuple[tuple[str, str], ...] = ()  # any other Spark setting, applied last

    def __post_init__(self) -> None:
        if self.shuffle_partitions is not None and self.shuffle_partitions < 1:
            raise ValueError("shuffle_partitions must be >= 1")

    @property
    def local(self) -> bool:
        return bool(LOCAL_MASTER.match(self.master))


@dataclass(frozen=True, slots=True)
class JobConfig:
    # Store roots (with commitlog/) or commitlog directories: one broker's, or a cluster's
    # (every group's master, and slaves' copies, which fold into their masters' records).
    commitlogs: tuple[Path, ...]
    outbox: Path  # an export: .jsonl, or .parquet (file or directory)
    out_dir: Path
    ledgers: tuple[Path, ...] = ()
    spark: SparkSettings = field(default_factory=SparkSettings)
    engine: str = ENGINE_AUTO
    in_process_records_max: int = IN_PROCESS_RECORDS_MAX_DEFAULT
    bucket_ms: int = BUCKET_MS_DEFAULT
    drill_down_ids_max: int = DRILL_DOWN_IDS_MAX_DEFAULT
    summary_rows_max: int = SUMMARY_ROWS_MAX_DEFAULT
    scan_batch_records_max: int = SCAN_BATCH_RECORDS_MAX
    extra: dict[str, str] = field(default_factory=dict)  # echoed into the summary's inputs
    # Incremental runs (incremental.py): the checkpoint directory, or None for a whole run;
    # ``full`` starts the checkpoint over.
    checkpoint: Path | None = None
    full: bool = False
    settle_ms: int = SETTLE_MS_DEFAULT

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if self.checkpoint is not None and self.engine == ENGINE_SPARK:
            raise ValueError("incremental runs (a checkpoint) run in process, not with Spark")
        for name in (
            "in_process_records_max",
            "bucket_ms",
            "drill_down_ids_max",
            "summary_rows_max",
            "scan_batch_records_max",
            "settle_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
