"""When a run is no verdict: the commitlog it read was not all of what was written.

A reconciliation proves nothing about records it did not read. A message stored past where a
scan stopped would be counted lost, and a log read as nothing at all would say "nothing lost" of
an empty set: a checker's worst answer is a false all-clear over a log it could not read. So the
summary says ``verdict: "UNREAD"`` and names what could not be read in one sentence, and the
command line exits with the condition's own code (errors.py's table), whatever the counts:

1. ``NOT_A_COMMITLOG`` (exit 6): a segment file's first bytes are no record and no blank marker
   (a consume queue or index file, a DLedger log, another format: scan_stop.py);
2. ``READ_IN_PART`` (exit 5): any other early stop but a torn tail (figures.py's stops): a scan
   stopped at damage or zeros with bytes written after it in its segment, or with later segments
   written, or a segment could not be opened;
3. ``NO_RECORDS`` (exit 7): not one record was read from the commitlog, yet the ledgers or the
   outbox name messages. An incremental run reads only what is new, so only one that read the
   log from its start (its first, or one started over) is held to this.

A torn tail stays a verdict: a crash mid-append leaves a torn record in the last segment written
with zeros only after it, which the broker's recovery cuts as well; its message, if acknowledged,
is rightly lost.
"""

from __future__ import annotations

from typing import Any

from reconcile.errors import ExitCode
from reconcile.figures import BEFORE_WRITTEN_BYTES, INSIDE_THE_LOG, NOT_A_COMMITLOG_SEGMENT
from reconcile.segment_scan import NOT_A_COMMITLOG

VERDICT_UNREAD = "UNREAD"


def unread_state(summary: dict[str, Any]) -> dict[str, Any] | None:
    """summary.json's ``unread``: the condition, its exit code and sentence; None when the whole
    log was read (a verdict stands)."""
    log = summary["commitlog"]
    stops = [s for s in log["stops"] if s["unread"]]
    several = len(log["sources"]) > 1
    foreign = [s for s in stops if s["kind"] == NOT_A_COMMITLOG]
    if foreign:
        return _state(ExitCode.NOT_A_COMMITLOG, _stop_sentence(foreign[0], several), len(stops))
    if stops:
        return _state(ExitCode.READ_IN_PART, _stop_sentence(stops[0], several), len(stops))
    named = int(summary["totals"]["messages"])
    run = summary.get("incremental")
    from_start = run is None or run["run"] == 1 or run["started_over"]
    if from_start and not log["records"] and named:
        sentence = (
            f"no record was read from the commitlog ({_plural(log['segments'], 'segment file')}"
            f", {_plural(log['bytes'], 'byte')}), yet the ledgers and the outbox name "
            f"{_plural(named, 'message')}"
        )
        return _state(ExitCode.NO_RECORDS, sentence, 0)
    return None


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _state(code: ExitCode, sentence: str, stops: int) -> dict[str, Any]:
    more = f" ({_plural(stops - 1, 'more stop')} in summary.json)"
    return {
        "kind": code.name,
        "exit_code": int(code),
        "sentence": sentence + (more if stops > 1 else ""),
    }


def _stop_sentence(stop: dict[str, Any], several: bool) -> str:
    segment = f"segment {stop['segment']}" + (f" of {stop['directory']}" if several else "")
    where = stop["where"]
    if where == NOT_A_COMMITLOG_SEGMENT:
        reason: str = stop["reason"]
        return f"the commitlog could not be read: {segment} is not a commitlog segment: {reason}"
    head = f"the commitlog was read only in part: the scan of {segment} stopped at phy_offset "
    head += f"{stop['phy_offset']:,} ({stop['reason']})"
    if where == BEFORE_WRITTEN_BYTES:
        after = stop["written_after_phy_offset"]
        return f"{head}, yet bytes are written after it, at phy_offset {after:,}"
    if where == INSIDE_THE_LOG:
        return f"{head}, yet later segments hold more of the log"
    return f"the commitlog was read only in part: {segment} could not be read ({stop['reason']})"
