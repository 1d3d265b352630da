"""The sidecar's lookup on an Apache RocketMQ cluster in the chart (sidecar.lookupNamesrv,
``--lookup-namesrv``): off by default; set, the sidecar's args carry it, and rocketbox's own CLI
reads it as the NameServers the lookup asks. A value not of the form HOST:PORT[;HOST:PORT] fails
rendering, naming the value's path.
"""

from __future__ import annotations

from typing import Any

import pytest

from rocketbox.cli import main
from rocketbox.envvars import commands_of
from sidecar.channels import Endpoint
from tests.helm.chart import CHART, Helm, by_name, find, parse

pytestmark = pytest.mark.slow

APP = "rb-rocketbox-example-app"
SIDECAR = "rocketbox-sidecar"
NAMESRV = "rocketmq-namesrv-0.rocketmq:9876;rocketmq-namesrv-1.rocketmq:9876"


def sidecar_args(helm: Helm, *sets: str) -> list[str]:
    docs = parse(helm.render(CHART, sets=["exampleApp.enabled=true", *sets]))
    pod = find(docs, "Deployment", APP)["spec"]["template"]["spec"]
    args: list[str] = by_name(pod["initContainers"], SIDECAR)["args"]
    return args


def parsed(args: list[str]) -> dict[str, Any]:
    """The sidecar's args as `rocketbox sidecar` reads them (nothing runs)."""
    root = main.make_context("rocketbox", list(args))
    command = commands_of(main)["sidecar"]
    params: dict[str, Any] = command.make_context("sidecar", args[1:], parent=root).params
    return params


def test_the_lookup_is_off_by_default(helm: Helm) -> None:
    assert not [a for a in sidecar_args(helm) if a.startswith("--lookup-namesrv")]


def test_the_namesrv_reach_the_sidecar_as_its_lookup(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = sidecar_args(helm, f"sidecar.lookupNamesrv={NAMESRV}")
    assert f"--lookup-namesrv={NAMESRV}" in args
    # The outbox URL comes by env in the pod; any will do for parsing.
    monkeypatch.setenv("ROCKETBOX_SIDECAR_OUTBOX", "memory://")
    lookup = parsed(args)["uniq_key_lookup"]
    assert lookup is not None
    assert lookup.namesrv == (
        Endpoint("rocketmq-namesrv-0.rocketmq", 9876),
        Endpoint("rocketmq-namesrv-1.rocketmq", 9876),
    )


@pytest.mark.parametrize("value", ["rocketmq-namesrv", "ns:9876;", "http://ns:9876"])
def test_a_value_not_host_port_fails_rendering(helm: Helm, value: str) -> None:
    done = helm.template(CHART, sets=["exampleApp.enabled=true", f"sidecar.lookupNamesrv={value}"])
    assert done.returncode != 0, done.stdout
    assert "at '/sidecar/lookupNamesrv'" in done.stderr
    assert "does not match pattern" in done.stderr
