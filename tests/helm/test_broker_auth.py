"""The chart runs its brokers with --auth (docs/security.md): on by default, as production wants.

Proves: every broker (one, or each of a cluster's) gets --auth, its ACL key file from a Secret
volume and its bootstrap admin from a Secret by env; the chart makes that Secret when none is
named (access key rocketbox-admin, a random secret key, a valid Fernet key; kept on uninstall)
and makes none when both are named; broker.auth.enabled=false renders none of it.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography.fernet import Fernet

from tests.helm.chart import CHART, Helm, by_name, parse

pytestmark = pytest.mark.slow

KEY_FILE_ARG = "--auth-key-file=/etc/rocketbox/acl/acl.key"


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def broker_pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s["spec"]["template"]["spec"] for s in of_kind(docs, "StatefulSet")
            if "broker" in s["metadata"]["name"]]  # fmt: skip


def admin_env(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container["env"]
        if e["name"].startswith("ROCKETBOX_AUTH_ADMIN_")
    }


def test_by_default_the_broker_authenticates_with_the_charts_own_secret(helm: Helm) -> None:
    docs = parse(helm.render(CHART))
    [secret] = of_kind(docs, "Secret")
    assert secret["metadata"]["name"] == "rb-rocketbox-broker-auth"
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["access-key"] == "rocketbox-admin"
    assert len(data["secret-key"]) == 40
    Fernet(data["acl.key"])  # raises unless a valid key
    [pod] = broker_pods(docs)
    broker = by_name(pod["containers"], "broker")
    assert "--auth" in broker["args"]
    assert KEY_FILE_ARG in broker["args"]
    assert "--auth-clock-skew-s=300" in broker["args"]
    assert admin_env(broker) == {
        "ROCKETBOX_AUTH_ADMIN_ACCESS_KEY": ("rb-rocketbox-broker-auth", "access-key"),
        "ROCKETBOX_AUTH_ADMIN_SECRET_KEY": ("rb-rocketbox-broker-auth", "secret-key"),
    }
    volume = by_name(pod["volumes"], "acl-key")
    assert volume["secret"]["secretName"] == "rb-rocketbox-broker-auth"
    assert by_name(broker["volumeMounts"], "acl-key")["mountPath"] == "/etc/rocketbox/acl"


def test_named_secrets_are_used_and_none_is_made(helm: Helm) -> None:
    sets = ["broker.auth.adminSecret=ops-admin", "broker.auth.keySecret=ops-acl-key",
            "broker.auth.accessKeyKey=ak", "broker.auth.secretKeyKey=sk"]  # fmt: skip
    docs = parse(helm.render(CHART, sets=sets))
    assert of_kind(docs, "Secret") == []
    [pod] = broker_pods(docs)
    broker = by_name(pod["containers"], "broker")
    assert admin_env(broker) == {
        "ROCKETBOX_AUTH_ADMIN_ACCESS_KEY": ("ops-admin", "ak"),
        "ROCKETBOX_AUTH_ADMIN_SECRET_KEY": ("ops-admin", "sk"),
    }
    assert by_name(pod["volumes"], "acl-key")["secret"]["secretName"] == "ops-acl-key"


def test_every_broker_of_a_cluster_authenticates(helm: Helm) -> None:
    docs = parse(helm.render(CHART, sets=["broker.brokerGroups=2", "broker.slavesPerGroup=1"]))
    pods = broker_pods(docs)
    assert len(pods) == 4
    for pod in pods:
        assert KEY_FILE_ARG in by_name(pod["containers"], "broker")["args"]


def test_auth_off_renders_none_of_it(helm: Helm) -> None:
    docs = parse(helm.render(CHART, sets=["broker.auth.enabled=false"]))
    assert of_kind(docs, "Secret") == []
    [pod] = broker_pods(docs)
    broker = by_name(pod["containers"], "broker")
    assert not [a for a in broker["args"] if a.startswith("--auth")]
    assert admin_env(broker) == {}
    assert not [v for v in pod["volumes"] if v["name"] == "acl-key"]
