"""Before the job runs on a cluster: can its executors run it?

The job's tasks run on the workers, in the Python ``PYSPARK_PYTHON`` names there, and read the
inputs and write under ``--out`` at the driver's paths (session.py). When either is wrong, every
task of the first stage fails four times and the job ends with a worker's traceback. One small
Spark job first, a task a core, asks the executors it reaches what they lack, and the run stops
with a sentence naming it (JobError, exit 4).

A check, not a proof: an executor that joins later, or that none of these tasks reached, is not
asked; a task of the job that fails after all is still translated (session.translate_errors).
This module is what those tasks import: the standard library only, whatever the executors lack.
"""

from __future__ import annotations

import functools
import importlib
import os
import socket
import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from reconcile.errors import JobError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from reconcile.commitlog_sources import CommitlogSource
    from reconcile.config import JobConfig

# What the tasks import beside the standard library and the code session.py ships to them.
EXECUTOR_MODULES = ("pyarrow", "numpy", "zlib_ng")
# A file the driver leaves in --out while the check runs: an executor that sees it sees the
# driver's directory, not a directory of its own at the same path.
MARKER_PREFIX = ".rocketbox-shared-"
# Paths named in the message; the rest are counted.
NAMED_PATHS_MAX = 3
SHARED_STORAGE = (
    "every worker must see the inputs and --out at the same paths as the driver (shared storage)"
)


class Looked(NamedTuple):
    """What one task found on its executor."""

    host: str
    python: str
    missing: tuple[str, ...]  # "pyarrow", or "pyarrow (why it did not import)"
    unseen: tuple[str, ...]  # inputs it cannot read, --out when it is not the driver's


def check_executors(
    spark: SparkSession, config: JobConfig, sources: Sequence[CommitlogSource]
) -> None:
    """JobError naming what an executor lacks; nothing on a local master (the executors are
    this process's JVM and this interpreter)."""
    # Here, not above: the executors import this module, and config.py's imports need pyarrow.
    from reconcile.config import LOCAL_MASTER  # noqa: PLC0415 - the driver's side only

    if LOCAL_MASTER.match(spark.sparkContext.master or ""):
        return
    inputs = [s.directory for s in sources] + [config.outbox, *config.ledgers]
    relative = [str(p) for p in [*inputs, config.out_dir] if not p.is_absolute()]
    if relative:
        raise JobError(
            f"on a cluster every path must be absolute (an executor reads a relative one from "
            f"its own working directory): {_named(relative)}"
        )
    marker = config.out_dir / f"{MARKER_PREFIX}{uuid.uuid4().hex}"
    marker.touch()
    try:
        sc = spark.sparkContext
        tasks = sc.defaultParallelism
        look = functools.partial(_look, tuple(map(str, inputs)), str(config.out_dir), str(marker))
        looked: list[Looked] = sc.parallelize(range(tasks), tasks).mapPartitions(look).collect()
    finally:
        marker.unlink(missing_ok=True)
    for seen in looked:
        if seen.missing:
            raise JobError(
                f"the executors' Python on {seen.host} ({seen.python}) cannot import "
                f"{', '.join(seen.missing)}: set PYSPARK_PYTHON to a Python with "
                f"{', '.join(EXECUTOR_MODULES)} on every worker (the Python of "
                "rocketbox's own install has them)"
            )
    for seen in looked:
        if seen.unseen:
            raise JobError(
                f"the executors on {seen.host} cannot see {_named(seen.unseen)}: {SHARED_STORAGE}"
            )


def _look(inputs: tuple[str, ...], out_dir: str, marker: str, _: Iterable[int]) -> Iterator[Looked]:
    """A task: import what the job's tasks import; read the inputs; find the driver's marker."""
    missing = []
    for name in EXECUTOR_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            missing.append(name if e.name == name else f"{name} ({e})")
        except ImportError as e:
            missing.append(f"{name} ({e})")
    unseen = [path for path in inputs if not os.access(path, os.R_OK)]
    if not (os.path.exists(marker) and os.access(out_dir, os.W_OK)):
        unseen.append(out_dir)
    yield Looked(socket.gethostname(), sys.executable, tuple(missing), tuple(unseen))


def _named(paths: Sequence[str]) -> str:
    named = ", ".join(paths[:NAMED_PATHS_MAX])
    more = len(paths) - NAMED_PATHS_MAX
    return f"{named} and {more} more" if more > 0 else named
