"""What incremental runs keep between them: how far each input was read, and what is still open.

A checkpoint directory holds generations, one per run, and ``CURRENT`` naming the last complete
one (replaced atomically once the generation is written, so a run killed half-way leaves the
previous checkpoint in force; older generations are removed afterwards)::

    CURRENT                             "run-000042-0000" (run 42 after its first chunk)
    run-000042-0000/state.json          positions, the watermark, cumulative figures (below)
    run-000042-0000/open_records.parquet  the commitlog rows of messages not yet settled
    run-000042-0000/open_acks.parquet     their ledger lines
    run-000042-0000/settled_cells.parquet the outcome counts per (topic, bucket) of every message
                                          settled so far, summed over the runs
    run-000042-0000/settled_outbox_ids.parquet  settled messages the outbox export still holds,
                                          whose entries later runs leave out (they were counted)

``state.json``: the format version; the run number; the commitlog directories it was made for
and per directory the byte position reached in each segment; per ledger its path, the byte
position read to (a line's end) and the file's inode (a ledger replaced by another file is read
from its start); the watermark (the latest store or acknowledgement time seen); the settle
window and bucket length it was made with; the topics the ledgers named so far (the scope); the
ledgers' figures over the lines consumed so far.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from reconcile.errors import InputError

CHECKPOINT_VERSION = 1
CURRENT = "CURRENT"
GENERATION_PREFIX = "run-"
_STATE = "state.json"
_TABLES = ("open_records", "open_acks", "settled_cells", "settled_outbox_ids")


@dataclass(slots=True)
class LedgerPosition:
    path: str
    position_bytes: int
    inode: int


@dataclass(slots=True)
class State:
    run: int
    commitlogs: list[str]  # the directories, in the order given
    # Per directory: segment name → the byte position the last scan stopped at.
    segment_positions: list[dict[str, int]]
    ledgers: list[LedgerPosition]
    watermark_ms: int | None
    settle_ms: int
    bucket_ms: int
    scope_topics: list[str]
    ledger_figures: dict[str, int]  # figures.summarise_ledger's counts over consumed lines
    chunk: int = 0  # the chunks a run caught up in, saved after each
    version: int = CHECKPOINT_VERSION


@dataclass(slots=True)
class Checkpoint:
    state: State
    open_records: pa.Table
    open_acks: pa.Table | None
    settled_cells: pa.Table
    settled_outbox_ids: pa.Table


def load(directory: Path) -> Checkpoint | None:
    """The checkpoint in force, or None when the directory holds none yet."""
    current = directory / CURRENT
    if not current.is_file():
        return None
    generation = directory / current.read_text(encoding="utf-8").strip()
    try:
        raw = json.loads((generation / _STATE).read_text(encoding="utf-8"))
        if raw.get("version") != CHECKPOINT_VERSION:
            raise InputError(
                f"checkpoint {generation} has format version {raw.get('version')}, this "
                f"rocketbox reads {CHECKPOINT_VERSION}: start over with --full"
            )
        raw["ledgers"] = [LedgerPosition(**p) for p in raw["ledgers"]]
        state = State(**raw)
        tables = {name: pq.read_table(generation / f"{name}.parquet") for name in _TABLES}
    except (OSError, ValueError, TypeError, KeyError, pa.ArrowException) as e:
        raise InputError(
            f"checkpoint {generation} cannot be read ({e}): start over with --full"
        ) from e
    acks = tables["open_acks"]
    return Checkpoint(
        state=state,
        open_records=tables["open_records"],
        open_acks=acks if acks.num_columns else None,
        settled_cells=tables["settled_cells"],
        settled_outbox_ids=tables["settled_outbox_ids"],
    )


def save(directory: Path, checkpoint: Checkpoint) -> Path:
    """Write a new generation, make it current, remove the older ones; returns its path."""
    name = f"{GENERATION_PREFIX}{checkpoint.state.run:06d}-{checkpoint.state.chunk:04d}"
    generation = directory / name
    try:
        if generation.exists():  # a run that died before making it current
            shutil.rmtree(generation)
        generation.mkdir(parents=True)
        (generation / _STATE).write_text(
            json.dumps(asdict(checkpoint.state), indent=1), encoding="utf-8"
        )
        acks = checkpoint.open_acks if checkpoint.open_acks is not None else pa.table({})
        tables = {
            "open_records": checkpoint.open_records,
            "open_acks": acks,
            "settled_cells": checkpoint.settled_cells,
            "settled_outbox_ids": checkpoint.settled_outbox_ids,
        }
        for table_name, table in tables.items():
            pq.write_table(table, generation / f"{table_name}.parquet")
        _fsync_tree(generation)
        pointer = directory / f"{CURRENT}.tmp"
        pointer.write_text(name, encoding="utf-8")
        _fsync(pointer)
        os.replace(pointer, directory / CURRENT)
        _fsync(directory)
    except OSError as e:
        raise InputError(f"cannot write checkpoint {generation}: {e}") from e
    for old in directory.glob(f"{GENERATION_PREFIX}*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return generation


def _fsync_tree(directory: Path) -> None:
    for path in directory.iterdir():
        _fsync(path)
    _fsync(directory)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # a filesystem without fsync on directories
            os.fsync(fd)
    finally:
        os.close(fd)
