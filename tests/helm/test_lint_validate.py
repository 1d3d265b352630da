"""helm/rocketbox passes `helm lint --strict` with its defaults and with each outbox choice, and
what it renders passes `kubernetes-validate --strict` (unknown fields rejected) for the oldest
Kubernetes the chart supports and the newest the validator knows.

kubernetes-validate has no schema for custom resources, so the ServiceMonitor and the
PrometheusRule (monitoring.coreos.com/v1) are left out of its input; test_render.py checks the
first one's shape and that it selects the metrics Services, test_monitoring.py the second's.
Every other kind must validate: a kind without a schema (a warning) fails the test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    CUSTOM_KINDS,
    KUBERNETES_VALIDATE,
    KUBERNETES_VERSIONS,
    OUTBOX_TYPES,
    Helm,
    parse,
    values_file,
)
from tests.helm.conftest import Rendered

pytestmark = pytest.mark.slow

VALIDATE_TIMEOUT_S = 120


def kubernetes_validate(docs: list[dict[str, object]], version: str, tmp_path: Path) -> None:
    assert docs, "nothing to validate"
    path = tmp_path / f"manifests-{version}.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    done = subprocess.run(
        [str(KUBERNETES_VALIDATE), "--strict", "--quiet", "--kubernetes-version", version, path],
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S,
        check=False,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    # --quiet prints only warnings and failures: a kind it has no schema for is a warning.
    assert report.strip() == "", report


def without_custom_kinds(docs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [d for d in docs if (d["apiVersion"], d["kind"]) not in CUSTOM_KINDS]


@pytest.mark.parametrize("outbox_type", [None, *OUTBOX_TYPES], ids=["defaults", *OUTBOX_TYPES])
def test_helm_lint_strict_passes(helm: Helm, outbox_type: str | None) -> None:
    values: list[str | Path] = [] if outbox_type is None else ["--values", values_file(outbox_type)]
    done = helm.run("lint", "--strict", CHART, *values)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout
    assert "[WARNING]" not in done.stdout
    assert "[ERROR]" not in done.stdout


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_manifests_validate_strictly(
    rendered: Rendered, version: str, tmp_path: Path
) -> None:
    kinds = {d["kind"] for d in rendered.docs}
    assert kinds >= {"StatefulSet", "Service", "PodDisruptionBudget", "Deployment", "CronJob"}
    assert {"ServiceMonitor", "PrometheusRule", "ConfigMap"} <= kinds
    kubernetes_validate(without_custom_kinds(rendered.docs), version, tmp_path)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_defaults_render_the_broker_alone_and_validate(
    helm: Helm, version: str, tmp_path: Path
) -> None:
    docs = parse(helm.render(CHART))
    assert sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs) == [
        "PodDisruptionBudget/rb-rocketbox-broker",
        "Secret/rb-rocketbox-broker-auth",
        "Service/rb-rocketbox-broker",
        "Service/rb-rocketbox-broker-headless",
        "StatefulSet/rb-rocketbox-broker",
    ]
    kubernetes_validate(docs, version, tmp_path)
