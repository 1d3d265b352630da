"""What the reconciliation writes besides its Parquet details: ``summary.json`` and ``report.html``.

Both are made from the summary alone (job.py), so a report can be drawn again from a summary.
The page is one self-contained file: plotly.js is inlined (some MiB of it), so it opens offline
and from a CI artifact. Under the verdict, one card per counter with its human label and what it
means (an "unexpected" count beside a "nothing lost" verdict reads as alarming unless it says that
it is no loss). Then the charts (reconcile/report_charts.py), each in a ``div`` whose id is in
``CHART_IDS``:

- findings per 10-minute bucket (stacked: lost, duplicated, recovered, unexpected, pending, dead);
- messages per bucket by outcome (ok beside the findings, to see the load they came from);
- per topic: each outcome, on a log axis (a handful lost beside millions ok must still show);
- time from first failure to delivery: the histogram of delivery latency, with its percentiles.

When the commitlog was not read whole (summary.json's ``unread``, reconcile/unread.py), the verdict
is "No verdict" with the sentence saying what could not be read, whatever the counts. Below the
charts: the commitlog scan (segments, where a scan stopped early, why, and whether it left part
of the log unread), the inputs, and the drill-down (message ids per finding, at most the job's
``drill_down_ids_max`` each). Times are ISO-8601 in UTC, never epoch milliseconds. A table keeps
to the page's width: a long cell is cut with an ellipsis (its whole value on hover) and a wide
table scrolls inside its own box.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.offline

from reconcile.outcomes import OUTCOMES
from reconcile.report_charts import (
    CATEGORY_ORDER,
    CHART_HEIGHT_PX,
    COLOURS,
    findings_chart,
    latency_chart,
    outcomes_chart,
    topics_chart,
)

__all__ = ["CATEGORY_ORDER", "CHART_IDS", "COLOURS", "COUNTERS", "render", "write_outputs"]

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
CHART_IDS = ("chart-findings", "chart-outcomes", "chart-topics", "chart-latency")
_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
# The summary's counters, in the page's order: (key, human label, what it means).
COUNTERS = (
    ("messages", "messages", "seen in a ledger, the outbox or the commitlog"),
    ("ok", "ok", "acknowledged or delivered, and stored"),
    ("lost", "lost", "acknowledged, yet not stored: the one finding that is a loss"),
    ("duplicated", "duplicated", "stored more than once"),
    ("duplicate_copies", "extra copies", "copies beyond each message's first"),
    ("recovered", "recovered", "an uncertain answer or an open outbox entry, yet stored"),
    ("unexpected", "unexpected", "stored, never acknowledged — not a loss"),
    ("unchecked", "unchecked", "stored in a topic no ledger names — not a loss"),
    ("pending", "pending", "in the outbox, not stored yet: still to be sent"),
    ("dead", "dead", "given up in the outbox, not stored: needs an operator"),
    ("resend_pending", "resend pending", "stored, and still pending in the outbox"),
    ("parked_only", "parked only", "stored only as a delayed copy, not yet delivered"),
)
# Columns that hold a time in epoch milliseconds: shown as ISO-8601 (UTC).
TIME_COLUMNS = frozenset(
    {"event_time_ms", "first_store_timestamp_ms", "first_ack_ms", "spooled_ms", "delivered_ms",
     "bucket_start_ms", "time_ms", "created_ms"}
)  # fmt: skip


def write_outputs(summary: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_path = out_dir / SUMMARY_FILE
    summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    report_path = out_dir / REPORT_FILE
    report_path.write_text(render(summary), encoding="utf-8")
    return summary_path, report_path


def render(summary: dict[str, Any]) -> str:
    charts = [
        _figure_html(findings_chart(summary), CHART_IDS[0]),
        _figure_html(outcomes_chart(summary, OUTCOMES), CHART_IDS[1]),
        _figure_html(topics_chart(summary, OUTCOMES), CHART_IDS[2]),
        _figure_html(latency_chart(summary), CHART_IDS[3]),
    ]
    totals = summary["totals"]
    lost = summary["verdict_lost"]
    verdict = (
        f"{lost:,} acknowledged message{'s' if lost != 1 else ''} LOST"
        if lost
        else "Nothing acknowledged was lost"
    )
    unread = summary.get("unread")
    if unread is not None:
        # Counts of a log read in part prove nothing: the verdict says so, never "nothing lost".
        verdict = f"No verdict: {unread['sentence']}"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>rocketbox reconciliation</title>",
            f"<style>{_CSS}</style>",
            f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>',
            "</head><body>",
            "<h1>rocketbox reconciliation</h1>",
            f'<p><span class="verdict {"bad" if lost or unread else "good"}" id="verdict">'
            f"{html.escape(verdict)}</span>{_verdict_note(totals)}</p>",
            _counters(totals),
            '<div class="charts">',
            *(f'<div class="chart">{c}</div>' for c in charts),
            "</div>",
            _commitlog_section(summary),
            _inputs_section(summary),
            _drill_down_section(summary),
            _definitions_section(),
            "</body></html>",
        ]
    )


def _figure_html(fig: go.Figure, div_id: str) -> str:
    if fig.layout.height is None:
        fig.update_layout(height=CHART_HEIGHT_PX)
    # One legend order on every chart: the traces' own (CATEGORY_ORDER), never plotly's reversal
    # of a stack.
    fig.update_layout(margin={"l": 60, "r": 20, "t": 50, "b": 50}, legend={"traceorder": "normal"})
    text: str = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOTLY_CONFIG
    )
    return text


def _verdict_note(totals: dict[str, Any]) -> str:
    """Beside the verdict, what is not a loss although it may dwarf the rest of the charts."""
    notes = [
        f"{totals[key]:,} {label}: {meaning}"
        for key, label, meaning in COUNTERS
        if key in ("unexpected", "unchecked") and totals[key]
    ]
    return f' <span class="verdict-note">{html.escape("; ".join(notes))}</span>' if notes else ""


def _counters(totals: dict[str, Any]) -> str:
    """One card per counter: the number, its label and its meaning, in its category's colour."""
    cards = []
    for key, label, meaning in COUNTERS:
        colour = COLOURS.get(key, "#444444")
        cards.append(
            f'<div class="counter" id="counter-{key}" style="border-left-color: {colour}">'
            f'<span class="count">{totals[key]:,}</span> '
            f'<span class="label">{html.escape(label)}</span>'
            f'<span class="meaning">{html.escape(meaning)}</span></div>'
        )
    return f'<div class="counters">{"".join(cards)}</div>'


def iso_time(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 in UTC, to the millisecond when it has any."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")
    return text.replace("+00:00", "Z")


def _table(header: list[str], rows: list[list[Any]], kind: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    kinds = ["id" if h == "message id" else "" for h in header]
    body = "".join(
        "<tr>" + "".join(_td(_cell(v), k) for v, k in zip(row, kinds, strict=True)) + "</tr>"
        for row in rows
    )
    return (
        f'<div class="table {kind}"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _td(text: str, kind: str = "") -> str:
    # The title holds the whole value: a cell cut with an ellipsis shows it on hover.
    escaped = html.escape(text)
    cls = f' class="{kind}"' if kind else ""
    return f'<td{cls} title="{escaped}">{escaped}</td>' if text else f"<td{cls}></td>"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _column_label(name: str) -> str:
    """``first_store_timestamp_ms`` -> ``first store timestamp (UTC)``."""
    if name in TIME_COLUMNS:
        return name.removesuffix("_ms").replace("_", " ") + " (UTC)"
    return name.replace("_", " ")


def _column_value(name: str, value: Any) -> Any:
    if name in TIME_COLUMNS and isinstance(value, int) and not isinstance(value, bool):
        return iso_time(value)
    return value


def _commitlog_section(summary: dict[str, Any]) -> str:
    c = summary["commitlog"]
    parts = [
        "<h2>Commitlog</h2>",
        _table(
            ["segments", "bytes", "records", "kept", "parked", "system topics", "rolled back",
             "without id", "blank bytes", "first stored (UTC)", "last stored (UTC)"],
            [[c["segments"], c["bytes"], c["records"], c["kept_records"], c["parked_records"],
              c["system_topic_records"], c["rollback_records"], c["records_without_id"],
              c["blank_bytes"],
              _column_value("time_ms", c.get("first_store_timestamp_ms")),
              _column_value("time_ms", c.get("last_store_timestamp_ms"))]],
        ),
    ]  # fmt: skip
    if len(c["sources"]) > 1:
        parts.append(
            f"<h3>Directories read</h3><p>{c['slave_copies']:,} records were read twice or more "
            "(a slave's copy of its master's record: same store host, phy_offset and store "
            "time) and counted once.</p>"
        )
        parts.append(
            _table(
                ["directory", "segments", "records", "kept", "store hosts"],
                [[s["directory"], s["segments"], s["records"], s["kept_records"],
                  ", ".join(s["store_hosts"])] for s in c["sources"]],
            )
        )  # fmt: skip
    if c["stops"]:
        parts.append(
            "<h3>Scans that stopped early</h3><p>A torn tail (a crash mid-append, zeros after "
            "it) leaves nothing unread; any other stop leaves part of the log unread, and the "
            "run is no verdict.</p>"
        )
        parts.append(
            _table(
                ["directory", "segment", "phy_offset", "where", "reason", "unread",
                 "written after (phy_offset)"],
                [[s["directory"], s["segment"], s["phy_offset"], s["where"], s["reason"],
                  "yes" if s["unread"] else "no", s["written_after_phy_offset"]]
                 for s in c["stops"]],
            )
        )  # fmt: skip
    if c["gaps"]:
        parts.append("<h3>Missing segments</h3>")
        parts.append(
            _table(
                ["directory", "from phy_offset", "to phy_offset"],
                [[g["directory"], g["from_phy_offset"], g["to_phy_offset"]] for g in c["gaps"]],
            )
        )
    return "\n".join(parts)


def _inputs_section(summary: dict[str, Any]) -> str:
    ledgers = summary["ledgers"]
    outbox = summary["outbox"]
    rows = [
        [k, v if isinstance(v, str | int) else json.dumps(v)] for k, v in summary["inputs"].items()
    ]
    rows += [[f"ledger {_column_label(k)}", v] for k, v in ledgers.items() if k != "scope_topics"]
    rows.append(["topics in scope", ", ".join(ledgers["scope_topics"])])
    rows += [[f"outbox {_column_label(k)}", v] for k, v in outbox.items()]
    rows.append(["elapsed", f"{summary.get('elapsed_s', 0)} s"])
    return "<h2>Inputs</h2>" + _table(["input", "value"], rows, kind="inputs")


def _drill_down_section(summary: dict[str, Any]) -> str:
    parts = [
        "<h2>Drill-down</h2>",
        f"<p>Every message: <code>{html.escape(summary['details']['messages'])}</code> "
        "(Parquet, one row per message id; filter on <code>outcome</code>).</p>",
    ]
    for finding, rows in summary["drill_down"].items():
        if not rows:
            continue
        header = list(rows[0])
        parts.append(f"<h3>{html.escape(finding)} (first {len(rows):,})</h3>")
        parts.append(
            _table(
                [_column_label(h) for h in header],
                [[_column_value(h, r[h]) for h in header] for r in rows],
                kind="drill-down",
            )
        )
    return "\n".join(parts)


def _definitions_section() -> str:
    items = "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in DEFINITIONS.items()
    )
    return f"<h2>Definitions</h2><ul>{items}</ul>"


DEFINITIONS = {
    "lost": "acknowledged STORED, or acknowledged SPOOLED / DELIVERED in the outbox and not held "
    "by it, yet absent from the commitlog",
    "duplicated": "stored more than once in application topics (retry, dead-letter and parked "
    "copies are not copies)",
    "recovered": "an ambiguous outcome (SPOOLED AMBIGUOUS, maybe_stored) or still PENDING/DEAD "
    "in the outbox, yet stored",
    "unexpected": "stored, in no ledger and no outbox, in a topic a ledger names (from a "
    "sidecar's ledger after a crash, an upper bound: the answers of its last moment may be "
    "missing from it)",
    "unchecked": "stored, in no ledger and no outbox, in a topic no ledger names",
    "pending": "not stored, PENDING in the outbox",
    "dead": "not stored, DEAD in the outbox",
    "ok": "acknowledged or DELIVERED, and stored",
    "bucket": "first acknowledgement time, else outbox created_ms, else first store timestamp",
    "time from first failure to delivery": "first store timestamp minus outbox created_ms (else "
    "the first SPOOLED acknowledgement), for stored messages that failed first",
}

_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
.verdict { font-size: 1.4em; font-weight: bold; padding: 8px 12px; display: inline-block; }
.verdict.good { background: #e3f4e3; color: #1d6b1d; }
.verdict.bad { background: #fbe3e3; color: #a11d1d; }
.verdict-note { margin-left: 12px; color: #8c564b; }
.counters { display: grid; grid-template-columns: repeat(auto-fill, minmax(15em, 1fr));
  gap: 6px; margin: 8px 0 16px; }
.counter { border: 1px solid #ddd; border-left: 6px solid #444; padding: 4px 8px; }
.counter .count { font-size: 1.3em; font-weight: bold; }
.counter .label { font-weight: bold; }
.counter .meaning { display: block; font-size: 0.85em; color: #555; }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; }
.chart { border: 1px solid #ddd; min-width: 0; }
/* A wide table scrolls inside its own box; the page never scrolls sideways. */
.table { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; }
th { background: #f3f3f3; white-space: normal; vertical-align: bottom; }
/* A long value is cut with an ellipsis; its cell's title shows all of it on hover. */
td { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 22em; }
.inputs td { text-align: left; }
.drill-down td { max-width: 14em; }
/* The message id is what a reader copies: never cut. */
.drill-down td.id { max-width: none; text-align: left; font-family: ui-monospace, monospace; }
.drill-down th { min-width: 5em; }
"""
