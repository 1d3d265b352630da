"""An app's own chart adds the sidecar by listing rocketbox as a dependency and including its
named templates: helm/examples/app-with-sidecar, the chart the README walks through.

Proves: `helm dependency build` resolves rocketbox from the repository (file://, offline); the
app renders with the sidecar as a native sidecar beside its own container, the outbox Secret by
env and a grace covering both shutdowns; rocketbox's own resources stay out of the app's release;
switching the app to a RocksDB outbox brings the claim along; with the sidecar's RocketMQ front
on, the app's container is handed its endpoint (ROCKETMQ_ENDPOINTS, 127.0.0.1:8982); rocketbox's
schema and rules apply to the app's `rocketbox:` values; the result passes helm lint --strict and
kubernetes-validate.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helm.chart import APP_CHART, CHART, KUBERNETES_VERSIONS, Helm, by_name, find, parse
from tests.helm.test_lint_validate import kubernetes_validate

pytestmark = pytest.mark.slow

RELEASE_NAME = "rb"  # tests/helm/chart.py renders every chart as release "rb"


@pytest.fixture(scope="module")
def app_chart(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example app chart with its dependency built, the repository untouched."""
    root = tmp_path_factory.mktemp("charts")
    # The same layout as the repository's, so the dependency's file://../../rocketbox resolves.
    shutil.copytree(CHART, root / "helm" / "rocketbox")
    chart = root / "helm" / "examples" / APP_CHART.name
    shutil.copytree(APP_CHART, chart)
    done = helm.run("dependency", "build", chart)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (chart / "charts" / "rocketbox-0.1.0.tgz").is_file()
    return chart


def test_the_app_runs_its_container_beside_the_sidecar(helm: Helm, app_chart: Path) -> None:
    docs = parse(helm.render(app_chart))
    assert [f"{d['kind']}/{d['metadata']['name']}" for d in docs] == [f"Deployment/{RELEASE_NAME}"]
    pod = find(docs, "Deployment", RELEASE_NAME)["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    assert sidecar["name"] == "rocketbox-sidecar"
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["startupProbe"]["grpc"]["port"] == 8980
    assert sidecar["readinessProbe"]["grpc"]["port"] == 8980
    assert "--broker=rocketbox-broker.messaging.svc.cluster.local:8081" in sidecar["args"]
    outbox = by_name(sidecar["env"], "ROCKETBOX_SIDECAR_OUTBOX")
    assert outbox["valueFrom"]["secretKeyRef"] == {"name": "orders-outbox", "key": "url"}
    assert [c["name"] for c in pod["containers"]] == ["orders"]
    # The app's 20 s, the sidecar's 10 s grace, a 5 s margin.
    assert pod["terminationGracePeriodSeconds"] == 35
    assert pod["securityContext"]["fsGroup"] == 10001


def test_the_rocketmq_front_gives_the_app_its_endpoint(helm: Helm, app_chart: Path) -> None:
    docs = parse(helm.render(app_chart, sets=["rocketbox.sidecar.rocketmq.enabled=true"]))
    pod = find(docs, "Deployment", RELEASE_NAME)["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    assert "--rocketmq-listen=0.0.0.0:8982" in sidecar["args"]
    (app,) = pod["containers"]
    assert by_name(app["env"], "ROCKETMQ_ENDPOINTS")["value"] == "127.0.0.1:8982"
    off = parse(helm.render(app_chart))
    (app,) = find(off, "Deployment", RELEASE_NAME)["spec"]["template"]["spec"]["containers"]
    assert "ROCKETMQ_ENDPOINTS" not in [e["name"] for e in app["env"]]


def test_a_rocksdb_outbox_brings_its_claim(helm: Helm, app_chart: Path) -> None:
    docs = parse(helm.render(app_chart, sets=["rocketbox.outbox.type=rocksdb", "replicas=1"]))
    pod = find(docs, "Deployment", RELEASE_NAME)["spec"]["template"]["spec"]
    claim = by_name(pod["volumes"], "rocketbox-outbox")["persistentVolumeClaim"]["claimName"]
    assert claim == f"{RELEASE_NAME}-rocketbox-outbox"
    assert find(docs, "PersistentVolumeClaim", claim)
    (sidecar,) = pod["initContainers"]
    assert by_name(sidecar["volumeMounts"], "rocketbox-outbox")["mountPath"] == (
        "/var/lib/rocketbox/sidecar"
    )


def test_rocketbox_rules_apply_to_the_apps_values(
    helm: Helm, app_chart: Path, tmp_path: Path
) -> None:
    missing_secret = helm.template(app_chart, sets=["rocketbox.outbox.mysql.existingSecret="])
    assert missing_secret.returncode != 0
    assert "set outbox.mysql.existingSecret" in missing_secret.stderr
    typo = helm.template(app_chart, sets=["rocketbox.sidecar.brokerz={a:1}"])
    assert typo.returncode != 0
    assert "additional properties 'brokerz' not allowed" in typo.stderr
    no_brokers_values = tmp_path / "no-brokers.yaml"
    no_brokers_values.write_text("rocketbox:\n  sidecar:\n    brokers: []\n")
    no_brokers = helm.template(app_chart, no_brokers_values)
    assert no_brokers.returncode != 0
    assert "sidecar.brokers: name the broker(s)" in no_brokers.stderr


def test_the_app_chart_lints_and_validates(helm: Helm, app_chart: Path, tmp_path: Path) -> None:
    done = helm.run("lint", "--strict", app_chart)
    assert done.returncode == 0, done.stdout + done.stderr
    docs = parse(helm.render(app_chart))
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate(docs, version, tmp_path)
