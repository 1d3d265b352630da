"""The chart's monitoring files as the tests read them: the Grafana dashboards, the alert rules as
rendered, every PromQL expression of both, promtool, and the metric names a real process exports.

promtool comes from Debian's ``prometheus`` package, which `make test` installs (apt-get) when
/usr/bin/promtool is missing; a test that finds none fails saying so, it never skips.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helm.chart import CHART, Doc

DASHBOARDS = CHART / "dashboards"
PROMTOOL_TIMEOUT_S = 60
SCRAPE_DEADLINE_S = 10.0
# Metrics the dashboard and the rules read that no rocketbox process exports, and why.
EXTERNAL_METRICS = {
    # The kubelet's volume stats: rocketbox measures no disk; the volumes' fill is the kubelet's.
    "kubelet_volume_stats_used_bytes": "kubelet",
    "kubelet_volume_stats_capacity_bytes": "kubelet",
}
# Labels Prometheus adds when it scrapes a pod (the ServiceMonitor's target labels), which a
# process's own /metrics never carries.
TARGET_LABELS = frozenset({"namespace", "pod", "job", "instance", "service", "container",
                           "endpoint"})  # fmt: skip


def dashboards() -> dict[str, dict[str, Any]]:
    found = {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}
    assert found, f"no dashboards in {DASHBOARDS}"
    return found


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    found: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def dashboard_exprs() -> list[tuple[str, str]]:
    """(where, expr) of every query of every dashboard."""
    return [
        (f"{name}: {panel['title']} {target['refId']}", target["expr"])
        for name, dashboard in dashboards().items()
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]


def rule_groups(docs: list[Doc]) -> list[dict[str, Any]]:
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def rule_exprs(docs: list[Doc]) -> list[tuple[str, str]]:
    return [
        (f"{g['name']}: {r.get('alert') or r.get('record')}", r["expr"])
        for g in rule_groups(docs)
        for r in g["rules"]
    ]


def promtool() -> Path:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed: `make test` installs Debian's prometheus (apt-get)")
    return Path(binary)


def promtool_check_rules(groups: list[dict[str, Any]], path: Path) -> str:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return promtool_run("check", "rules", str(path))


def promtool_run(*args: str) -> str:
    """promtool's output; it must exit 0."""
    done = subprocess.run(
        [str(promtool()), *args],
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def exported(port: int) -> dict[str, set[str]]:
    """{name: its label names} of what a process serves on /metrics: every sample's name, and a
    gauge's name even while it has no sample (a gauge of consumer groups before any consumed)."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=SCRAPE_DEADLINE_S) as response:
        text = response.read().decode()
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "gauge":
            names.setdefault(family.name, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names
