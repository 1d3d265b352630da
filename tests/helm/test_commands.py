"""The command lines the chart renders are ones rocketbox's own CLI accepts, with the meaning the
chart intends: each container's args and env are parsed by rocketbox.cli's click commands (every
flag known, every value converted and checked by its callback) without running anything.

Proves: the broker's flags (data dir on its volume, listen/advertise, topics, metrics); the
sidecar's (listen address the probes dial, brokers, shutdown grace, metrics) and that its outbox
URL arrives through the env var of `rocketbox sidecar --outbox` (ROCKETBOX_SIDECAR_OUTBOX, named
by rocketbox/envvars.py's rule); and ROCKETBOX_LOG_FORMAT as the global --log-format.
The reconciliation's flags (with the ``--out`` its wrapper appends) are parsed by `rocketbox
reconcile`; its shell wrapper in the CronJob is run for real, around a stand-in for rocketbox: a
new report directory per run, the newest KEEP kept, reconcile's exit status passed on.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest

from rocketbox.cli import main
from rocketbox.envvars import commands_of
from sidecar.channels import Endpoint
from tests.helm.chart import by_name, find
from tests.helm.conftest import Rendered
from tests.helm.test_render import APP, BROKER, RECONCILE, SIDECAR, STORE_MOUNT

pytestmark = pytest.mark.slow

# What a Secret would hand the sidecar, for parsing only.
SECRET_URLS = {
    "redis": "redis://127.0.0.1:6379/0?prefix=rocketbox",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/test?table=rocketbox_outbox",
}
# What the brokers' auth Secret would hand the broker (its admin) and the sidecar.
SECRET_CREDENTIALS = {
    "ROCKETBOX_AUTH_ADMIN_ACCESS_KEY": "rocketbox-admin",
    "ROCKETBOX_AUTH_ADMIN_SECRET_KEY": "stand-in-secret-key",
    "ROCKETBOX_BROKER_ACCESS_KEY": "rocketbox-admin",
    "ROCKETBOX_BROKER_SECRET_KEY": "stand-in-secret-key",
}


def parse(
    command_name: str, container: dict[str, Any], outbox_type: str, monkeypatch: pytest.MonkeyPatch
) -> click.Context:
    """The container's args parsed by `rocketbox <command>` under the container's env."""
    for e in container.get("env", []):
        if "value" in e:
            monkeypatch.setenv(e["name"], e["value"])
        elif e["name"] in SECRET_CREDENTIALS:
            monkeypatch.setenv(e["name"], SECRET_CREDENTIALS[e["name"]])
        elif "secretKeyRef" in e["valueFrom"]:
            monkeypatch.setenv(e["name"], SECRET_URLS[outbox_type])
    args = container["args"]
    assert args[0] == command_name
    # The image's ENTRYPOINT is `rocketbox`: the root group, then the subcommand, as click runs it.
    root = main.make_context("rocketbox", list(args))
    command = commands_of(main)[command_name]
    return command.make_context(command_name, list(args[1:]), parent=root)


def test_the_broker_command_line_is_rocketboxs(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = find(rendered.docs, "StatefulSet", BROKER)["spec"]["template"]["spec"]
    ctx = parse("broker", by_name(pod["containers"], "broker"), rendered.outbox_type, monkeypatch)
    assert ctx.parent is not None
    assert ctx.parent.params["log_format"] == "json"
    p = ctx.params
    assert str(p["data_dir"]) == STORE_MOUNT
    assert p["listen"] == Endpoint("0.0.0.0", 8081)
    assert p["advertise_host"].startswith("$(POD_NAME).")  # the kubelet expands it
    assert p["auto_create_topic"] is False
    assert p["topics"] == ("rocketbox-example:8:NORMAL",)
    assert p["metrics_listen"] == Endpoint("0.0.0.0", 9108)


def test_the_sidecar_command_line_is_rocketboxs(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = find(rendered.docs, "Deployment", APP)["spec"]["template"]["spec"]
    ctx = parse(
        "sidecar", by_name(pod["initContainers"], SIDECAR), rendered.outbox_type, monkeypatch
    )
    assert ctx.parent is not None
    assert ctx.parent.params["log_format"] == "json"
    p = ctx.params
    assert p["listen"] == Endpoint("0.0.0.0", rendered.values["sidecar"]["port"])
    assert p["brokers"] == (Endpoint(f"{BROKER}.messaging.svc.cluster.local", 8081),)
    assert p["shutdown_grace_ms"] == rendered.values["sidecar"]["shutdownGraceMs"]
    assert p["metrics_listen"] == Endpoint("0.0.0.0", rendered.values["sidecar"]["metricsPort"])
    expected_url = SECRET_URLS.get(
        rendered.outbox_type, "rocksdb:///var/lib/rocketbox/sidecar/outbox"
    )
    assert p["outbox_url"] == expected_url


def test_the_reconcile_command_line_is_rocketboxs(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = find(rendered.docs, "CronJob", RECONCILE)["spec"]["jobTemplate"]["spec"]["template"]
    container = by_name(pod["spec"]["containers"], "reconcile")
    url = SECRET_URLS.get(rendered.outbox_type, "")
    # What the kubelet passes: $(RECONCILE_OUTBOX) expanded from the Secret; and the wrapper's
    # --out. (A RocksDB outbox is read from an export file the values name.)
    args = [a.replace("$(RECONCILE_OUTBOX)", url) for a in container["args"]]
    with_out = {**container, "args": [*args, "--out", "/tmp/r"]}
    ctx = parse("reconcile", with_out, rendered.outbox_type, monkeypatch)
    p = ctx.params
    assert [str(c) for c in p["commitlogs"]] == ["/var/lib/rocketbox/broker/commitlog"]
    assert p["outbox_source"] == (url or p["outbox_source"])
    assert p["outbox_source"], "an outbox source in every outbox choice"
    assert str(p["out_dir"]) == "/tmp/r"
    # Incremental by default: a checkpoint the wrapper's pruning passes by, and a settle window.
    assert str(p["checkpoint"]) == "/var/lib/rocketbox/reports/.checkpoint"
    assert p["settle_minutes"] == rendered.values["reconcile"]["incremental"]["settleMinutes"]


FAKE_ROCKETBOX = """#!/bin/sh
# Stands in for rocketbox: writes its arguments into the --out directory, exits $FAKE_STATUS.
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "--out" ] && out="$a"
  prev="$a"
done
mkdir -p "$out"
printf '%s\\n' "$@" > "$out/args"
exit "$FAKE_STATUS"
"""


def test_the_reconcile_wrapper_keeps_the_newest_reports_and_the_exit_status(
    rendered: Rendered, tmp_path: Path
) -> None:
    pod = find(rendered.docs, "CronJob", RECONCILE)["spec"]["jobTemplate"]["spec"]["template"]
    c = by_name(pod["spec"]["containers"], "reconcile")
    shell, flags, script, arg0 = c["command"]
    assert (shell, flags) == ("/bin/sh", "-ec")
    reports = tmp_path / "reports"
    script = script.replace("/var/lib/rocketbox/reports", str(reports))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rocketbox").write_text(FAKE_ROCKETBOX)
    (bin_dir / "rocketbox").chmod(0o755)
    old = ["20000101T000000Z", "20000102T000000Z", "20000103T000000Z"]
    for name in old:
        (reports / name).mkdir(parents=True)
    (reports / ".checkpoint").mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "KEEP": "2", "FAKE_STATUS": "1"}
    # What the kubelet would pass: $(RECONCILE_OUTBOX) expanded from the Secret.
    args = [a.replace("$(RECONCILE_OUTBOX)", "redis://r:6379/0") for a in c["args"]]
    done = subprocess.run(
        [shell, flags, script, arg0, *args], env=env, capture_output=True, text=True, check=False
    )
    # reconcile's "lost" exit status is the Job's; the newest KEEP=2 reports stay.
    assert done.returncode == 1, done.stderr
    assert (reports / ".checkpoint").is_dir()  # an incremental run's checkpoint stays
    kept = sorted(p.name for p in reports.iterdir() if p.name != ".checkpoint")
    assert len(kept) == 2
    assert kept[0] == old[-1]
    assert re.fullmatch(r"\d{8}T\d{6}Z", kept[1])
    assert kept[1] > old[-1]
    written = (reports / kept[1] / "args").read_text().splitlines()
    assert written == [*args, "--out", str(reports / kept[1])]
