"""The sidecar's RocketMQ front in the chart (sidecar.rocketmq): off by default; on, the sidecar
listens for apache.rocketmq.v2 on its port, names it as a container port, the example app's
Service carries it for apps in other pods, the install notes show the endpoint an app switches
to, and the result validates strictly. An app chart built on the rocketbox templates hands its
app the front's address.

Proves: nothing of the front is rendered unless enabled; enabled, ``--rocketmq-listen`` on every
address at the chosen port (the kubelet and other pods reach the pod's IP; the app reaches
127.0.0.1), ``--rocketmq-advertise`` only when set, a ``rocketmq`` container port and Service
port, the Service kept (without the metrics label) when metrics are off; NOTES name
127.0.0.1:<port>.

Who may call the front: with sidecar.security.token on, the chart renders the front only
protected, by the apps' access keys (credentialsSecret, mounted read-only and passed as
--front-credentials-file) or by mTLS (clientCaSecret), or open by name (insecure:
--rocketmq-front-insecure); otherwise it fails naming the three values, as it fails an insecure
front beside a check. Without a token the front renders as before.
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
FRONT_ON = ["exampleApp.enabled=true", "sidecar.rocketmq.enabled=true"]


def sidecar_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = find(docs, "Deployment", APP)["spec"]["template"]["spec"]
    return by_name(pod["initContainers"], SIDECAR)


def test_the_front_is_off_by_default(helm: Helm) -> None:
    docs = parse(helm.render(CHART, sets=["exampleApp.enabled=true"]))
    sidecar = sidecar_of(docs)
    assert not [a for a in sidecar["args"] if a.startswith("--rocketmq")]
    assert "rocketmq" not in [p["name"] for p in sidecar["ports"]]
    service = find(docs, "Service", APP)
    assert "rocketmq" not in [p["name"] for p in service["spec"]["ports"]]


def test_the_front_listens_on_its_port_and_the_service_carries_it(helm: Helm) -> None:
    docs = parse(helm.render(CHART, sets=[*FRONT_ON, "sidecar.rocketmq.port=9982"]))
    sidecar = sidecar_of(docs)
    assert "--rocketmq-listen=0.0.0.0:9982" in sidecar["args"]
    assert not [a for a in sidecar["args"] if a.startswith("--rocketmq-advertise")]
    assert by_name(sidecar["ports"], "rocketmq")["containerPort"] == 9982
    service = find(docs, "Service", APP)
    port = by_name(service["spec"]["ports"], "rocketmq")
    assert (port["port"], port["targetPort"]) == (9982, "rocketmq")
    assert service["metadata"]["labels"]["rocketbox.io/metrics"] == "true"
    assert "metrics" in [p["name"] for p in service["spec"]["ports"]]


def test_an_advertised_endpoint_is_passed_on(helm: Helm) -> None:
    sets = [*FRONT_ON, "sidecar.rocketmq.advertise=orders.shop.svc:8982"]
    args = sidecar_of(parse(helm.render(CHART, sets=sets)))["args"]
    assert "--rocketmq-advertise=orders.shop.svc:8982" in args


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_without_metrics_the_service_is_the_fronts_alone_and_validates(
    helm: Helm, version: str, tmp_path: Path
) -> None:
    docs = parse(helm.render(CHART, sets=[*FRONT_ON, "metrics.enabled=false"]))
    service = find(docs, "Service", APP)
    assert [p["name"] for p in service["spec"]["ports"]] == ["rocketmq"]
    assert "rocketbox.io/metrics" not in service["metadata"]["labels"]
    kubernetes_validate(without_custom_kinds(docs), version, tmp_path)


def test_the_install_notes_name_the_endpoint_an_app_switches_to(helm: Helm) -> None:
    off = helm.run("install", "rb", CHART, "--dry-run=client", "--namespace", "messaging")
    assert off.returncode == 0, off.stderr
    assert "RocketMQ front" not in off.stdout
    on = helm.run(
        "install", "rb", CHART, "--dry-run=client", "--namespace", "messaging",
        "--set", "sidecar.rocketmq.enabled=true",
    )  # fmt: skip
    assert on.returncode == 0, on.stderr
    notes = " ".join(on.stdout[on.stdout.index("NOTES:") :].split())
    assert "RocketMQ front: an app on an official RocketMQ 5 SDK keeps its code" in notes
    assert "sets its endpoint to 127.0.0.1:8982" in notes


TOKEN_ON = [*FRONT_ON, "sidecar.security.token.existingSecret=sidecar-token"]
CREDENTIALS_FLAG = "--front-credentials-file=/etc/rocketbox/sidecar/front-credentials/credentials"


def test_a_front_beside_a_token_renders_only_protected(helm: Helm) -> None:
    done = helm.template(CHART, sets=TOKEN_ON)
    assert done.returncode != 0
    message = " ".join(done.stderr.split())
    assert "the RocketMQ front would take any client's sends unchecked" in message
    for value in (
        "sidecar.rocketmq.credentialsSecret",
        "sidecar.security.tls.clientCaSecret",
        "sidecar.rocketmq.insecure=true",
    ):
        assert value in message


def test_the_apps_access_keys_are_mounted_from_their_secret(helm: Helm) -> None:
    sets = [*TOKEN_ON, "sidecar.rocketmq.credentialsSecret=orders-apps"]
    docs = parse(helm.render(CHART, sets=sets))
    sidecar = sidecar_of(docs)
    assert CREDENTIALS_FLAG in sidecar["args"]
    assert "--rocketmq-front-insecure" not in sidecar["args"]
    mount = by_name(sidecar["volumeMounts"], "rocketbox-front-credentials")
    assert mount == {
        "name": "rocketbox-front-credentials",
        "mountPath": "/etc/rocketbox/sidecar/front-credentials",
        "readOnly": True,
    }
    pod = find(docs, "Deployment", APP)["spec"]["template"]["spec"]
    volume = by_name(pod["volumes"], "rocketbox-front-credentials")
    assert volume["secret"]["secretName"] == "orders-apps"
    key = [*sets, "sidecar.rocketmq.credentialsKey=apps"]
    args = sidecar_of(parse(helm.render(CHART, sets=key)))["args"]
    assert "--front-credentials-file=/etc/rocketbox/sidecar/front-credentials/apps" in args


@pytest.mark.parametrize(
    ("protection", "flag"),
    [
        (
            ["sidecar.security.tls.existingSecret=tls", "sidecar.security.tls.clientCaSecret=ca"],
            None,
        ),
        (["sidecar.rocketmq.insecure=true"], "--rocketmq-front-insecure"),
    ],
)
def test_mtls_or_the_insecure_choice_by_name_also_render(
    helm: Helm, protection: list[str], flag: str | None
) -> None:
    args = sidecar_of(parse(helm.render(CHART, sets=[*TOKEN_ON, *protection])))["args"]
    assert not [a for a in args if a.startswith("--front-credentials-file")]
    assert (flag in args) if flag else not [a for a in args if a.startswith("--rocketmq-front")]


def test_an_insecure_front_beside_a_check_fails(helm: Helm) -> None:
    sets = [*FRONT_ON, "sidecar.rocketmq.insecure=true", "sidecar.rocketmq.credentialsSecret=a"]
    done = helm.template(CHART, sets=sets)
    assert done.returncode != 0
    assert "sidecar.rocketmq.insecure=true says the RocketMQ front checks no credentials" in (
        " ".join(done.stderr.split())
    )


def test_without_a_token_the_front_renders_open_and_its_options_only_when_on(helm: Helm) -> None:
    args = sidecar_of(parse(helm.render(CHART, sets=FRONT_ON)))["args"]
    assert not [a for a in args if a.startswith(("--front-credentials", "--rocketmq-front"))]
    off = ["exampleApp.enabled=true", "sidecar.rocketmq.credentialsSecret=orders-apps"]
    sidecar = sidecar_of(parse(helm.render(CHART, sets=off)))
    assert not [a for a in sidecar["args"] if a.startswith("--front-credentials")]
    assert "rocketbox-front-credentials" not in [m["name"] for m in sidecar["volumeMounts"]]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_a_protected_front_validates(helm: Helm, version: str, tmp_path: Path) -> None:
    sets = [*TOKEN_ON, "sidecar.rocketmq.credentialsSecret=orders-apps"]
    docs = parse(helm.render(CHART, sets=sets))
    kubernetes_validate(without_custom_kinds(docs), version, tmp_path)
