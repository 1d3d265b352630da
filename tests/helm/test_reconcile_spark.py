"""``reconcile.master`` on a Spark cluster (tests/helm/values/reconcile-spark.yaml): the CronJob's
pod is Spark's driver in client mode, the executors run on the cluster's workers.

Proves:
- the command line, parsed by `rocketbox reconcile` itself, reads the store's copy and the outbox
  export on the shared claim and runs on the master; the wrapper writes the reports there too:
  every path a run reads or writes is under the one claim the workers mount at the same path,
  the only claim the pod mounts (writable), and no reports claim of the pod's own is made;
- the executors can reach the driver: it listens on the pod's IP (the downward API's
  status.podIP as SPARK_LOCAL_IP and spark.driver.host) on the fixed driver and block manager
  ports the container declares; they run the tasks with the values' Python (PYSPARK_PYTHON);
- a cluster of brokers is read from the shared claim as `rocketbox up` lays its stores out;
- the rendering passes `helm lint --strict` and `kubernetes-validate --strict`;
- a local[N] master stays in the pod (loopback, the reports claim), no shared claim asked for.
The values that cannot work on a cluster are refused: test_bad_values.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helm.chart import CHART, KUBERNETES_VERSIONS, VALUES, Doc, Helm, by_name, find, parse
from tests.helm.test_commands import parse as parse_command
from tests.helm.test_lint_validate import kubernetes_validate, without_custom_kinds
from tests.helm.test_render import RECONCILE, env, pod_spec

pytestmark = pytest.mark.slow

SPARK_VALUES = VALUES / "reconcile-spark.yaml"
SHARED = "/var/lib/rocketbox/shared"
MASTER = "spark://spark-master.spark.svc.cluster.local:7077"


def reconcile_pod(docs: list[Doc]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = pod_spec(find(docs, "CronJob", RECONCILE))
    return pod, by_name(pod["containers"], "reconcile")


@pytest.fixture(scope="module")
def docs(helm: Helm) -> list[Doc]:
    return parse(helm.render(CHART, SPARK_VALUES))


def test_on_a_spark_cluster_every_path_is_on_the_shared_claim(
    docs: list[Doc], monkeypatch: pytest.MonkeyPatch
) -> None:
    pod, container = reconcile_pod(docs)
    out = f"{SHARED}/reports/20260101T000000Z"
    ctx = parse_command("reconcile", {**container, "args": [*container["args"], "--out", out]},
                        "rocksdb", monkeypatch)  # fmt: skip
    p = ctx.params
    assert [str(c) for c in p["commitlogs"]] == [f"{SHARED}/commitlog"]
    assert p["outbox_source"] == f"{SHARED}/exports/outbox.parquet"
    assert p["master"] == MASTER
    assert p["checkpoint"] is None
    # The wrapper's --out: a directory per run under the shared claim's reports/.
    script = container["command"][2]
    assert f"reports={SHARED}/reports\n" in script
    assert 'mkdir -p "$reports"' in script
    # The one claim, writable (the executors write the report's tables), at the same path the
    # workers mount it; beside it only the pod's scratch space.
    assert container["volumeMounts"] == [
        {"name": "shared", "mountPath": SHARED},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    assert pod["volumes"] == [
        {"name": "shared", "persistentVolumeClaim": {"claimName": "reconcile-shared"}},
        {"name": "tmp", "emptyDir": {}},
    ]
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert "affinity" not in pod


def test_the_executors_reach_the_driver_at_the_pods_ip_on_fixed_ports(docs: list[Doc]) -> None:
    _, container = reconcile_pod(docs)
    variables = env(container)
    assert variables["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # Defined after POD_IP: the kubelet expands $(POD_IP) in it, and in the args.
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_IP") < names.index("SPARK_LOCAL_IP")
    assert variables["SPARK_LOCAL_IP"]["value"] == "$(POD_IP)"
    assert variables["PYSPARK_PYTHON"]["value"] == "/opt/rocketbox/bin/python"
    conf = [a.removeprefix("--conf=") for a in container["args"] if a.startswith("--conf=")]
    assert conf == [
        "spark.driver.host=$(POD_IP)",
        "spark.driver.port=7078",
        "spark.driver.blockManager.port=7079",
    ]
    assert container["ports"] == [
        {"name": "spark-driver", "containerPort": 7078},
        {"name": "spark-blocks", "containerPort": 7079},
    ]


def test_a_cluster_of_brokers_is_read_from_the_shared_claim(helm: Helm) -> None:
    docs = parse(helm.render(CHART, SPARK_VALUES, sets=["broker.brokerGroups=2"]))
    _, container = reconcile_pod(docs)
    assert f"--data-dir={SHARED}" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--commitlog")]


def test_lint_and_kubernetes_validate_pass(helm: Helm, docs: list[Doc], tmp_path: Path) -> None:
    done = helm.run("lint", "--strict", CHART, "--values", SPARK_VALUES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate(without_custom_kinds(docs), version, tmp_path)


def test_a_local_master_stays_in_the_pod(helm: Helm) -> None:
    docs = parse(
        helm.render(
            CHART,
            sets=[
                "reconcile.enabled=true",
                "reconcile.master=local[4]",
                "reconcile.incremental.enabled=false",
                "reconcile.outboxExport.existingClaim=exports",
                "reconcile.outboxExport.path=outbox.parquet",
            ],
        )
    )
    pod, container = reconcile_pod(docs)
    assert "--master=local[4]" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--conf=")]
    assert env(container)["SPARK_LOCAL_IP"]["value"] == "127.0.0.1"
    assert "PYSPARK_PYTHON" not in env(container)
    assert "ports" not in container
    assert by_name(pod["volumes"], "reports")["persistentVolumeClaim"] == {
        "claimName": f"{RECONCILE}-reports"
    }
    assert "shared" not in [v["name"] for v in pod["volumes"]]
