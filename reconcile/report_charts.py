"""The charts of report.html (reconcile/report.py draws the page around them).

Every chart names its categories in one order, ``CATEGORY_ORDER``, each in one colour,
``COLOURS``: a reader who learnt that brown is "unexpected" in one chart finds it so in all, in the
same place of every legend. Counts are whole messages, so every count axis has integer ticks.
Times are shown as ISO-8601 in UTC; topic names longer than ``TOPIC_LABEL_CHARS_MAX`` are cut
in the middle with an ellipsis on the axis (the hover shows the whole name), and the per-topic
chart grows with its topics, so a long list stays readable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

# Findings first, most serious first; then what is still open; ok last.
CATEGORY_ORDER = (
    "lost", "duplicated", "recovered", "unexpected", "unchecked", "pending", "dead", "ok",
)  # fmt: skip
COLOURS = {
    "lost": "#d62728",
    "duplicated": "#9467bd",
    "recovered": "#ff7f0e",
    "unexpected": "#8c564b",
    "unchecked": "#bcbd22",
    "pending": "#17becf",
    "dead": "#7f7f7f",
    "ok": "#2ca02c",
}
CHART_HEIGHT_PX = 380
# The per-topic chart: room per topic row, and the longest topic label before its ellipsis.
TOPIC_ROW_PX = 28
TOPIC_CHART_HEIGHT_PX_MAX = 4000
TOPIC_LABEL_CHARS_MAX = 24
# Up to this many messages on a count axis, a tick at every whole number.
UNIT_TICKS_MAX = 10
RANGE_DASH = "\N{EN DASH}"
_ISO_TICKS = "%Y-%m-%dT%H:%MZ"


def ordered(categories: Sequence[str]) -> list[str]:
    """``categories`` in the order every chart and legend uses."""
    return [c for c in CATEGORY_ORDER if c in categories]


def findings_chart(summary: dict[str, Any]) -> go.Figure:
    findings = ("lost", "duplicated", "recovered", "unexpected", "pending", "dead")
    # Unexpected messages can dwarf the rest: the title says they are no loss.
    title = (
        f"Findings per {bucket_text(summary)} bucket<br><sup>only lost is a loss; unexpected: "
        "stored, never acknowledged</sup>"
    )
    return _bucket_chart(summary, findings, title)


def outcomes_chart(summary: dict[str, Any], outcomes: Sequence[str]) -> go.Figure:
    title = f"Messages per {bucket_text(summary)} bucket, by outcome"
    return _bucket_chart(summary, outcomes, title)


def _bucket_chart(summary: dict[str, Any], categories: Sequence[str], title: str) -> go.Figure:
    """One stacked bar per time bucket, a segment per category."""
    buckets = summary["per_bucket"]
    x = [b["bucket_start"] for b in buckets]
    fig = go.Figure(
        [
            go.Bar(name=c, x=x, y=[b[c] for b in buckets], marker_color=COLOURS[c],
                   hovertemplate="%{x|" + _ISO_TICKS + "}: %{y:,d}")
            for c in ordered(categories)
        ]
    )  # fmt: skip
    fig.update_layout(
        title=title, barmode="stack", xaxis_title="bucket start (UTC)", yaxis_title="messages"
    )
    fig.update_xaxes(tickformat=_ISO_TICKS)
    largest = max((sum(b[c] for c in categories) for b in buckets), default=0)
    _integer_axis(fig, "y", largest)
    return fig


def topics_chart(summary: dict[str, Any], outcomes: Sequence[str]) -> go.Figure:
    topics = summary["per_topic"]
    names = [t["topic"] for t in topics]
    labels = topic_labels(names)
    categories = ordered([*outcomes, "duplicated"])
    fig = go.Figure(
        [
            go.Bar(name=c, y=labels, x=[t[c] for t in topics], orientation="h",
                   marker_color=COLOURS[c], customdata=names,
                   hovertemplate="%{customdata}: %{x:,d} " + c + "<extra></extra>")
            for c in categories
        ]
    )  # fmt: skip
    largest = max((t[c] for t in topics for c in categories), default=1)
    height = CHART_HEIGHT_PX + max(0, len(topics) - 3) * TOPIC_ROW_PX * len(categories) // 4
    fig.update_layout(
        title="Per topic",
        barmode="group",
        xaxis_title="messages (log)",
        height=min(height, TOPIC_CHART_HEIGHT_PX_MAX),
    )
    # From 0.5: on a log axis a bar of 1 would otherwise have no length. Ticks at powers of ten.
    fig.update_xaxes(
        type="log", range=[math.log10(0.5), math.log10(max(largest, 1) * 2)], dtick=1,
        tickformat=",d",
    )  # fmt: skip
    # The first topic at the top, as in a table.
    fig.update_yaxes(automargin=True, autorange="reversed", tickfont={"size": 11})
    return fig


def topic_labels(topics: Sequence[str]) -> list[str]:
    """Axis labels for ``topics``: long ones cut in the middle (names often differ only at their
    start or their end); should two still read alike, those keep their whole names, since plotly
    would draw topics with one label as one."""
    labels = [topic_label(t) for t in topics]
    alike = {label for label in labels if labels.count(label) > 1}
    return [t if label in alike else label for t, label in zip(topics, labels, strict=True)]


def topic_label(topic: str) -> str:
    if len(topic) <= TOPIC_LABEL_CHARS_MAX:
        return topic
    head = (TOPIC_LABEL_CHARS_MAX - 1) // 2
    tail = TOPIC_LABEL_CHARS_MAX - 1 - head
    return topic[:head] + "…" + topic[-tail:]


def latency_chart(summary: dict[str, Any]) -> go.Figure:
    latency = summary["delivery_latency"]
    bins = latency["histogram"]
    labels = [range_text(b["from_ms"], b["to_ms"]) for b in bins]
    counts = [b["messages"] for b in bins]
    fig = go.Figure(
        [
            go.Bar(name="recovered", x=labels, y=counts, marker_color=COLOURS["recovered"],
                   hovertemplate="%{x}: %{y:,d} messages<extra></extra>")
        ]
    )  # fmt: skip
    title = "Time from first failure to delivery"
    if latency.get("messages"):
        title += (
            f"<br><sup>{latency['messages']:,} messages: p50 {ms_text(latency['p50_ms'])}, "
            f"p90 {ms_text(latency['p90_ms'])}, p99 {ms_text(latency['p99_ms'])}, "
            f"max {ms_text(latency['max_ms'])}</sup>"
        )
    else:
        fig.add_annotation(text="no message failed before it was stored", showarrow=False)
    fig.update_layout(title=title, xaxis_title="latency", yaxis_title="messages")
    fig.update_xaxes(automargin=True, tickangle=-30)
    _integer_axis(fig, "y", max(counts, default=0))
    return fig


def _integer_axis(fig: go.Figure, axis: str, largest: int) -> None:
    """Whole-number ticks on a count axis: a tick at every message while there are few."""
    settings: dict[str, Any] = {"tickformat": ",d", "rangemode": "tozero"}
    if largest <= UNIT_TICKS_MAX:
        settings |= {"tick0": 0, "dtick": 1}
    if axis == "y":
        fig.update_yaxes(**settings)
    else:
        fig.update_xaxes(**settings)


def range_text(from_ms: int, to_ms: int | None) -> str:
    """A histogram bin's label, short enough for a narrow bar: 200-500 ms, 500 ms-1 s (with an
    en dash)."""
    if not to_ms:
        return f"≥ {ms_text(from_ms)}"
    low, high = ms_text(from_ms), ms_text(to_ms)
    low_value, low_unit = low.split(" ")
    if from_ms == 0 or high.endswith(" " + low_unit):
        low = "0" if from_ms == 0 else low_value
    return f"{low}{RANGE_DASH}{high}"


def bucket_text(summary: dict[str, Any]) -> str:
    return ms_text(int(summary["bucket_ms"]))


def ms_text(ms: int | None) -> str:
    if ms is None:
        return "?"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        if ms >= size:
            value = ms / size
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{ms} ms"
