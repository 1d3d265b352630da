"""The reconciliation job on a generated commitlog, ledger and outbox with planted findings.

tests/reconcile/planted.py plants, over three 10-minute buckets and three topics: ok messages,
lost ones (acknowledged STORED and absent; SPOOLED and in no outbox; DELIVERED in the outbox and
absent; the torn last record), duplicates (2 and 3 copies), recovered ones (ambiguous and
stored, one still PENDING, one stored twice), unexpected ones (a topic the ledger names),
unchecked ones (a topic it does not), pending and dead entries (with and without a ledger line),
delayed messages parked under SCHEDULE_TOPIC_XXXX, consumer retry copies, a record without an
id, a transaction op record and a torn ledger line.

Proves, with one Spark session (local[2]) for the module:
- the totals, the counts per topic, per bucket and per (topic, bucket) are exactly the planted
  ones, and the drill-down names exactly the planted ids of each finding;
- the commitlog scan: every segment read by its own task, blank padding skipped, system-topic,
  parked and id-less records counted, the torn tail reported (segment, phy_offset, reason) and its
  acknowledged message counted lost;
- time from first failure to delivery: the planted latencies, binned and with their maximum;
- details/messages (Parquet, written by Spark) holds every message once with its outcome;
- the Parquet export of the same outbox gives the same summary as the JSON lines export;
- without ledgers nothing is unexpected (no topic is in scope) and SPOOLED-only losses vanish;
- report.html renders in headless Chromium: every chart draws its SVG with its bars, and the
  screenshot shows the charts' colours;
- it reads plainly, as Chromium lays it out: every counter with its label and meaning (unexpected:
  "not a loss"), times as ISO-8601 and no epoch milliseconds, one legend order and one colour per
  category on every chart, whole-number count axes, no table wider than the window (a cut cell
  keeps its value as its title), and thirty long topic names each labelled on the per-topic axis.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from reconcile.config import ENGINE_SPARK, JobConfig
from reconcile.job import run
from reconcile.outcomes import FINDINGS, OUTCOMES
from reconcile.report import CATEGORY_ORDER, CHART_IDS, COLOURS, COUNTERS, write_outputs
from reconcile.report_charts import (
    CHART_HEIGHT_PX,
    RANGE_DASH,
    TOPIC_LABEL_CHARS_MAX,
    findings_chart,
    ordered,
    outcomes_chart,
    topic_label,
    topic_labels,
    topics_chart,
)
from tests.reconcile.chromium import dump_dom, pixels_of, read_png, screenshot
from tests.reconcile.planted import (
    BUCKET_MS,
    COUNT_NAMES,
    T0,
    Planted,
    counts,
    expected_counts,
    planted,
)
from tests.reconcile.report_page import EPOCH_MS, measure

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plants(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    return planted(tmp_path_factory.mktemp("planted"))


def reconcile(spark: SparkSession, p: Planted, out: Path, **kw: Any) -> dict[str, Any]:
    config = JobConfig(
        commitlogs=(p.store,),
        outbox=kw.pop("outbox", p.outbox_jsonl),
        out_dir=out,
        ledgers=kw.pop("ledgers", (p.acks,)),
        drill_down_ids_max=50,
        engine=ENGINE_SPARK,
        **kw,
    )
    summary = run(config, spark)
    write_outputs(summary, out)
    return summary


@pytest.fixture(scope="module")
def summary(
    spark: SparkSession, plants: Planted, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    return reconcile(spark, plants, tmp_path_factory.mktemp("out"))


def only_counts(row: dict[str, Any]) -> dict[str, int]:
    return {name: row[name] for name in COUNT_NAMES}


def test_the_totals_are_the_planted_ones(summary: dict[str, Any], plants: Planted) -> None:
    assert summary["totals"] == counts(plants.plants)
    assert summary["totals"] == {
        "messages": 129, "lost": 5, "pending": 5, "dead": 3, "recovered": 5, "ok": 104,
        "unexpected": 2, "unchecked": 5, "duplicated": 5, "duplicate_copies": 6,
        "resend_pending": 1, "parked_only": 2,
    }  # fmt: skip
    assert summary["verdict"] == "LOST"


def test_counts_per_topic_and_bucket_are_exact(summary: dict[str, Any], plants: Planted) -> None:
    expected = expected_counts(plants.plants)
    per_topic = {r["topic"]: only_counts(r) for r in summary["per_topic"]}
    per_bucket = {r["bucket_start_ms"]: only_counts(r) for r in summary["per_bucket"]}
    per_both = {
        (r["topic"], r["bucket_start_ms"]): only_counts(r) for r in summary["per_topic_bucket"]
    }

    assert per_topic == {k[0]: v for k, v in expected.items() if k[0] and k[1] is None}
    assert per_bucket == {k[1]: v for k, v in expected.items() if k[0] is None and k[1]}
    assert per_both == {k: v for k, v in expected.items() if k[0] and k[1]}
    assert sorted(per_bucket) == [T0, T0 + BUCKET_MS, T0 + 2 * BUCKET_MS]
    assert [r["bucket_start"] for r in summary["per_bucket"]] == [
        "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", "2026-01-01T00:20:00Z",
    ]  # fmt: skip
    assert per_topic["Orders"]["lost"] == 3
    assert per_both[("Payments", T0 + BUCKET_MS)]["lost"] == 2
    assert not any(summary["truncated"].values())


def test_the_drill_down_names_each_finding(summary: dict[str, Any], plants: Planted) -> None:
    drill = summary["drill_down"]
    for finding in FINDINGS:
        planted_ids = {p.message_id for p in plants.plants if p.outcome == finding}
        assert {r["message_id"] for r in drill[finding]} == planted_ids, finding
    assert {r["message_id"]: r["copies"] for r in drill["duplicated"]} == {
        p.message_id: p.copies for p in plants.plants if p.copies > 1
    }
    [pending_and_stored] = [r for r in drill["recovered"] if r["resend_pending"]]
    assert (pending_and_stored["outbox_state"], pending_and_stored["maybe_stored"]) == (
        "PENDING", True,
    )  # fmt: skip
    [line] = drill["malformed_ledger_lines"]
    assert line["line"] == '{"message_id":"TORN-LINE","top'
    assert summary["ledgers"] == {
        "lines": 121, "malformed": 1, "stored": 102, "spooled": 18, "spooled_ambiguous": 5,
        "scope_topics": ["Orders", "Payments"],
    }  # fmt: skip
    assert summary["outbox"] == {
        "entries": 19, "malformed": 0, "pending": 6, "delivered": 10, "dead": 3,
    }  # fmt: skip


def test_the_scan_counts_and_reports_the_torn_tail(
    summary: dict[str, Any], plants: Planted
) -> None:
    log = summary["commitlog"]
    segments = sorted((plants.store / "commitlog").iterdir())
    assert log["segments"] == log["segments_scanned"] == len(segments) >= 3
    assert log["records"] == len(plants.records)
    assert log["system_topic_records"] == 3  # two %RETRY% copies, one transaction op record
    assert log["records_without_id"] == 1
    assert log["parked_records"] == 3
    assert log["kept_records"] == log["records"] - 4
    assert log["blank_bytes"] > 0
    assert sum(s["blank_bytes"] > 0 for s in log["per_segment"]) == len(segments) - 1
    [stop] = log["stops"]
    assert stop["segment"] == segments[-1].name
    assert stop["where"] == "torn tail"
    assert stop["kind"] == "CORRUPT"
    assert stop["reason"]
    last = log["per_segment"][-1]
    assert (
        stop["phy_offset"]
        == last["end_phy_offset"]
        == last["file_from_offset"] + last["scanned_bytes"]
    )
    assert log["gaps"] == []
    assert plants.torn_id in {r["message_id"] for r in summary["drill_down"]["lost"]}


def test_time_from_first_failure_to_delivery(summary: dict[str, Any], plants: Planted) -> None:
    latency = summary["delivery_latency"]
    assert latency["messages"] == len(plants.latencies_ms) == 10
    assert latency["max_ms"] == 90_000
    assert {(b["from_ms"], b["to_ms"]): b["messages"] for b in latency["histogram"]} == {
        (0, 1): 5, (200, 500): 1, (1_000, 2_000): 1, (2_000, 5_000): 1, (20_000, 30_000): 1,
        (60_000, 120_000): 1,
    }  # fmt: skip
    assert latency["per_topic"]["Payments"]["max_ms"] == 90_000
    assert latency["per_topic"]["Orders"]["max_ms"] == 0


def test_details_hold_every_message_once_with_its_outcome(
    summary: dict[str, Any], plants: Planted
) -> None:
    table = pq.read_table(summary["details"]["messages"])
    rows = table.select(["message_id", "outcome", "copies", "topic", "bucket_start_ms"]).to_pylist()
    assert len(rows) == len({r["message_id"] for r in rows}) == len(plants.plants)
    assert {r["message_id"]: r["outcome"] for r in rows} == {
        p.message_id: p.outcome for p in plants.plants
    }
    assert {r["message_id"]: r["copies"] for r in rows} == {
        p.message_id: p.copies for p in plants.plants
    }
    assert {r["message_id"]: r["bucket_start_ms"] for r in rows} == {
        p.message_id: T0 + p.bucket * BUCKET_MS for p in plants.plants
    }


def test_a_parquet_export_gives_the_same_summary(
    spark: SparkSession, plants: Planted, summary: dict[str, Any], tmp_path: Path
) -> None:
    again = reconcile(spark, plants, tmp_path / "out", outbox=plants.outbox_parquet)

    for key in ("totals", "per_topic", "per_bucket", "per_topic_bucket", "delivery_latency",
                "commitlog", "ledgers", "outbox"):  # fmt: skip
        assert again[key] == summary[key], key


def test_without_ledgers_no_topic_is_in_scope(
    spark: SparkSession, plants: Planted, tmp_path: Path
) -> None:
    alone = reconcile(spark, plants, tmp_path / "out", ledgers=())

    totals = alone["totals"]
    # Stored and in no outbox: unchecked, never unexpected, without a ledger to say otherwise.
    assert totals["unexpected"] == 0
    assert totals["unchecked"] == 40 + 4 + 20 + 2 + 5 + 30 + 2 + 1 + 2
    # Only the outbox's DELIVERED entry that is absent is lost; acknowledgements are unknown.
    assert totals["lost"] == 1
    assert (totals["pending"], totals["dead"], totals["recovered"]) == (5, 3, 5)
    assert alone["ledgers"]["lines"] == 0


def test_the_report_renders_its_charts_in_chromium(summary: dict[str, Any], tmp_path: Path) -> None:
    out = Path(summary["details"]["messages"]).parents[1]
    page = out / "report.html"
    assert json.loads((out / "summary.json").read_text())["totals"] == summary["totals"]
    png = tmp_path / "report.png"

    screenshot(page, png, tmp_path / "profile")
    dom = dump_dom(page, tmp_path / "profile")

    for this, following in zip(CHART_IDS, [*CHART_IDS[1:], None], strict=True):
        start = dom.index(f'id="{this}"')
        chart = dom[start : dom.index(f'id="{following}"') if following else None]
        assert chart.count('class="main-svg"') >= 2, this  # plotly's plot and its hover layer
        assert chart.count('class="point"') >= 3, this  # the bars it drew
        assert "js-plotly-plot" in chart, this
    image = read_png(png)
    assert image.shape[:2] == (1300, 1400)
    colours = len({tuple(p) for p in image[::4, ::4, :3].reshape(-1, 3).tolist()})
    assert colours > 50, "a blank or nearly blank screenshot"
    for category in ("ok", "lost", "recovered", "duplicated", "pending"):
        assert pixels_of(image, COLOURS[category]) > 50, category


def test_the_report_reads_plainly_in_chromium(summary: dict[str, Any], tmp_path: Path) -> None:
    """Counters with labels and meanings, ISO times, one legend order, tables within the page."""
    write_outputs(summary, tmp_path)
    page = measure(tmp_path / "report.html", tmp_path / "profile")
    facts = page.facts

    # Nothing wider than the window: a wide table scrolls inside its own box.
    assert facts["page_scroll_width_px"] <= facts["viewport_px"]
    assert facts["table_right_px"]
    assert max(facts["table_right_px"]) <= facts["viewport_px"]
    # A cell cut with an ellipsis carries its whole value as its title; message ids are never cut.
    for cell in facts["cut_cells"]:
        assert cell["title"] == cell["text"], cell
        assert "id" not in cell["kind"].split(), cell
    text = facts["visible_text"]
    for _, label, meaning in COUNTERS:
        assert f"{label}\n" in text or f"{label} " in text, label
        assert meaning in text, meaning
    # Beside the verdict, what is no loss although it may dwarf the charts.
    assert "2 unexpected: stored, never acknowledged — not a loss" in text
    assert "only lost is a loss; unexpected: stored, never acknowledged" in page.dom
    assert "duplicate_copies" not in text
    assert "event_time_ms" not in text
    # Times as ISO-8601 in UTC, in the drill-down and on the charts' time axes; no epoch ms left.
    assert "2026-01-01T00:00:50Z" in text
    assert EPOCH_MS.search(page.text_without_scripts()) is None
    assert page.ticks(CHART_IDS[0], CHART_IDS[1], "x")[0] == "2026-01-01T00:00Z"
    # One legend order on every chart, and whole numbers on every count axis.
    legends = [page.legend(c, f) for c, f in zip(CHART_IDS, [*CHART_IDS[1:], None], strict=True)]
    assert legends[0] == ["lost", "duplicated", "recovered", "unexpected", "pending", "dead"]
    assert legends[1] == ["lost", "recovered", "unexpected", "unchecked", "pending", "dead", "ok"]
    assert legends[2] == list(CATEGORY_ORDER)
    for chart, following in ((CHART_IDS[0], CHART_IDS[1]), (CHART_IDS[3], None)):
        ticks = page.ticks(chart, following, "y")
        assert ticks
        assert all(t.replace(",", "").isdigit() for t in ticks), ticks
        assert len(set(ticks)) == len(ticks), ticks  # no 0, 0, 1, 1 from fractional steps
    bins = page.ticks(CHART_IDS[3], None, "x")
    assert bins[:2] == [f"0{RANGE_DASH}1 ms", f"200{RANGE_DASH}500 ms"]


def test_every_chart_draws_a_category_in_its_one_colour(summary: dict[str, Any]) -> None:
    figures = [findings_chart(summary), outcomes_chart(summary, OUTCOMES),
               topics_chart(summary, OUTCOMES)]  # fmt: skip
    for fig in figures:
        names = [trace.name for trace in fig.data]
        assert names == ordered(names)
        for trace in fig.data:
            assert trace.marker.color == COLOURS[trace.name], trace.name


def test_many_long_topic_names_stay_readable(summary: dict[str, Any], tmp_path: Path) -> None:
    topic_count = 30
    many = copy.deepcopy(summary)
    template = many["per_topic"][0]
    many["per_topic"] = [
        template | {"topic": f"orders.payment-events.settlement-confirmations.tenant-{i:02d}",
                    "ok": 10 * i + 1}
        for i in range(topic_count)
    ]  # fmt: skip
    write_outputs(many, tmp_path)
    page = measure(tmp_path / "report.html", tmp_path / "profile")

    labels = page.ticks(CHART_IDS[2], CHART_IDS[3], "y")
    # Every topic named, each cut to a readable label (the hover holds the whole name).
    assert len(labels) == topic_count
    assert len(set(labels)) == topic_count
    assert all(len(label) <= TOPIC_LABEL_CHARS_MAX and "…" in label for label in labels)
    assert set(labels) == {topic_label(t["topic"]) for t in many["per_topic"]}
    # Two names that would read alike once cut keep their whole names instead.
    alike = ["a" * 40 + "-x-" + "b" * 40, "a" * 40 + "-y-" + "b" * 40, "short"]
    assert topic_labels(alike) == [*alike[:2], "short"]
    assert page.facts["page_scroll_width_px"] <= page.facts["viewport_px"]
    assert topics_chart(many, OUTCOMES).layout.height > CHART_HEIGHT_PX
