"""What helm/rocketbox renders, for each outbox choice (rocksdb, redis, mysql).

Proves: the example app's pod runs the sidecar as a native sidecar (an initContainers entry with
restartPolicy Always) with gRPC startup and readiness probes on its port and a termination grace
that covers the app's shutdown and the sidecar's; the outbox reaches the sidecar as the choice
requires (a claim for RocksDB, the URL from a Secret by env for Redis and MySQL, never as an
argument); the broker is a StatefulSet with a claim per pod, a headless and a client Service and a
PodDisruptionBudget; every pod runs as the image's non-root user; the ServiceMonitor finds every
metrics port; the reconciliation CronJob reads the store read-only from where the values say.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.helm.chart import NAMESPACE, Doc, by_name, find
from tests.helm.conftest import Rendered

pytestmark = pytest.mark.slow

FULLNAME = "rb-rocketbox"
BROKER = f"{FULLNAME}-broker"
HEADLESS = f"{FULLNAME}-broker-headless"
APP = f"{FULLNAME}-example-app"
RECONCILE = f"{FULLNAME}-reconcile"
SIDECAR = "rocketbox-sidecar"
SIDECAR_MOUNT = "/var/lib/rocketbox/sidecar"
STORE_MOUNT = "/var/lib/rocketbox/broker"
POD_KINDS = ("Deployment", "StatefulSet", "CronJob")


def pod_spec(doc: Doc) -> dict[str, Any]:
    owner = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    spec: dict[str, Any] = owner["template"]["spec"]
    return spec


def app_pod(r: Rendered) -> dict[str, Any]:
    return pod_spec(find(r.docs, "Deployment", APP))


def sidecar(r: Rendered) -> dict[str, Any]:
    return by_name(app_pod(r)["initContainers"], SIDECAR)


def env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# -- the sidecar beside the example app ----------------------------------------------------------


def test_the_sidecar_is_a_native_sidecar_of_the_app_pod(rendered: Rendered) -> None:
    pod = app_pod(rendered)
    assert [c["name"] for c in pod["initContainers"]] == [SIDECAR]
    assert pod["initContainers"][0]["restartPolicy"] == "Always"
    assert [c["name"] for c in pod["containers"]] == ["app"]
    assert pod["initContainers"][0]["args"][0] == "sidecar"
    # Kubernetes' service links would inject ROCKETBOX_*-looking variables into rocketbox.
    assert pod["enableServiceLinks"] is False


def test_sidecar_probes_ask_grpc_health_on_the_sidecar_port(rendered: Rendered) -> None:
    port = rendered.values["sidecar"]["port"]
    c = sidecar(rendered)
    assert by_name(c["ports"], "sidecar-grpc")["containerPort"] == port
    assert f"--listen=0.0.0.0:{port}" in c["args"]  # the kubelet dials the pod's IP
    for probe in ("startupProbe", "readinessProbe"):
        assert c[probe]["grpc"] == {"port": port, "service": ""}, probe
    # Startup allows sidecar.startupTimeoutSeconds for the outbox to become writable.
    startup = c["startupProbe"]
    timeout_s = rendered.values["sidecar"]["startupTimeoutSeconds"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= timeout_s
    assert "livenessProbe" not in c
    app = by_name(app_pod(rendered)["containers"], "app")
    assert env(app)["SIDECAR"]["value"] == f"127.0.0.1:{port}"


def test_termination_grace_covers_the_app_then_the_sidecar(rendered: Rendered) -> None:
    grace_ms = rendered.values["sidecar"]["shutdownGraceMs"]
    assert f"--shutdown-grace-ms={grace_ms}" in sidecar(rendered)["args"]
    expected_s = (
        rendered.values["exampleApp"]["shutdownSeconds"]
        + math.ceil(grace_ms / 1000)
        + rendered.values["sidecar"]["shutdownMarginSeconds"]
    )
    grace_s = app_pod(rendered)["terminationGracePeriodSeconds"]
    assert grace_s == expected_s
    assert grace_s > grace_ms / 1000


def test_the_outbox_reaches_the_sidecar_as_the_choice_requires(rendered: Rendered) -> None:
    pod = app_pod(rendered)
    c = sidecar(rendered)
    url = env(c)["ROCKETBOX_SIDECAR_OUTBOX"]
    assert not [a for a in c["args"] if a.startswith("--outbox")]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    strategy = find(rendered.docs, "Deployment", APP)["spec"].get("strategy", {})
    if rendered.outbox_type == "rocksdb":
        assert url["value"] == f"rocksdb://{SIDECAR_MOUNT}/outbox"
        assert mounts["rocketbox-outbox"] == SIDECAR_MOUNT
        claim_name = volumes["rocketbox-outbox"]["persistentVolumeClaim"]["claimName"]
        claim = find(rendered.docs, "PersistentVolumeClaim", claim_name)
        assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
        assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        # One sidecar holds a RocksDB outbox: the old pod lets go before the new one starts.
        assert strategy == {"type": "Recreate"}
    else:
        secret = rendered.values["outbox"][rendered.outbox_type]
        assert url["valueFrom"]["secretKeyRef"] == {
            "name": secret["existingSecret"],
            "key": secret["secretKey"],
        }
        assert "rocketbox-outbox" not in mounts
        assert "rocketbox-outbox" not in volumes
        assert "redis://" not in rendered.manifests
        assert "mysql+pymysql://" not in rendered.manifests
        assert "strategy" not in find(rendered.docs, "Deployment", APP)["spec"]


# -- the broker ---------------------------------------------------------------------------------


def test_the_broker_keeps_its_store_on_a_claim_per_pod(rendered: Rendered) -> None:
    sts = find(rendered.docs, "StatefulSet", BROKER)
    (template,) = sts["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "data"
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert template["spec"]["resources"]["requests"]["storage"] == "20Gi"
    broker = by_name(pod_spec(sts)["containers"], "broker")
    assert by_name(broker["volumeMounts"], "data")["mountPath"] == STORE_MOUNT
    assert broker["args"][0] == "broker"
    assert f"--data-dir={STORE_MOUNT}" in broker["args"]
    assert "--no-auto-create-topic" in broker["args"]
    # The example app's topic exists before the app sends to it.
    assert "--topic=rocketbox-example:8:NORMAL" in broker["args"]
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert broker[probe]["grpc"] == {"port": 8081, "service": ""}, probe
    assert broker["resources"]["requests"]
    assert broker["resources"]["limits"]


def test_the_broker_has_a_headless_and_a_client_service(rendered: Rendered) -> None:
    sts = find(rendered.docs, "StatefulSet", BROKER)
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert selects(sts["spec"]["selector"]["matchLabels"], pod_labels)
    headless = find(rendered.docs, "Service", HEADLESS)
    client = find(rendered.docs, "Service", BROKER)
    assert headless["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == HEADLESS
    assert client["spec"]["type"] == "ClusterIP"
    for service in (headless, client):
        assert selects(service["spec"]["selector"], pod_labels)
        assert by_name(service["spec"]["ports"], "grpc")["port"] == 8081
    # Routes advertise each pod by its DNS name under the headless Service.
    args = by_name(pod_spec(sts)["containers"], "broker")["args"]
    advertise = f"--advertise-host=$(POD_NAME).{HEADLESS}.$(POD_NAMESPACE).svc.cluster.local"
    assert advertise in args
    # ...and the example app's sidecar starts from the client Service.
    assert f"--broker={BROKER}.{NAMESPACE}.svc.cluster.local:8081" in sidecar(rendered)["args"]


def test_a_disruption_budget_covers_the_broker_pods(rendered: Rendered) -> None:
    pdb = find(rendered.docs, "PodDisruptionBudget", BROKER)
    sts = find(rendered.docs, "StatefulSet", BROKER)
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 1


# -- every pod ----------------------------------------------------------------------------------


def test_every_pod_runs_as_the_images_non_root_user(rendered: Rendered) -> None:
    user = rendered.values["securityContext"]["runAsUser"]
    assert user != 0
    pods = [d for d in rendered.docs if d["kind"] in POD_KINDS]
    assert sorted(d["kind"] for d in pods) == ["CronJob", "Deployment", "StatefulSet"]
    for doc in pods:
        pod = pod_spec(doc)
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] == user, where
        assert pod["automountServiceAccountToken"] is False, where
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, (where, c["name"])
            assert sc["allowPrivilegeEscalation"] is False, (where, c["name"])
            assert sc["readOnlyRootFilesystem"] is True, (where, c["name"])
            assert sc["capabilities"] == {"drop": ["ALL"]}, (where, c["name"])
            assert c["resources"]["requests"]["memory"], (where, c["name"])
            assert c["image"] == "rocketbox:0.1.0", (where, c["name"])


def test_every_rocketbox_process_logs_json(rendered: Rendered) -> None:
    containers = [
        by_name(pod_spec(find(rendered.docs, "StatefulSet", BROKER))["containers"], "broker"),
        sidecar(rendered),
        by_name(pod_spec(find(rendered.docs, "CronJob", RECONCILE))["containers"], "reconcile"),
    ]
    for c in containers:
        assert env(c)["ROCKETBOX_LOG_FORMAT"]["value"] == "json", c["name"]


def test_the_service_monitor_finds_every_metrics_port(rendered: Rendered) -> None:
    (monitor,) = [d for d in rendered.docs if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == "rb"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        d
        for d in rendered.docs
        if d["kind"] == "Service" and selects(selector, d["metadata"]["labels"])
    ]
    assert sorted(s["metadata"]["name"] for s in services) == [BROKER, APP]
    # Each selected Service's metrics port leads to a container port the process serves.
    workloads = {BROKER: ("StatefulSet", "broker"), APP: ("Deployment", SIDECAR)}
    for service in services:
        port = by_name(service["spec"]["ports"], "metrics")
        kind, container_name = workloads[service["metadata"]["name"]]
        pod = pod_spec(find(rendered.docs, kind, service["metadata"]["name"]))
        c = by_name(pod["containers"] + pod.get("initContainers", []), container_name)
        container_port = by_name(c["ports"], port["targetPort"])["containerPort"]
        assert f"--metrics-listen=0.0.0.0:{container_port}" in c["args"]


# -- the reconciliation -------------------------------------------------------------------------


def test_the_reconciliation_reads_the_store_read_only(rendered: Rendered) -> None:
    cron = find(rendered.docs, "CronJob", RECONCILE)
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    pod = pod_spec(cron)
    c = by_name(pod["containers"], "reconcile")
    assert c["args"][0] == "reconcile"
    assert f"--commitlog={STORE_MOUNT}/commitlog" in c["args"]
    store_mount = by_name(c["volumeMounts"], "store")
    assert store_mount == {"name": "store", "mountPath": STORE_MOUNT, "readOnly": True}
    claim = by_name(pod["volumes"], "store")["persistentVolumeClaim"]
    assert claim["readOnly"] is True
    if rendered.values["reconcile"]["commitlog"]["source"] == "brokerVolume":
        # broker-0's own claim, on broker-0's node.
        assert claim["claimName"] == f"data-{BROKER}-0"
        (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        pod_name = term["labelSelector"]["matchLabels"]["statefulset.kubernetes.io/pod-name"]
        assert pod_name == f"{BROKER}-0"
    else:
        assert claim["claimName"] == rendered.values["reconcile"]["commitlog"]["existingClaim"]
        assert "affinity" not in pod
    if rendered.outbox_type == "rocksdb":
        export = rendered.values["reconcile"]["outboxExport"]
        assert f"--outbox=/var/lib/rocketbox/outbox-export/{export['path']}" in c["args"]
        volume = by_name(pod["volumes"], "outbox-export")["persistentVolumeClaim"]
        assert volume == {"claimName": export["existingClaim"], "readOnly": True}
    else:
        assert "--outbox=$(RECONCILE_OUTBOX)" in c["args"]
        secret = rendered.values["outbox"][rendered.outbox_type]
        assert env(c)["RECONCILE_OUTBOX"]["valueFrom"]["secretKeyRef"] == {
            "name": secret["existingSecret"],
            "key": secret["secretKey"],
        }
    # Reports go to a new directory per run on the chart's claim.
    reports = by_name(pod["volumes"], "reports")["persistentVolumeClaim"]["claimName"]
    assert find(rendered.docs, "PersistentVolumeClaim", reports)
    assert '--out "$reports/' in c["command"][2]
