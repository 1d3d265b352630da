"""What the reconciliation writes besides its Parquet details: ``summary.json`` and ``report.html``.

Both are made from the summary alone (job.py), so a report can be drawn again from a summary.
The page is one self-contained file: plotly.js is inlined (about 4.6 MiB), so it opens offline
and from a CI artifact. Its charts, each in a ``div`` whose id is in ``CHART_IDS``:

- findings per 10-minute bucket (stacked: lost, duplicated, recovered, unexpected, pending, dead);
- messages per bucket by outcome (ok beside the findings, to see the load they came from);
- per topic: each outcome, on a log axis (a handful lost beside millions ok must still show);
- time from first failure to delivery: the histogram of delivery latency, with its percentiles.

Below them: the inputs, the commitlog scan (segments, where a scan stopped early and why), and
the drill-down (message ids per finding, at most the job's ``drill_down_ids_max`` each).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.offline

from reconcile.classify import FINDINGS, OUTCOMES

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
CHART_IDS = ("chart-findings", "chart-outcomes", "chart-topics", "chart-latency")
# One colour per category, the same in every chart.
COLOURS = {
    "lost": "#d62728",
    "duplicated": "#9467bd",
    "recovered": "#ff7f0e",
    "unexpected": "#8c564b",
    "pending": "#17becf",
    "dead": "#7f7f7f",
    "ok": "#2ca02c",
    "unchecked": "#bcbd22",
}
CHART_HEIGHT_PX = 380
_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


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
        _figure_html(outcomes_chart(summary), CHART_IDS[1]),
        _figure_html(topics_chart(summary), CHART_IDS[2]),
        _figure_html(latency_chart(summary), CHART_IDS[3]),
    ]
    totals = summary["totals"]
    lost = totals["lost"]
    verdict = (
        f"{lost:,} acknowledged message{'s' if lost != 1 else ''} LOST"
        if lost
        else "Nothing acknowledged was lost"
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            "<title>rocketbox reconciliation</title>",
            f"<style>{_CSS}</style>",
            f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>',
            "</head><body>",
            "<h1>rocketbox reconciliation</h1>",
            f'<p class="verdict {"bad" if lost else "good"}">{html.escape(verdict)}</p>',
            _totals_table(totals),
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
    fig.update_layout(height=CHART_HEIGHT_PX, margin={"l": 60, "r": 20, "t": 50, "b": 50})
    text: str = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOTLY_CONFIG
    )
    return text


def findings_chart(summary: dict[str, Any]) -> go.Figure:
    findings = ("lost", "duplicated", "recovered", "unexpected", "pending", "dead")
    return _bucket_chart(summary, findings, f"Findings per {_bucket_text(summary)} bucket")


def outcomes_chart(summary: dict[str, Any]) -> go.Figure:
    title = f"Messages per {_bucket_text(summary)} bucket, by outcome"
    return _bucket_chart(summary, OUTCOMES, title)


def _bucket_chart(summary: dict[str, Any], categories: Sequence[str], title: str) -> go.Figure:
    """One stacked bar per time bucket, a segment per category."""
    buckets = summary["per_bucket"]
    x = [b["bucket_start"] for b in buckets]
    bars = [
        go.Bar(name=c, x=x, y=[b[c] for b in buckets], marker_color=COLOURS[c]) for c in categories
    ]
    fig = go.Figure(bars)
    fig.update_layout(
        title=title, barmode="stack", xaxis_title="bucket start (UTC)", yaxis_title="messages"
    )
    return fig


def topics_chart(summary: dict[str, Any]) -> go.Figure:
    topics = summary["per_topic"]
    names = [t["topic"] for t in topics]
    categories = [*OUTCOMES, "duplicated"]
    fig = go.Figure(
        [
            go.Bar(name=c, y=names, x=[t[c] for t in topics], orientation="h",
                   marker_color=COLOURS[c])
            for c in categories
        ]
    )  # fmt: skip
    largest = max((t[c] for t in topics for c in categories), default=1)
    fig.update_layout(title="Per topic", barmode="group", xaxis_title="messages (log)")
    # From 0.5: on a log axis a bar of 1 would otherwise have no length.
    fig.update_xaxes(type="log", range=[math.log10(0.5), math.log10(max(largest, 1) * 2)])
    return fig


def latency_chart(summary: dict[str, Any]) -> go.Figure:
    latency = summary["delivery_latency"]
    bins = latency["histogram"]
    labels = [
        f"{_ms_text(b['from_ms'])} to {_ms_text(b['to_ms'])}"
        if b["to_ms"]
        else f"≥ {_ms_text(b['from_ms'])}"
        for b in bins
    ]
    fig = go.Figure(
        [go.Bar(x=labels, y=[b["messages"] for b in bins], marker_color=COLOURS["recovered"])]
    )
    title = "Time from first failure to delivery"
    if latency.get("messages"):
        title += (
            f"<br><sup>{latency['messages']:,} messages: p50 {_ms_text(latency['p50_ms'])}, "
            f"p90 {_ms_text(latency['p90_ms'])}, p99 {_ms_text(latency['p99_ms'])}, "
            f"max {_ms_text(latency['max_ms'])}</sup>"
        )
    else:
        fig.add_annotation(text="no message failed before it was stored", showarrow=False)
    fig.update_layout(title=title, xaxis_title="latency", yaxis_title="messages")
    return fig


def _bucket_text(summary: dict[str, Any]) -> str:
    return _ms_text(int(summary["bucket_ms"]))


def _ms_text(ms: int | None) -> str:
    if ms is None:
        return "?"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        if ms >= size:
            value = ms / size
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{ms} ms"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return (
        f'<div class="table"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _totals_table(totals: dict[str, Any]) -> str:
    names = ["messages", *FINDINGS, "duplicated", "duplicate_copies", "resend_pending", "ok",
             "unchecked", "parked_only"]  # fmt: skip
    return _table(names, [[totals[n] for n in names]])


def _commitlog_section(summary: dict[str, Any]) -> str:
    c = summary["commitlog"]
    parts = [
        "<h2>Commitlog</h2>",
        _table(
            ["segments", "bytes", "records", "kept", "parked", "system topics", "without id",
             "blank bytes"],
            [[c["segments"], c["bytes"], c["records"], c["kept_records"], c["parked_records"],
              c["system_topic_records"], c["records_without_id"], c["blank_bytes"]]],
        ),
    ]  # fmt: skip
    if c["stops"]:
        parts.append("<h3>Scans that stopped early</h3>")
        parts.append(
            _table(
                ["segment", "phy_offset", "where", "reason"],
                [[s["segment"], s["phy_offset"], s["where"], s["reason"]] for s in c["stops"]],
            )
        )
    if c["gaps"]:
        parts.append("<h3>Missing segments</h3>")
        parts.append(
            _table(
                ["from phy_offset", "to phy_offset"],
                [[g["from_phy_offset"], g["to_phy_offset"]] for g in c["gaps"]],
            )
        )
    return "\n".join(parts)


def _inputs_section(summary: dict[str, Any]) -> str:
    ledgers = summary["ledgers"]
    outbox = summary["outbox"]
    rows = [
        [k, v if isinstance(v, str | int) else json.dumps(v)] for k, v in summary["inputs"].items()
    ]
    rows += [[f"ledger {k}", v] for k, v in ledgers.items() if k != "scope_topics"]
    rows.append(["topics in scope", ", ".join(ledgers["scope_topics"])])
    rows += [[f"outbox {k}", v] for k, v in outbox.items()]
    rows.append(["elapsed", f"{summary.get('elapsed_s', 0)} s"])
    return "<h2>Inputs</h2>" + _table(["input", "value"], rows)


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
        parts.append(_table(header, [[r[h] for h in header] for r in rows]))
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
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; }
.chart { border: 1px solid #ddd; }
.table { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; }
th { background: #f3f3f3; }
"""
