"""The chart's Grafana dashboard and Prometheus alert rules.

Proves:
- off by default, and off while metrics are; with metrics.grafanaDashboard.enabled a ConfigMap
  labelled for Grafana's dashboard sidecar (grafana_dashboard: "1") holds each dashboards/*.json
  as it is in the chart; with metrics.prometheusRule.enabled a PrometheusRule whose thresholds are
  the values';
- the rules pass `promtool check rules`, and so does every query of the dashboard (each made a
  recording rule, Grafana's variables replaced); every alert has a severity, a summary and a
  description, and each concern the chart promises has its alert;
- an outbox several sidecars share (each reporting the whole of it under one ``outbox`` label)
  is counted once: its alerts fire once, on its own figures, not on their sum; the dashboard
  counts each outbox once too;
- the dashboard is well formed: unique panel ids, every query on the datasource variable;
- every metric a query or a rule names is one a real broker or sidecar exports (or the kubelet's,
  for the disks), with the labels it selects on: a broker and a sidecar run with metrics on free
  ports, traffic makes every metric appear that can (stores, a spill under forced flow control
  and its resend, a consumer group that receives and acknowledges part), and both are scraped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.ha.ha_helpers import ha_address, master, slave, wait_caught_up
from tests.cluster.processes import NamesrvProcess
from tests.helm.chart import CHART, Doc, Helm, find, parse, values_file
from tests.helm.conftest import Rendered
from tests.helm.monitoring import (
    DASHBOARDS,
    EXTERNAL_METRICS,
    TARGET_LABELS,
    dashboard_exprs,
    dashboards,
    exported,
    panels,
    promtool_check_rules,
    promtool_run,
    rule_exprs,
    rule_groups,
)
from tests.helm.promql import metric_names, selected_labels, without_grafana_variables
from tests.prometheus import metrics_port
from tests.rocketbox.test_metrics_endpoints import (
    SIDECAR_METRICS_LINE,
    receive_all,
)
from tests.sidecar.sidecar_process import (
    BROKER_ARGS,
    SidecarProcess,
    message,
    outcome,
    send,
    set_flow_control,
)

pytestmark = pytest.mark.slow

FULLNAME = "rb-rocketbox"
DEADLINE_S = 30.0
# The concerns an operator needs alerts for, each to an alert of the chart.
ALERTS = {
    "outbox depth": "RocketboxOutboxDepthHigh",
    "oldest pending age": "RocketboxOutboxOldestPending",
    "buried entries": "RocketboxOutboxBuried",
    "outbox not writable": "RocketboxOutboxNotWritable",
    "spool rate": "RocketboxSpoolRatioHigh",
    "consumer lag": "RocketboxConsumerLagHigh",
    "disk ratio": "RocketboxDiskUsedRatioHigh",
    "replication lag (issue #17)": "RocketboxReplicationLagHigh",
}


def monitoring_docs(docs: list[Doc]) -> list[str]:
    return sorted(
        f"{d['kind']}/{d['metadata']['name']}"
        for d in docs
        if d["kind"] == "PrometheusRule"
        or (d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboards"))
    )


@pytest.fixture(scope="module")
def monitored(helm: Helm) -> list[Doc]:
    """The chart with everything on (tests/helm/values/rocksdb.yaml enables both)."""
    return parse(helm.render(CHART, values_file("rocksdb")))


def test_off_by_default_and_while_metrics_are_off(helm: Helm) -> None:
    assert monitoring_docs(parse(helm.render(CHART))) == []
    both = ("metrics.grafanaDashboard.enabled=true", "metrics.prometheusRule.enabled=true")
    assert monitoring_docs(parse(helm.render(CHART, sets=[*both, "metrics.enabled=false"]))) == []
    assert monitoring_docs(parse(helm.render(CHART, sets=both))) == [
        f"ConfigMap/{FULLNAME}-dashboards",
        f"PrometheusRule/{FULLNAME}",
    ]


def test_the_dashboards_configmap_is_labelled_for_grafanas_sidecar(rendered: Rendered) -> None:
    config_map = find(rendered.docs, "ConfigMap", f"{FULLNAME}-dashboards")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"] == {p.name: p.read_text() for p in sorted(DASHBOARDS.glob("*.json"))}
    rule = find(rendered.docs, "PrometheusRule", FULLNAME)
    wanted = rendered.values["metrics"]["prometheusRule"]["labels"]
    assert wanted.items() <= rule["metadata"]["labels"].items()


def test_the_thresholds_are_the_values(helm: Helm, tmp_path: Path) -> None:
    # A values file: helm's --set reads 0.2 as a string.
    values = tmp_path / "thresholds.yaml"
    values.write_text(
        yaml.safe_dump(
            {"metrics": {"prometheusRule": {"enabled": True, "consumerLagMax": 42,
                                            "spoolRatioMax": 0.2, "diskClaimRegex": "my-claim"}}}
        )
    )  # fmt: skip
    docs = parse(helm.render(CHART, values))
    exprs = dict(rule_exprs(docs))
    assert exprs["rocketbox.broker: RocketboxConsumerLagHigh"].endswith("> 42")
    assert exprs["rocketbox.outbox: RocketboxSpoolRatioHigh"].endswith("> 0.2")
    assert (
        'persistentvolumeclaim=~"my-claim"' in exprs["rocketbox.broker: RocketboxDiskUsedRatioHigh"]
    )


def test_every_concern_has_an_alert_that_promtool_accepts(
    monitored: list[Doc], tmp_path: Path
) -> None:
    groups = rule_groups(monitored)
    rules = [r for g in groups for r in g["rules"]]
    assert {r["alert"] for r in rules} == set(ALERTS.values())
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        assert r["annotations"]["description"], r["alert"]
    # The broker's claims by default: data-<broker>-N, and the outboxes'.
    disk = next(r for r in rules if r["alert"] == ALERTS["disk ratio"])
    assert f'"data-{FULLNAME}-broker-[0-9]+|.*-rocketbox-outbox"' in disk["expr"]
    assert f"SUCCESS: {len(rules)} rules found" in promtool_check_rules(groups, tmp_path / "r.yaml")


def test_every_dashboard_query_parses_in_promtool(tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    recorded = [
        {"record": f"dashboard:query_{i}", "expr": without_grafana_variables(expr)}
        for i, (_, expr) in enumerate(exprs)
    ]
    out = promtool_check_rules([{"name": "dashboard", "rules": recorded}], tmp_path / "d.yaml")
    assert f"SUCCESS: {len(exprs)} rules found" in out


def test_the_dashboard_is_well_formed() -> None:
    for name, dashboard in dashboards().items():
        ids = [p["id"] for p in panels(dashboard)]
        assert len(ids) == len(set(ids)), name
        assert {v["name"] for v in dashboard["templating"]["list"]} >= {"datasource"}
        for panel in panels(dashboard):
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["description"], panel["title"]
            refs = [t["refId"] for t in panel["targets"]]
            assert refs, panel["title"]
            assert len(refs) == len(set(refs)), panel["title"]
        # Round trip: what Grafana's sidecar loads is plain JSON.
        assert json.loads(json.dumps(dashboard)) == dashboard


def test_queries_and_rules_name_only_metrics_the_processes_export(
    monitored: list[Doc], tmp_path: Path
) -> None:
    names = scrape_a_busy_broker_and_sidecar(tmp_path)

    exprs = [*dashboard_exprs(), *rule_exprs(monitored)]
    used = {n for _, e in exprs for n in metric_names(e)}
    assert len(used) > 20, used
    unknown = {
        f"{n} ({where})"
        for where, e in exprs
        for n in metric_names(e)
        if n not in names and n not in EXTERNAL_METRICS
    }
    assert not unknown, f"no process exports: {sorted(unknown)}"
    for where, expr in exprs:
        for metric, labels in selected_labels(expr).items():
            if metric in EXTERNAL_METRICS:
                continue
            missing = labels - TARGET_LABELS - names[metric]
            assert not missing, f"{where}: {metric} has no label {missing}"
    # Every metric rocketbox exports is on the dashboard, in one form or another.
    on_dashboard = {family(n) for _, e in dashboard_exprs() for n in metric_names(e)}
    missing = {n for n in names if not n.endswith("_created") and family(n) not in on_dashboard}
    assert not missing, f"not on the dashboard: {sorted(missing)}"


def family(name: str) -> str:
    """A sample's metric family: a histogram's _bucket, _count and _sum, a counter's _total."""
    for suffix in ("_bucket", "_count", "_sum", "_total"):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def scrape_a_busy_broker_and_sidecar(tmp_path: Path) -> dict[str, set[str]]:
    """{name: labels} the processes export after traffic that makes every metric appear: a
    NameServer, a master registered with it and replicated by a slave, and a sidecar."""
    with NamesrvProcess(metrics=True) as namesrv:
        broker = master(tmp_path / "broker", *BROKER_ARGS, f"--namesrv={namesrv.endpoint}")
        try:
            replica = slave(tmp_path / "slave", ha_address(broker))
            try:
                names = scrape_busy(tmp_path, broker)
                wait_caught_up(broker, replica)
                names |= exported(broker.metrics_port) | exported(replica.metrics_port)
            finally:
                replica.stop()
        finally:
            broker.stop()
        wait_until(
            lambda: "rocketbox_namesrv_live_brokers" in exported(namesrv.metrics_port),
            DEADLINE_S,
            "the NameServer's live brokers",
        )
        return names | exported(namesrv.metrics_port)


def scrape_busy(tmp_path: Path, broker: BrokerProcess) -> dict[str, set[str]]:
    """The broker's and a sidecar's names after sends, a spill, its drain and consumption."""
    sidecar: SidecarProcess | None = None
    try:
        broker_port = broker.metrics_port
        sidecar = SidecarProcess(
            broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}", "--metrics-listen=127.0.0.1:0",
            "--outbox-stats-interval-ms=100",
        )  # fmt: skip
        sidecar_port = metrics_port(sidecar.output(), SIDECAR_METRICS_LINE)
        with sidecar.client() as stub:
            stored = [send(stub, message("Orders")) for _ in range(3)]
            set_flow_control(broker.endpoint, True)
            spooled = [send(stub, message("Orders")) for _ in range(2)]
            set_flow_control(broker.endpoint, False)
        assert [outcome(r) for r in [*stored, *spooled]] == ["stored"] * 3 + ["spooled"] * 2
        # The spill drains (resends_total) and the outbox gauges are refreshed.
        wait_until(
            lambda: (
                {"rocketbox_sidecar_resends_total", "rocketbox_outbox_entries"}
                <= set(exported(sidecar_port))
            ),
            DEADLINE_S,
            "the resends and the outbox gauges on the sidecar's /metrics",
        )
        receive_all(broker.endpoint, "DashboardReaders", 5)
        wait_until(
            lambda: exported(broker_port).get("rocketbox_broker_consumer_lag"),
            DEADLINE_S,
            "the consumer group's lag on the broker's /metrics",
        )
        return exported(broker_port) | exported(sidecar_port)
    finally:
        if sidecar is not None:
            sidecar.stop()


def test_the_alerts_fire_on_series_that_cross_their_thresholds(
    monitored: list[Doc], tmp_path: Path
) -> None:
    """`promtool test rules`: series of a sidecar in trouble, and the alerts firing at the time
    their `for` allows, with the defaults' thresholds; a healthy sidecar's series fire none."""
    rules = tmp_path / "rules.yaml"
    promtool_check_rules(rule_groups(monitored), rules)
    described = {r["alert"]: r["annotations"]["description"] for g in rule_groups(monitored)
                 for r in g["rules"]}  # fmt: skip

    def alert(name: str, labels: dict[str, str], severity: str, summary: str) -> dict[str, Any]:
        return {
            "exp_labels": labels | {"severity": severity},
            "exp_annotations": {"summary": summary, "description": described[name]},
        }

    sick = 'namespace="ns", pod="app-0"'
    sick_outbox = "rocksdb:///data/outbox on app-0:8980"
    series = [
        # Buried entries from the first minute; the outbox unreachable from the start.
        {"series": f'rocketbox_outbox_entries{{{sick}, outbox="{sick_outbox}", state="DEAD"}}',
         "values": "0 3x20"},
        {"series": f'rocketbox_sidecar_ready{{{sick}, reason="OUTBOX_UNAVAILABLE"}}',
         "values": "1x20"},
        # Half the answers spooled: 10 a minute of each state.
        {"series": f'rocketbox_sidecar_sends_total{{{sick}, state="SPOOLED", cause="UNAVAILABLE"}}',
         "values": "0+10x20"},
        {"series": f'rocketbox_sidecar_sends_total{{{sick}, state="STORED", cause=""}}',
         "values": "0+10x20"},
        # A healthy sidecar beside it.
        {"series": 'rocketbox_outbox_entries{namespace="ns", pod="app-1", state="DEAD", '
                   'outbox="rocksdb:///data/outbox on app-1:8980"}', "values": "0x20"},
        {"series": 'rocketbox_sidecar_ready{namespace="ns", pod="app-1", reason="READY"}',
         "values": "1x20"},
    ]  # fmt: skip
    fired = {"namespace": "ns", "pod": "app-0"}
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "1m", "alertname": "RocketboxOutboxBuried", "exp_alerts": []},
                    {"eval_time": "3m", "alertname": "RocketboxOutboxBuried",
                     "exp_alerts": [alert("RocketboxOutboxBuried",
                                          {"namespace": "ns", "outbox": sick_outbox}, "critical",
                                          f"{sick_outbox}: 3 buried (DEAD) outbox entries")]},
                    {"eval_time": "3m", "alertname": "RocketboxOutboxNotWritable",
                     "exp_alerts": [alert("RocketboxOutboxNotWritable",
                                          fired | {"reason": "OUTBOX_UNAVAILABLE"}, "critical",
                                          "app-0: the outbox cannot be written "
                                          "(OUTBOX_UNAVAILABLE)")]},
                    {"eval_time": "5m", "alertname": "RocketboxSpoolRatioHigh", "exp_alerts": []},
                    {"eval_time": "16m", "alertname": "RocketboxSpoolRatioHigh",
                     "exp_alerts": [alert("RocketboxSpoolRatioHigh", fired, "warning",
                                          "app-0: 50% of sends spooled")]},
                    {"eval_time": "16m", "alertname": "RocketboxOutboxDepthHigh", "exp_alerts": []},
                ],
            }
        ],
    }  # fmt: skip
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = promtool_run("test", "rules", str(path))
    assert "SUCCESS" in out, out


def test_an_outbox_sidecars_share_is_counted_once(monitored: list[Doc], tmp_path: Path) -> None:
    """`promtool test rules`: the sidecars of three pods each report one shared MySQL outbox's
    6,000 PENDING and 2 DEAD entries: no depth alert (their sum would pass the 10,000 of the
    defaults), one buried alert saying 2. A second outbox with 12,000 PENDING, reported by one
    sidecar, fires the depth alert once. The dashboard's depth query, evaluated over the same
    series, adds the two outboxes once each."""
    rules = tmp_path / "rules.yaml"
    promtool_check_rules(rule_groups(monitored), rules)
    described = {r["alert"]: r["annotations"]["description"] for g in rule_groups(monitored)
                 for r in g["rules"]}  # fmt: skip
    shared, alone = "mysql+pymysql://db:3306/shop.outbox", "mysql+pymysql://db:3306/shop.billing"
    series = [
        {"series": f'rocketbox_outbox_entries{{namespace="ns", pod="{pod}", outbox="{shared}", '
                   f'state="{state}"}}', "values": f"{n}x20"}
        for pod in ("app-0", "app-1", "app-2") for state, n in (("PENDING", 6_000), ("DEAD", 2))
    ]  # fmt: skip
    series.append(
        {"series": f'rocketbox_outbox_entries{{namespace="ns", pod="billing-0", outbox="{alone}", '
                   'state="PENDING"}', "values": "12000x20"}
    )  # fmt: skip
    (depth_query,) = [e for where, e in dashboard_exprs() if "Outbox entries, by state" in where]
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "16m", "alertname": "RocketboxOutboxDepthHigh", "exp_alerts": [
                        {"exp_labels": {"namespace": "ns", "outbox": alone, "severity": "warning"},
                         "exp_annotations": {
                             "summary": f"{alone}: 12000 outbox entries waiting to be resent",
                             "description": described["RocketboxOutboxDepthHigh"]}},
                    ]},
                    {"eval_time": "3m", "alertname": "RocketboxOutboxBuried", "exp_alerts": [
                        {"exp_labels": {"namespace": "ns", "outbox": shared,
                                        "severity": "critical"},
                         "exp_annotations": {
                             "summary": f"{shared}: 2 buried (DEAD) outbox entries",
                             "description": described["RocketboxOutboxBuried"]}},
                    ]},
                ],
                "promql_expr_test": [
                    {"expr": without_grafana_variables(depth_query), "eval_time": "5m",
                     "exp_samples": [{"labels": '{state="PENDING"}', "value": 18_000},
                                     {"labels": '{state="DEAD"}', "value": 2}]},
                ],
            }
        ],
    }  # fmt: skip
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = promtool_run("test", "rules", str(path))
    assert "SUCCESS" in out, out


def test_the_replication_lag_alert_fires_on_a_slave_far_behind(
    monitored: list[Doc], tmp_path: Path
) -> None:
    """`promtool test rules`: a slave 100 MB behind its master from the second minute fires
    RocketboxReplicationLagHigh once its `for` (5m) has passed; one 1 MB behind never does."""
    rules = tmp_path / "rules.yaml"
    promtool_check_rules(rule_groups(monitored), rules)
    (lag,) = [r for g in rule_groups(monitored) for r in g["rules"]
              if r["alert"] == "RocketboxReplicationLagHigh"]  # fmt: skip
    series = [
        {"series": 'rocketbox_broker_ha_replication_lag_bytes{namespace="ns", pod="broker-a-1-0"}',
         "values": "0 100000000x20"},
        {"series": 'rocketbox_broker_ha_replication_lag_bytes{namespace="ns", pod="broker-b-1-0"}',
         "values": "1000000x20"},
    ]  # fmt: skip
    fired = {
        "exp_labels": {"namespace": "ns", "pod": "broker-a-1-0", "severity": "warning"},
        "exp_annotations": {
            "summary": "broker-a-1-0: a slave is 95.37MiB behind its master",
            "description": lag["annotations"]["description"],
        },
    }
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": lag["alert"], "exp_alerts": []},
                    {"eval_time": "7m", "alertname": lag["alert"], "exp_alerts": [fired]},
                ],
            }
        ],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = promtool_run("test", "rules", str(path))
    assert "SUCCESS" in out, out
