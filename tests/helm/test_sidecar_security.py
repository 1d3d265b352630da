"""The sidecar's security in the chart (sidecar.security, docs/security.md): off by default;
each part on wires its Secret into the sidecar as mounted files or secretKeyRef environment
variables, never as a value in the manifest, and the result validates strictly.

Proves: by default no security flag, mount or variable, and the probes check the app port;
TLS mounts the kubernetes.io/tls Secret, passes --tls-cert/--tls-key, serves plaintext health
on healthPort and points both probes there (the kubelet's gRPC probes cannot speak TLS); mTLS
adds --tls-client-ca from its Secret; the token is a mounted file (--token-file); the broker's
TLS and CA are flags and a mount; the broker credentials are ROCKETBOX_BROKER_ACCESS_KEY and
ROCKETBOX_BROKER_SECRET_KEY from their Secret's keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helm.chart import CHART, KUBERNETES_VERSIONS, Helm, by_name, find, parse
from tests.helm.test_lint_validate import kubernetes_validate, without_custom_kinds

pytestmark = pytest.mark.slow

APP = "rb-rocketbox-example-app"
SIDECAR = "rocketbox-sidecar"
ALL_ON = [
    "exampleApp.enabled=true",
    "sidecar.security.tls.existingSecret=sidecar-tls",
    "sidecar.security.tls.clientCaSecret=apps-ca",
    "sidecar.security.token.existingSecret=sidecar-token",
    "sidecar.security.broker.tls=true",
    "sidecar.security.broker.caSecret=broker-ca",
    "sidecar.security.broker.credentialsSecret=broker-credentials",
]
SECURITY_FLAGS = ("--tls", "--token", "--health-listen", "--broker-tls")


def pod_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = find(docs, "Deployment", APP)["spec"]["template"]["spec"]
    return pod


def test_security_is_off_by_default(helm: Helm) -> None:
    """The sidecar's own TLS and token are off; its broker credentials are the release's
    brokers' admin while they run with --auth (the chart's default), and none without it."""
    pod = pod_of(parse(helm.render(CHART, sets=["exampleApp.enabled=true"])))
    sidecar = by_name(pod["initContainers"], SIDECAR)
    assert not [a for a in sidecar["args"] if a.startswith(SECURITY_FLAGS)]
    assert {
        (e["name"], e["valueFrom"]["secretKeyRef"]["name"])
        for e in sidecar["env"]
        if e["name"].startswith("ROCKETBOX_BROKER_")
    } == {
        ("ROCKETBOX_BROKER_ACCESS_KEY", "rb-rocketbox-broker-auth"),
        ("ROCKETBOX_BROKER_SECRET_KEY", "rb-rocketbox-broker-auth"),
    }
    sets = ["exampleApp.enabled=true", "broker.auth.enabled=false"]
    pod = pod_of(parse(helm.render(CHART, sets=sets)))
    sidecar = by_name(pod["initContainers"], SIDECAR)
    assert not [e for e in sidecar["env"] if e["name"].startswith("ROCKETBOX_BROKER_")]
    assert not [m for m in sidecar["volumeMounts"] if m["mountPath"].startswith("/etc/rocketbox")]
    assert sidecar["startupProbe"]["grpc"]["port"] == 8980
    assert sidecar["readinessProbe"]["grpc"]["port"] == 8980


def test_each_part_is_wired_from_its_secret(helm: Helm) -> None:
    pod = pod_of(parse(helm.render(CHART, sets=ALL_ON)))
    sidecar = by_name(pod["initContainers"], SIDECAR)
    args = sidecar["args"]
    for flag in (
        "--tls-cert=/etc/rocketbox/sidecar/tls/tls.crt",
        "--tls-key=/etc/rocketbox/sidecar/tls/tls.key",
        "--tls-client-ca=/etc/rocketbox/sidecar/client-ca/ca.crt",
        "--token-file=/etc/rocketbox/sidecar/token/token",
        "--health-listen=0.0.0.0:8983",
        "--broker-tls",
        "--broker-tls-ca=/etc/rocketbox/sidecar/broker-ca/ca.crt",
    ):
        assert flag in args
    assert sidecar["startupProbe"]["grpc"]["port"] == 8983
    assert sidecar["readinessProbe"]["grpc"]["port"] == 8983
    assert by_name(sidecar["ports"], "sidecar-health")["containerPort"] == 8983
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {
        "rocketbox-tls": "sidecar-tls", "rocketbox-client-ca": "apps-ca",
        "rocketbox-token": "sidecar-token", "rocketbox-broker-ca": "broker-ca",
    }  # fmt: skip
    mounts = {m["name"]: m for m in sidecar["volumeMounts"]}
    assert all(mounts[name]["readOnly"] for name in secrets)
    env = {e["name"]: e for e in sidecar["env"]}
    for name, key in (("ROCKETBOX_BROKER_ACCESS_KEY", "access-key"),
                      ("ROCKETBOX_BROKER_SECRET_KEY", "secret-key")):  # fmt: skip
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("broker-credentials", key)
        assert "value" not in env[name]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_with_every_part_on_the_chart_validates(helm: Helm, version: str, tmp_path: Path) -> None:
    docs = parse(helm.render(CHART, sets=ALL_ON))
    kubernetes_validate(without_custom_kinds(docs), version, tmp_path)
