"""Values that cannot work fail `helm template` with a message naming the value and the fix:
the schema refuses unknown keys at any depth and unknown outbox types (values.schema.json,
additionalProperties false), and templates/validate.yaml refuses the combinations that would lose
messages or mislead (a RocksDB outbox on an emptyDir, a Redis or MySQL outbox without its Secret,
a reconciliation that cannot see what it must compare, or whose Spark cluster's workers could
not, a cluster's impossible shapes). The
values files are in
tests/helm/values/bad/, each saying what is wrong with it.
"""

from __future__ import annotations

import pytest

from tests.helm.chart import CHART, VALUES, Helm, by_name, find, parse

pytestmark = pytest.mark.slow

BAD = VALUES / "bad"

# file → fragments helm's error must contain
EXPECTED = {
    "rocksdb-ephemeral": [
        "outbox.type=rocksdb needs a persistent volume",
        "every spooled message would be lost with the pod",
        "outbox.rocksdb.allowEphemeral=true",
    ],
    "redis-without-secret": [
        "outbox.type=redis needs the outbox URL from a Secret",
        "set outbox.redis.existingSecret",
        "redis://[:password@]host:port/db?prefix=NAME",
    ],
    "mysql-without-secret": [
        "outbox.type=mysql needs the outbox URL from a Secret",
        "set outbox.mysql.existingSecret",
        "mysql+pymysql://user:password@host:port/db?table=NAME",
    ],
    "unknown-top-level-key": [
        "values don't meet the specifications of the schema",
        "at '': additional properties 'brokers' not allowed",
    ],
    "unknown-nested-key": [
        "at '/outbox/rocksdb': additional properties 'persistance' not allowed",
    ],
    "auth-clock-skew": [
        "at '/broker/auth/clockSkewSeconds': maximum: got 500, want 449",
    ],
    "unknown-outbox-type": [
        "at '/outbox/type': value must be one of 'rocksdb', 'redis', 'mysql'",
    ],
    "rocksdb-replicas": [
        "exampleApp.replicas > 1 with outbox.type=rocksdb",
        "outbox.type=redis or mysql",
    ],
    "reconcile-rocksdb-without-export": [
        "reconcile with outbox.type=rocksdb",
        "reconcile.outboxExport.existingClaim",
    ],
    "reconcile-incremental-master": [
        "reconcile.master runs whole runs on a Spark cluster",
        "reconcile.incremental.enabled=false",
    ],
    "reconcile-incremental-ephemeral": [
        "reconcile.incremental keeps its checkpoint on the reports volume",
        "reconcile.reports.persistence",
    ],
    "reconcile-brokers": [
        "reconcile.commitlog.source=brokerVolume reads broker-0's store only",
        "broker.replicas > 1",
    ],
    "reconcile-master-without-shared-claim": [
        "reconcile.master runs the job's tasks on the Spark cluster's workers",
        "set reconcile.spark.sharedClaim to a ReadWriteMany claim",
        "reconcile.spark.sharedPath (/var/lib/rocketbox/shared)",
    ],
    "reconcile-master-broker-volume": [
        "reconcile.master with reconcile.commitlog.source=brokerVolume",
        "a ReadWriteOnce volume is attached to one node",
        "set reconcile.commitlog.source=sharedClaim",
    ],
    "reconcile-master-export-claim": [
        "reconcile.master with reconcile.outboxExport.existingClaim",
        "the Spark workers could not read the export",
        "Put the export on reconcile.spark.sharedClaim",
    ],
    "reconcile-master-reports-claim": [
        "reconcile.master writes the reports on reconcile.spark.sharedClaim",
        'set reconcile.reports.persistence.existingClaim="".',
    ],
    "reconcile-master-rocksdb-without-export": [
        "reconcile with outbox.type=rocksdb",
        "Put an outbox export (JSON lines or Parquet) on reconcile.spark.sharedClaim",
    ],
    "reconcile-shared-without-master": [
        "reconcile.commitlog.source=sharedClaim reads the Spark cluster's claim",
        "set reconcile.master to the cluster's spark://host:port",
    ],
    "cluster-no-groups": ["at '/broker/brokerGroups': minimum: got 0, want 1"],
    "cluster-unknown-role": [
        "at '/broker/role': value must be one of 'ASYNC_MASTER', 'SYNC_MASTER'",
    ],
    "cluster-replicas": [
        "broker.replicas must be 1 in a cluster",
        "broker.brokerGroups x (1 + broker.slavesPerGroup)",
    ],
    "client-ca-without-tls": [
        "sidecar.security.tls.clientCaSecret (mTLS) needs sidecar.security.tls.existingSecret",
    ],
    "rocketmq-port-clash": [
        "sidecar.rocketmq.port 8980 is also sidecar.port or sidecar.metricsPort",
        "each needs its own port",
    ],
    "rocketmq-bad-advertise": [
        "at '/sidecar/rocketmq/advertise': 'http://sidecar:8982' does not match pattern",
    ],
    "cluster-reconcile-rwo": [
        "reconcile.commitlog.source=brokerVolume in a cluster reads every broker's claim",
        "ReadWriteMany storage (broker.persistence.accessModes)",
        "brokers/<broker-name>-<broker-id>/commitlog",
    ],
}


def test_every_bad_values_file_is_tested() -> None:
    assert sorted(p.stem for p in BAD.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_values_fail_rendering_with_a_clear_message(helm: Helm, name: str) -> None:
    done = helm.template(CHART, BAD / f"{name}.yaml")
    assert done.returncode != 0, f"{name}.yaml rendered:\n{done.stdout}"
    assert done.stdout == ""
    message = " ".join(done.stderr.split())
    for fragment in EXPECTED[name]:
        assert fragment in message, f"{fragment!r} not in: {done.stderr}"


def test_allow_ephemeral_accepts_an_empty_dir_outbox(helm: Helm) -> None:
    docs = parse(
        helm.render(
            CHART,
            BAD / "rocksdb-ephemeral.yaml",
            sets=["outbox.rocksdb.allowEphemeral=true"],
        )
    )
    pod = find(docs, "Deployment", "rb-rocketbox-example-app")["spec"]["template"]["spec"]
    assert by_name(pod["volumes"], "rocketbox-outbox") == {
        "name": "rocketbox-outbox",
        "emptyDir": {},
    }
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]


def test_an_existing_claim_replaces_the_charts_outbox_claim(helm: Helm) -> None:
    docs = parse(
        helm.render(
            CHART,
            sets=["exampleApp.enabled=true", "outbox.rocksdb.persistence.existingClaim=my-outbox"],
        )
    )
    pod = find(docs, "Deployment", "rb-rocketbox-example-app")["spec"]["template"]["spec"]
    volume = by_name(pod["volumes"], "rocketbox-outbox")
    assert volume["persistentVolumeClaim"] == {"claimName": "my-outbox"}
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
