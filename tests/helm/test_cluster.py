"""helm/rocketbox rendering a cluster (tests/helm/values/cluster.yaml): two broker groups, each a
SYNC_MASTER and one slave, two NameServers, sidecars, the reconciliation, the monitoring.

Proves:
- a NameServer StatefulSet (`rocketbox namesrv --listen --metrics-listen`) with a headless
  Service, and a StatefulSet of one pod per broker, <broker>-<letter>-<id>, each with its own
  claim: a master's and a slave's volumes never meet, and no StatefulSet selects another's pods;
- every broker's command line, parsed by `rocketbox broker` itself: its cluster, group name, id
  and role, every NameServer pod's stable DNS name joined with ';', the HA listener on 10912, its
  own stable DNS name advertised, and a slave's master by its stable DNS name on 10912;
- a master Service per group, selecting its master only: the sidecars' --broker list;
- a group's brokers prefer different nodes, and a budget per group lets one of them go at a time
  (no pod under two budgets); NameServers prefer different nodes too;
- the ServiceMonitor scrapes the NameServers; the disk alert's and the dashboard's claim regexes
  match a cluster's claims; the reconciliation mounts and reads every broker's claim;
- the rendering passes `helm lint --strict` and `kubernetes-validate --strict`;
- namesrv.enabled alone makes a cluster of one group; the defaults stay one broker.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.helm.chart import (
    CHART,
    KUBERNETES_VERSIONS,
    NAMESPACE,
    VALUES,
    Doc,
    Helm,
    by_name,
    find,
    parse,
)
from tests.helm.monitoring import DASHBOARDS, rule_groups
from tests.helm.test_commands import parse as parse_command
from tests.helm.test_lint_validate import kubernetes_validate, without_custom_kinds
from tests.helm.test_render import APP, BROKER, HEADLESS, RECONCILE, SIDECAR, pod_spec, selects

pytestmark = pytest.mark.slow

FULLNAME = "rb-rocketbox"
NAMESRV = f"{FULLNAME}-namesrv"
NAMESRV_HEADLESS = f"{FULLNAME}-namesrv-headless"
CLUSTER_VALUES = VALUES / "cluster.yaml"
DOMAIN = f"{NAMESPACE}.svc.cluster.local"
# (group letter, broker id) of the rendered cluster: 2 groups x (master + 1 slave).
BROKERS = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
NAMESRV_ADDRESSES = [f"{NAMESRV}-{i}.{NAMESRV_HEADLESS}.{DOMAIN}:9876" for i in range(2)]
HA_PORT = 10912


def sts_name(letter: str, broker_id: int) -> str:
    return f"{BROKER}-{letter}-{broker_id}"


def pod_host(letter: str, broker_id: int) -> str:
    """The stable DNS name of a broker's one pod."""
    return f"{sts_name(letter, broker_id)}-0.{HEADLESS}.{DOMAIN}"


def pod_labels(doc: Doc) -> dict[str, str]:
    labels: dict[str, str] = doc["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.fixture(scope="module")
def docs(helm: Helm) -> list[Doc]:
    return parse(helm.render(CHART, CLUSTER_VALUES))


def names(docs: list[Doc], kind: str) -> list[str]:
    return sorted(d["metadata"]["name"] for d in docs if d["kind"] == kind)


def test_namesrvs_and_one_statefulset_per_broker(docs: list[Doc]) -> None:
    assert names(docs, "StatefulSet") == sorted([NAMESRV, *(sts_name(*b) for b in BROKERS)])
    assert names(docs, "Service") == sorted(
        [NAMESRV, NAMESRV_HEADLESS, BROKER, HEADLESS, f"{BROKER}-a", f"{BROKER}-b", APP]
    )
    assert names(docs, "PodDisruptionBudget") == [f"{BROKER}-a", f"{BROKER}-b", NAMESRV]
    claims = []
    for letter, broker_id in BROKERS:
        sts = find(docs, "StatefulSet", sts_name(letter, broker_id))
        assert sts["spec"]["replicas"] == 1
        assert sts["spec"]["serviceName"] == HEADLESS
        (template,) = sts["spec"]["volumeClaimTemplates"]
        # <template>-<statefulset>-<ordinal>: the broker's name and id are in its claim's name.
        claims.append(f"{template['metadata']['name']}-{sts['metadata']['name']}-0")
        others = [d for d in docs if d["kind"] == "StatefulSet" and d is not sts]
        for other in others:
            assert not selects(sts["spec"]["selector"]["matchLabels"], pod_labels(other))
    assert claims == [f"data-{sts_name(*b)}-0" for b in BROKERS]


def test_each_broker_command_line_names_its_place_in_the_cluster(
    docs: list[Doc], monkeypatch: pytest.MonkeyPatch
) -> None:
    for letter, broker_id in BROKERS:
        pod = pod_spec(find(docs, "StatefulSet", sts_name(letter, broker_id)))
        container = by_name(pod["containers"], "broker")
        p = parse_command("broker", container, "redis", monkeypatch).params
        assert p["broker_cluster_name"] == "DefaultCluster"
        assert p["broker_name"] == f"broker-{letter}"
        assert p["broker_id"] == broker_id
        assert p["broker_role"] == ("SYNC_MASTER" if broker_id == 0 else "SLAVE")
        assert list(p["namesrv_addr"]) == NAMESRV_ADDRESSES
        assert (p["ha_listen"].host, p["ha_listen"].port) == ("0.0.0.0", HA_PORT)
        assert p["advertise_host"] == pod_host(letter, broker_id)
        master = None if broker_id == 0 else f"{pod_host(letter, 0)}:{HA_PORT}"
        assert p["ha_master_address"] == master
        assert by_name(container["ports"], "ha")["containerPort"] == HA_PORT


def test_the_namesrvs_answer_on_their_stable_names(
    docs: list[Doc], monkeypatch: pytest.MonkeyPatch
) -> None:
    sts = find(docs, "StatefulSet", NAMESRV)
    assert sts["spec"]["replicas"] == len(NAMESRV_ADDRESSES)
    assert sts["spec"]["serviceName"] == NAMESRV_HEADLESS
    headless = find(docs, "Service", NAMESRV_HEADLESS)
    assert headless["spec"]["clusterIP"] == "None"
    assert selects(headless["spec"]["selector"], pod_labels(sts))
    container = by_name(pod_spec(sts)["containers"], "namesrv")
    # Parsed by the real `rocketbox namesrv`: the chart's flags are the command's.
    p = parse_command("namesrv", container, "redis", monkeypatch).params
    assert (p["listen"].host, p["listen"].port) == ("0.0.0.0", 9876)
    assert (p["metrics_listen"].host, p["metrics_listen"].port) == ("0.0.0.0", 9110)
    assert by_name(container["ports"], "namesrv")["containerPort"] == 9876
    assert "volumeClaimTemplates" not in sts["spec"]  # soft state: brokers register again
    # The ServiceMonitor's selector takes the NameServers' Service and its metrics port.
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    service = find(docs, "Service", NAMESRV)
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    metrics = by_name(service["spec"]["ports"], "metrics")
    assert by_name(container["ports"], metrics["targetPort"])["containerPort"] == 9110
    term = pod_spec(sts)["affinity"]["podAntiAffinity"]
    (preferred,) = term["preferredDuringSchedulingIgnoredDuringExecution"]
    assert selects(preferred["podAffinityTerm"]["labelSelector"]["matchLabels"], pod_labels(sts))


def test_sidecars_send_to_every_groups_master(docs: list[Doc]) -> None:
    pod = pod_spec(find(docs, "Deployment", APP))
    args = by_name(pod["initContainers"], SIDECAR)["args"]
    brokers = [a.removeprefix("--broker=") for a in args if a.startswith("--broker=")]
    assert brokers == [f"{BROKER}-a.{DOMAIN}:8081", f"{BROKER}-b.{DOMAIN}:8081"]
    for letter in "ab":
        selector = find(docs, "Service", f"{BROKER}-{letter}")["spec"]["selector"]
        selected = [
            (lt, i)
            for lt, i in BROKERS
            if selects(selector, pod_labels(find(docs, "StatefulSet", sts_name(lt, i))))
        ]
        assert selected == [(letter, 0)]


def test_a_groups_brokers_prefer_different_nodes_and_leave_one_at_a_time(
    docs: list[Doc],
) -> None:
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for letter, broker_id in BROKERS:
        sts = find(docs, "StatefulSet", sts_name(letter, broker_id))
        anti = pod_spec(sts)["affinity"]["podAntiAffinity"]
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
        (preferred,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
        assert preferred["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        spread = preferred["podAffinityTerm"]["labelSelector"]["matchLabels"]
        kept_apart = [
            b
            for b in BROKERS
            if selects(spread, pod_labels(find(docs, "StatefulSet", sts_name(*b))))
        ]
        assert kept_apart == [(letter, 0), (letter, 1)]
        # Exactly one budget per pod (the eviction API refuses a pod under two).
        (budget,) = [
            b for b in budgets if selects(b["spec"]["selector"]["matchLabels"], pod_labels(sts))
        ]
        assert budget["metadata"]["name"] == f"{BROKER}-{letter}"
        assert budget["spec"]["maxUnavailable"] == 1


def test_the_claim_regexes_match_a_clusters_claims(docs: list[Doc]) -> None:
    claims = [f"data-{sts_name(*b)}-0" for b in BROKERS]
    rules = [r for g in rule_groups(docs) for r in g["rules"]]
    disk = next(r for r in rules if r["alert"] == "RocketboxDiskUsedRatioHigh")
    (regex,) = set(re.findall(r'persistentvolumeclaim=~"([^"]+)"', disk["expr"]))
    dashboard = json.loads((DASHBOARDS / "rocketbox.json").read_text())
    (textbox,) = [v for v in dashboard["templating"]["list"] if v["name"] == "claims"]
    for pattern in (regex, textbox["query"]):
        # Prometheus anchors a regex matcher at both ends.
        assert all(re.fullmatch(pattern, c) for c in claims), pattern
        assert re.fullmatch(pattern, "app-rocketbox-outbox"), pattern
        assert not re.fullmatch(pattern, "data-postgres-0"), pattern
    # The dashboard serves every release: a single broker's claims too.
    assert re.fullmatch(textbox["query"], f"data-{BROKER}-0")
    lag = next(r for r in rules if r["alert"] == "RocketboxReplicationLagHigh")
    assert lag["expr"].endswith(f"> {64 * 1024 * 1024}")
    assert lag["for"] == "5m"


def test_the_reconciliation_reads_every_brokers_claim(docs: list[Doc]) -> None:
    pod = pod_spec(find(docs, "CronJob", RECONCILE))
    container = by_name(pod["containers"], "reconcile")
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    read = [
        a.removeprefix("--commitlog=") for a in container["args"] if a.startswith("--commitlog")
    ]
    assert read == [f"/var/lib/rocketbox/brokers/broker-{lt}-{i}/commitlog" for lt, i in BROKERS]
    for letter, broker_id in BROKERS:
        name = f"store-{letter}-{broker_id}"
        assert (
            mounts[name]["mountPath"] == f"/var/lib/rocketbox/brokers/broker-{letter}-{broker_id}"
        )
        assert mounts[name]["readOnly"] is True
        claim = volumes[name]["persistentVolumeClaim"]
        assert claim == {"claimName": f"data-{sts_name(letter, broker_id)}-0", "readOnly": True}
    # ReadWriteMany claims mount on any node: no affinity to one broker's.
    assert "affinity" not in pod


def test_a_cluster_copy_is_read_as_rocketbox_up_lays_it_out(helm: Helm) -> None:
    docs = parse(
        helm.render(
            CHART,
            CLUSTER_VALUES,
            sets=[
                "reconcile.commitlog.source=existingClaim",
                "reconcile.commitlog.existingClaim=store-copies",
            ],
        )
    )
    pod = pod_spec(find(docs, "CronJob", RECONCILE))
    args = by_name(pod["containers"], "reconcile")["args"]
    assert "--data-dir=/var/lib/rocketbox/broker" in args
    assert not [a for a in args if a.startswith("--commitlog")]
    claim = by_name(pod["volumes"], "store")["persistentVolumeClaim"]
    assert claim == {"claimName": "store-copies", "readOnly": True}


def test_lint_and_kubernetes_validate_pass(helm: Helm, docs: list[Doc], tmp_path: Any) -> None:
    done = helm.run("lint", "--strict", CHART, "--values", CLUSTER_VALUES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate(without_custom_kinds(docs), version, tmp_path)


def test_namesrv_enabled_alone_makes_a_cluster_of_one_group(helm: Helm) -> None:
    docs = parse(helm.render(CHART, sets=["namesrv.enabled=true"]))
    assert names(docs, "StatefulSet") == [f"{BROKER}-a-0", NAMESRV]
    args = by_name(pod_spec(find(docs, "StatefulSet", f"{BROKER}-a-0"))["containers"], "broker")
    assert "--broker-role=ASYNC_MASTER" in args["args"]
    assert f"--namesrv={';'.join(NAMESRV_ADDRESSES)}" in args["args"]
    # The defaults: one broker, no NameServer, no cluster flag.
    plain = parse(helm.render(CHART))
    assert names(plain, "StatefulSet") == [BROKER]
    broker = by_name(pod_spec(find(plain, "StatefulSet", BROKER))["containers"], "broker")
    assert not [a for a in broker["args"] if a.startswith(("--broker-", "--namesrv", "--ha-"))]
    assert "affinity" not in pod_spec(find(plain, "StatefulSet", BROKER))
