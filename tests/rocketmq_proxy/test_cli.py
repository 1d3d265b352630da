"""``rocketbox send`` (through a sidecar in front of the stand-in proxy) and ``rocketbox consume``
(against the proxy directly), run as a user runs them. Proves:

- a sent message is STORED and the proxy holds it with its tag, keys, properties and body; the
  text answer names the offset the proxy answered; ``--count`` stores each once;
- under the proxy's flow control ``send`` answers SPOOLED THROTTLED (exit 0), and the message
  reaches the proxy once the flow control is lifted;
- a topic the proxy does not have exits 1 naming it, for ``send`` and for ``consume``;
- ``consume`` reads what the proxy holds as a consumer group, with only the public protocol
  (ReceiveMessage and AckMessage: a proxy serves no admin service), prints each message once
  and acks it: the proxy records the group's acks, and a second run prints nothing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.rocketbox_process import rocketbox_cli as rocketbox
from tests.rocketmq_proxy import rocketmq_proxy
from tests.rocketmq_proxy.sidecar_support import proxy_and_sidecar, wait_stored_once
from tests.rocketmq_proxy.wire import raw_message, send

pytestmark = pytest.mark.slow

TOPIC = "Orders"
# consume's quiet window: the proxy's shortest long poll, so that the poll fits in it.
QUIET_WAIT_S = "5"


def json_lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_send_is_stored_by_the_proxy_with_its_fields(tmp_path: Path) -> None:
    with proxy_and_sidecar(tmp_path, [TOPIC]) as (proxy, sidecar):
        [answer] = json_lines(
            rocketbox(
                "send",
                TOPIC,
                "order 1 created",
                "--tag",
                "Created",
                "--keys",
                "order-1",
                "--keys",
                "customer-7",
                "--property",
                "region=eu",
                "--json",
                sidecar=sidecar.endpoint,
            )
        )
        text = rocketbox("send", TOPIC, "order 2 created", sidecar=sidecar.endpoint)
        counted = rocketbox(
            "send", TOPIC, "load", "--count", "5", "--json", sidecar=sidecar.endpoint
        )
        held = {m.message_id: m for m in proxy.stored(TOPIC)}
    assert answer["answer"] == "STORED"
    m = held[answer["message_id"]]
    assert (m.body, m.tag, sorted(m.keys)) == (
        b"order 1 created",
        "Created",
        ["customer-7", "order-1"],
    )
    assert m.properties["region"] == "eu"
    assert answer["queue_offset"] == m.queue_offset
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("STORED "), text.stdout
    second = held[text.stdout.split()[1]]
    assert f"offset {second.queue_offset}" in text.stdout
    assert counted.returncode == 0, counted.stderr
    assert [m.body for m in held.values()].count(b"load") == 5


def test_send_under_flow_control_is_spooled_and_delivered_once_lifted(tmp_path: Path) -> None:
    with proxy_and_sidecar(tmp_path, [TOPIC]) as (proxy, sidecar):
        proxy.set_flow_control(True)
        [answer] = json_lines(rocketbox("send", TOPIC, "busy", "--json", sidecar=sidecar.endpoint))
        assert (answer["answer"], answer["cause"]) == ("SPOOLED", "THROTTLED")
        assert proxy.stored(TOPIC) == []
        proxy.set_flow_control(False)
        wait_stored_once(proxy, TOPIC, [answer["message_id"]])


def test_a_topic_the_proxy_lacks_exits_1_naming_it(tmp_path: Path) -> None:
    with proxy_and_sidecar(tmp_path, [TOPIC]) as (proxy, sidecar):
        sent = rocketbox("send", "Nowhere", "x", sidecar=sidecar.endpoint)
        consumed = rocketbox("consume", "Nowhere", "--wait-s", QUIET_WAIT_S, broker=proxy.endpoint)
    assert sent.returncode == 1, sent.stdout + sent.stderr
    assert "Nowhere" in sent.stdout + sent.stderr
    assert consumed.returncode == 1, consumed.stdout + consumed.stderr
    assert "Nowhere" in consumed.stdout + consumed.stderr


def test_consume_reads_the_proxy_as_a_group_and_acks(tmp_path: Path) -> None:
    with rocketmq_proxy(tmp_path, [TOPIC]) as proxy:
        ids = [f"01AABBCCDDEEFF0000{n:016X}" for n in range(3)]
        for n, i in enumerate(ids):
            assert send(
                proxy.endpoint, raw_message(TOPIC, i, f"order {n}".encode(), tag="Created")
            ).entries
        done = rocketbox(
            "consume", TOPIC, "--group", "cli", "--count", "3", "--json", broker=proxy.endpoint
        )
        again = rocketbox(
            "consume",
            TOPIC,
            "--group",
            "cli",
            "--wait-s",
            QUIET_WAIT_S,
            "--json",
            broker=proxy.endpoint,
        )
        acked = proxy.acked("cli")
        held = {(m.broker_name, m.queue_id, m.queue_offset) for m in proxy.stored(TOPIC)}
    got = json_lines(done)
    assert sorted(m["message_id"] for m in got) == ids
    assert sorted(m["body"] for m in got) == ["order 0", "order 1", "order 2"]
    assert {m["tag"] for m in got} == {"Created"}
    assert {(b, q, o) for _, b, q, o in acked} == held
    assert json_lines(again) == []
