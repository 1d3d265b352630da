"""Several commitlogs read as one: a cluster's broker groups, and slaves' copies of their masters.

Each directory given is a *source*, numbered in the order given; its segments are scanned like a
single broker's (commitlog_source.py), each segment by its own task. Every record carries the
store host of the broker that stored it (store_hosts.py): a master writes its own address, and
a slave's copy, replicated byte for byte, carries its master's. Across sources a record is
identified by (message id, store host, phy_offset, store timestamp), so the copy a slave holds
folds into its master's record (``slave_copies`` counts the folded ones), while a message stored
twice (a resend, to the same group or another) stays a duplicate: its copies differ in offset or
host. The store timestamp guards against a group whose store was wiped and restarted at offset
0 under the same address.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconcile.errors import InputError
from reconcile.figures import commitlog_summary
from reconcile.segment_scan import Segment, SegmentStats, commitlog_dir, list_segments

# Directories one run may read: a cluster's groups times (1 + slaves), with room to spare.
COMMITLOG_SOURCES_MAX = 256
# commitlog_summary's figures that add up over sources.
_SUMMED = (
    "segments", "segments_scanned", "segments_prepared_empty", "bytes", "records", "kept_records",
    "parked_records", "system_topic_records", "rollback_records", "records_without_id",
    "blank_bytes",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class CommitlogSource:
    index: int
    directory: Path  # the directory of segment files
    segments: list[Segment]


def read_sources(paths: tuple[Path, ...]) -> list[CommitlogSource]:
    """The segments of every directory (InputError when one has none, or one is given twice)."""
    if not paths:
        raise InputError("no commitlog directory given")
    if len(paths) > COMMITLOG_SOURCES_MAX:
        raise InputError(f"{len(paths)} commitlog directories, more than {COMMITLOG_SOURCES_MAX}")
    sources: list[CommitlogSource] = []
    seen: dict[Path, Path] = {}
    for index, path in enumerate(paths):
        directory = commitlog_dir(path)
        key = directory.resolve()
        if key in seen:
            # Read twice, every record would look like a slave's copy of itself.
            raise InputError(f"commitlog directory {directory} is given twice (as {seen[key]})")
        seen[key] = path
        sources.append(CommitlogSource(index, directory, list_segments(directory, index)))
    return sources


def sources_summary(
    sources: list[CommitlogSource], scanned: list[SegmentStats], limit: int
) -> dict[str, Any]:
    """summary.json's ``commitlog``: the figures summed over sources, the stops and gaps of each
    (naming its directory), and ``sources``: per directory, its segments, records and the store
    hosts in it (a master and its slaves show the same one). The job adds ``slave_copies``."""
    merged: dict[str, Any] = {name: 0 for name in _SUMMED}
    merged.update(stops=[], gaps=[], per_segment=[], sources=[])
    firsts: list[int] = []
    lasts: list[int] = []
    for source in sources:
        mine = [s for s in scanned if s.source == source.index]
        one = commitlog_summary(source.segments, mine, limit)
        where = {"directory": str(source.directory)}
        for name in _SUMMED:
            merged[name] += one[name]
        merged["stops"] += [{**stop, **where} for stop in one["stops"]]
        merged["gaps"] += [{**gap, **where} for gap in one["gaps"]]
        merged["per_segment"] += one["per_segment"]
        firsts += [one["first_store_timestamp_ms"]] if one["first_store_timestamp_ms"] else []
        lasts += [one["last_store_timestamp_ms"]] if one["last_store_timestamp_ms"] else []
        merged["sources"].append(
            {
                **where,
                "segments": one["segments"],
                "bytes": one["bytes"],
                "records": one["records"],
                "kept_records": one["kept_records"],
                "stops": len(one["stops"]),
                "store_hosts": sorted({h for s in mine for h in s.store_hosts}),
            }
        )
    merged["first_store_timestamp_ms"] = min(firsts, default=None)
    merged["last_store_timestamp_ms"] = max(lasts, default=None)
    merged["per_segment"] = merged["per_segment"][:limit]
    merged["slave_copies"] = 0
    return merged
