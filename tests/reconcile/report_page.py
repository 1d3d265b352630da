"""Reading report.html as Chromium lays it out: what a reader of the page sees, measured.

``measure`` copies the page with a small script added at its end that, once the charts are drawn,
writes into the DOM the layout facts a test needs (the viewport's width, the page's scroll width,
each table box's right edge, the cells cut by an ellipsis and their titles), then dumps the DOM
with headless Chromium at the screenshot's window size. The report itself carries no such script.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.reconcile.chromium import WINDOW_SIZE, chromium

_MEASURE_SCRIPT = """
<script>
window.addEventListener("load", () => setTimeout(() => {
  const cells = [...document.querySelectorAll("td")];
  const facts = {
    viewport_px: window.innerWidth,
    page_scroll_width_px: document.documentElement.scrollWidth,
    table_right_px: [...document.querySelectorAll(".table")].map(
      (t) => t.getBoundingClientRect().right),
    cut_cells: cells.filter((c) => c.scrollWidth > c.clientWidth).map(
      (c) => ({text: c.textContent, title: c.getAttribute("title"), kind: c.className})),
    visible_text: document.body.innerText,
  };
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
}, 200));
</script>
"""
_MEASURED = re.compile(r'<pre id="measured">(.*?)</pre>', re.S)
_LEGEND_TEXT = re.compile(r'class="legendtext"[^>]*data-unformatted="([^"]*)"')
_TICK = re.compile(r'class="([xy])tick"><text[^>]*data-unformatted="([^"]*)"')
_SCRIPT = re.compile(r"<script\b.*?</script>", re.S)
# Epoch milliseconds of this century, bare or with thousands separators (1767225600000,
# 1,767,225,600,000).
EPOCH_MS = re.compile(r"\b1[5-9]\d{11}\b|\b1,[5-9]\d{2},\d{3},\d{3},\d{3}\b")


@dataclass(frozen=True)
class Page:
    dom: str
    facts: dict[str, Any]

    def chart(self, chart_id: str, following: str | None) -> str:
        start = self.dom.index(f'id="{chart_id}"')
        return self.dom[start : self.dom.index(f'id="{following}"') if following else None]

    def legend(self, chart_id: str, following: str | None) -> list[str]:
        return _LEGEND_TEXT.findall(self.chart(chart_id, following))

    def ticks(self, chart_id: str, following: str | None, axis: str) -> list[str]:
        return [t for a, t in _TICK.findall(self.chart(chart_id, following)) if a == axis]

    def text_without_scripts(self) -> str:
        return html.unescape(_SCRIPT.sub("", self.dom))


def measure(page: Path, profile: Path) -> Page:
    measured = page.with_name(page.stem + ".measured.html")
    measured.write_text(
        page.read_text(encoding="utf-8").replace("</body>", _MEASURE_SCRIPT + "</body>"),
        encoding="utf-8",
    )
    width, height = WINDOW_SIZE
    dom = chromium(profile, "--dump-dom", f"--window-size={width},{height}", measured.as_uri())
    found = _MEASURED.search(dom)
    assert found, "the measuring script wrote nothing: did the page's scripts fail?"
    return Page(dom, json.loads(html.unescape(found.group(1))))
