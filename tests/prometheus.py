"""Scraping a real process's Prometheus endpoint over HTTP, parsed with prometheus-client's own
text parser, as ``{(sample name, sorted labels): value}``."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_DEADLINE_S = 10.0
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=SCRAPE_DEADLINE_S) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metrics_port(output: str, line: re.Pattern[str]) -> int:
    """The port a process printed on its metrics line."""
    ports = [int(p) for p in line.findall(output)]
    assert len(ports) == 1, f"expected one {line.pattern!r} line in:\n{output}"
    return ports[0]


def sample(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when the series does not exist yet (a counter never incremented).
    Labels left out match any value when no series has exactly those given: the sum of the
    series that have them, as PromQL's ``sum`` (the outbox gauges' ``outbox`` label, say)."""
    key = (name, tuple(sorted(labels.items())))
    if key in samples:
        return samples[key]
    found = series(samples, name, **labels)
    return sum(found.values()) if found else 0.0


def series(samples: Samples, name: str, **labels: str) -> Samples:
    """The samples of ``name`` that have ``labels`` (and any others)."""
    wanted = set(labels.items())
    return {
        key: value for key, value in samples.items() if key[0] == name and wanted <= set(key[1])
    }
