"""Fixtures of the chart tests: one helm home per session, and helm/rocketbox rendered once per
module for each outbox choice (tests/helm/values/<outbox>.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.helm.chart import CHART, OUTBOX_TYPES, Doc, Helm, parse, values_file


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm-home"))


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base`` the way helm merges a values file over the chart's."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True)
class Rendered:
    outbox_type: str
    # The chart's values.yaml with the test's values file over it: what the templates saw.
    values: dict[str, Any]
    manifests: str
    docs: list[Doc]


@pytest.fixture(scope="module", params=OUTBOX_TYPES)
def rendered(request: pytest.FixtureRequest, helm: Helm) -> Rendered:
    outbox_type: str = request.param
    path = values_file(outbox_type)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    values = merge(defaults, yaml.safe_load(path.read_text()))
    assert values["outbox"]["type"] == outbox_type
    manifests = helm.render(CHART, path)
    return Rendered(outbox_type, values, manifests, parse(manifests))
