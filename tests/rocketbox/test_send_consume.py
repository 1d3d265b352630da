"""`rocketbox send` and `rocketbox consume` against a real broker and sidecar (port 0, RocksDB
outbox): a sent message is consumed with its tag, keys and properties; bodies come from the
argument, stdin or a file; a rejection exits 1 naming the field; a message spilled under flow
control exits 0 as SPOOLED and is consumed once the broker takes sends again; `--count`/`--rate`
print a summary; `--from first|last` places a new group; an unreachable sidecar or broker is
one line and exit 2.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketbox.admin_client import AdminCallError, AdminClient
from tests.broker.broker_process import BrokerProcess
from tests.rocketbox_process import CLI_DEADLINE_S, REPO_ROOT, rocketbox_cli, wait_until
from tests.services import free_port
from tests.sidecar.sidecar_process import SidecarProcess

pytestmark = pytest.mark.slow

# Bodies here may be any bytes: output read as latin-1, which takes them all.
rocketbox = functools.partial(rocketbox_cli, encoding="latin-1")

# consume's wait window where nothing more is expected.
QUIET_WAIT_S = "1"


@pytest.fixture(scope="module")
def sidecar(
    broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    outbox_dir = tmp_path_factory.mktemp("outbox")
    s = SidecarProcess(broker.endpoint, f"rocksdb://{outbox_dir}")
    yield s
    s.stop()


def send_json(sidecar: SidecarProcess, *args: str, stdin: bytes = b"") -> dict[str, Any]:
    done = rocketbox("send", *args, "--json", sidecar=sidecar.endpoint, stdin=stdin)
    assert done.returncode == 0, done.stdout + done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def consume_json(broker: BrokerProcess, topic: str, *args: str) -> list[dict[str, Any]]:
    done = rocketbox("consume", topic, "--json", *args, broker=broker.endpoint)
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_sent_message_is_consumed_with_its_tag_keys_and_properties(
    broker: BrokerProcess, sidecar: SidecarProcess
) -> None:
    done = rocketbox(
        "send", "CliOrders", "order 1 created", "--tag", "Created", "--keys", "order-1",
        "--keys", "customer-7", "--property", "region=eu", "--property", "source=cli",
        sidecar=sidecar.endpoint,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("STORED "), done.stdout
    assert ", durable" in done.stdout
    message_id = done.stdout.split()[1]
    [m] = consume_json(broker, "CliOrders", "--count", "1")
    assert m["message_id"] == message_id
    assert (m["tag"], m["keys"], m["body"]) == (
        "Created",
        ["customer-7", "order-1"],
        "order 1 created",
    )
    assert {"region": "eu", "source": "cli"}.items() <= m["properties"].items()
    assert m["born_time"].endswith("Z")
    # Acked: the group has nothing left.
    assert consume_json(broker, "CliOrders", "--wait-s", QUIET_WAIT_S) == []


def test_bodies_come_from_stdin_and_from_a_file(
    broker: BrokerProcess, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    binary = bytes(range(256))
    body_file = tmp_path / "body.bin"
    body_file.write_bytes(binary)
    piped = send_json(sidecar, "CliBodies", stdin=b"piped text")
    dashed = send_json(sidecar, "CliBodies", "-", stdin=b"dash text")
    filed = send_json(sidecar, "CliBodies", "--body-file", str(body_file))
    assert {piped["answer"], dashed["answer"], filed["answer"]} == {"STORED"}
    got = {m["message_id"]: m for m in consume_json(broker, "CliBodies", "--count", "3")}
    assert got[piped["message_id"]]["body"] == "piped text"
    assert got[dashed["message_id"]]["body"] == "dash text"
    assert got[filed["message_id"]]["body_encoding"] == "base64"
    assert base64.b64decode(got[filed["message_id"]]["body"]) == binary


def test_a_rejection_exits_1_naming_the_field(sidecar: SidecarProcess) -> None:
    done = rocketbox("send", "bad topic!", "x", sidecar=sidecar.endpoint)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("REJECTED INVALID_ARGUMENT field topic:"), done.stdout
    as_json = rocketbox("send", "bad topic!", "x", "--json", sidecar=sidecar.endpoint)
    assert as_json.returncode == 1
    answer = json.loads(as_json.stdout)
    assert (answer["answer"], answer["code"], answer["field"]) == (
        "REJECTED", "INVALID_ARGUMENT", "topic"
    )  # fmt: skip
    assert "%a-zA-Z0-9_-" in answer["reason"]


def test_a_spilled_message_is_spooled_then_consumed_when_the_broker_takes_sends_again(
    broker: BrokerProcess, sidecar: SidecarProcess
) -> None:
    flow = ("flow-control", "--topic", "CliSpill")
    assert rocketbox("send", "CliSpill", "warm-up", sidecar=sidecar.endpoint).returncode == 0
    assert rocketbox(*flow, "on", broker=broker.endpoint).returncode == 0
    try:
        done = rocketbox("send", "CliSpill", "spilled", sidecar=sidecar.endpoint)
    finally:
        assert rocketbox(*flow, "off", broker=broker.endpoint).returncode == 0
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("SPOOLED "), done.stdout
    assert ": THROTTLED (" in done.stdout
    assert "next attempt at 20" in done.stdout
    message_id = done.stdout.split()[1].rstrip(":")
    consumed = consume_json(broker, "CliSpill", "--follow", "--count", "2")
    assert [m["body"] for m in consumed if m["message_id"] == message_id] == ["spilled"]


def test_count_and_rate_print_a_summary(sidecar: SidecarProcess) -> None:
    done = rocketbox(
        "send", "CliLoad", "x", "--count", "40", "--rate", "400", sidecar=sidecar.endpoint
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sent 40 in "), done.stdout
    assert ": STORED 40" in done.stdout
    assert "msgs/s; latency p50 " in done.stdout
    assert " p99 " in done.stdout
    summary = json.loads(
        rocketbox("send", "CliLoad", "x", "--count", "5", "--json", sidecar=sidecar.endpoint).stdout
    )
    assert (summary["sent"], summary["answers"]) == (5, {"STORED": 5})
    assert summary["latency_p99_ms"] >= summary["latency_p50_ms"] > 0
    rejected = rocketbox("send", "bad topic!", "x", "--count", "3", sidecar=sidecar.endpoint)
    assert rejected.returncode == 1
    assert "REJECTED 3" in rejected.stdout
    assert "field topic" in rejected.stdout


def test_from_first_and_from_last_place_a_new_group(
    broker: BrokerProcess, sidecar: SidecarProcess
) -> None:
    before = [send_json(sidecar, "CliFrom", f"before {i}")["message_id"] for i in range(2)]
    last = consume_json(
        broker, "CliFrom", "--group", "CliLate", "--from", "last", "--wait-s", QUIET_WAIT_S
    )
    assert last == []
    after = send_json(sidecar, "CliFrom", "after")["message_id"]
    late = consume_json(broker, "CliFrom", "--group", "CliLate", "--from", "last", "--count", "1")
    assert [m["message_id"] for m in late] == [after]
    first = consume_json(
        broker, "CliFrom", "--group", "CliEarly", "--from", "first", "--count", "3"
    )
    assert sorted(m["message_id"] for m in first) == sorted([*before, after])


def test_a_tag_filter_passes_only_its_tags(broker: BrokerProcess, sidecar: SidecarProcess) -> None:
    wanted = send_json(sidecar, "CliTags", "a", "--tag", "TagA")["message_id"]
    send_json(sidecar, "CliTags", "b", "--tag", "TagB")
    got = consume_json(broker, "CliTags", "--tag", "TagA", "--wait-s", QUIET_WAIT_S)
    assert [m["message_id"] for m in got] == [wanted]


def test_an_unreachable_sidecar_or_broker_is_one_line_and_exit_3() -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    sent = rocketbox("send", "CliOrders", "x", sidecar=endpoint)
    assert sent.returncode == 3, sent.stdout + sent.stderr
    assert sent.stdout == ""
    [line] = sent.stderr.splitlines()
    assert endpoint in line
    assert "rocketbox up" in line
    assert "ROCKETBOX_SIDECAR" in line
    consumed = rocketbox("consume", "CliOrders", broker=endpoint)
    assert consumed.returncode == 3, consumed.stdout + consumed.stderr
    [line] = consumed.stderr.splitlines()
    assert endpoint in line
    assert "rocketbox up" in line
    assert "ROCKETBOX_BROKER" in line


def test_bad_options_are_usage_errors_naming_the_option(sidecar: SidecarProcess) -> None:
    zone = rocketbox(
        "send", "T", "x", "--delivery-time", "2030-01-01T10:00", sidecar=sidecar.endpoint
    )
    assert zone.returncode == 2
    assert "--delivery-time" in zone.stderr
    assert "time zone" in zone.stderr
    both = rocketbox("send", "T", "x", "--delay", "10s", "--delivery-time", "2030-01-01T10:00Z")
    assert both.returncode == 2
    assert "not both" in both.stderr
    delay = rocketbox("send", "T", "x", "--delay", "ten", sidecar=sidecar.endpoint)
    assert delay.returncode == 2
    assert "--delay" in delay.stderr
    assert "10s" in delay.stderr
    prop = rocketbox("send", "T", "x", "--property", "novalue", sidecar=sidecar.endpoint)
    assert prop.returncode == 2
    assert "KEY=VALUE" in prop.stderr


def test_ctrl_c_stops_a_following_consumer_cleanly(
    broker: BrokerProcess, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    sent = send_json(sidecar, "CliFollow", "one")["message_id"]
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {**os.environ, "ROCKETBOX_BROKER": broker.endpoint}
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocketbox", "consume", "CliFollow", "--follow"],
            stdout=stdout, stderr=stderr, cwd=REPO_ROOT, env=env,
        )  # fmt: skip
        try:
            wait_until(lambda: sent in out.read_text(), CLI_DEADLINE_S, "the message printed")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(CLI_DEADLINE_S) == 0, err.read_text()
        finally:
            proc.kill()
            proc.wait()
    assert "interrupted: stopping" in err.read_text()
    assert "Traceback" not in err.read_text()


def test_a_too_large_body_is_rejected_naming_the_field_and_the_limit(
    sidecar: SidecarProcess, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (4 * 1024 * 1024 + 1))
    done = rocketbox("send", "CliBig", "--body-file", str(big), "--json", sidecar=sidecar.endpoint)
    assert done.returncode == 1, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert (answer["answer"], answer["field"]) == ("REJECTED", "body")
    assert "4194304" in answer["reason"], answer["reason"]


def test_message_group_and_delay_reach_the_consumer(
    broker: BrokerProcess, sidecar: SidecarProcess
) -> None:
    fifo = send_json(sidecar, "Fifo", "in order", "--message-group", "order-9")
    delayed = send_json(sidecar, "CliDelay", "later", "--delay", "1s")
    assert {fifo["answer"], delayed["answer"]} == {"STORED"}
    [m] = consume_json(broker, "Fifo", "--count", "1")
    assert (m["message_id"], m["message_group"]) == (fifo["message_id"], "order-9")
    [d] = consume_json(broker, "CliDelay", "--follow", "--count", "1")
    assert d["message_id"] == delayed["message_id"]
    assert d["delivery_time"] > d["born_time"]


def _stored_count(broker: BrokerProcess, topic: str) -> int:
    with AdminClient(broker.endpoint) as client:
        try:
            queues = client.describe_topic(topic).queues
        except AdminCallError:
            return 0  # not created yet: nothing stored
    return sum(q.max_queue_offset for q in queues)


def test_ctrl_c_ends_a_load_with_the_summary_of_what_was_answered(
    broker: BrokerProcess, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    env = {**os.environ, "ROCKETBOX_SIDECAR": sidecar.endpoint}
    args = ["send", "CliStopped", "x", "--count", "1000000", "--rate", "50"]
    with out.open("w") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocketbox", *args],
            stdout=stdout, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env,
        )  # fmt: skip
        try:
            wait_until(lambda: _stored_count(broker, "CliStopped") > 0, CLI_DEADLINE_S, "a send")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(CLI_DEADLINE_S) == 0, out.read_text()
        finally:
            proc.kill()
            proc.wait()
    text = out.read_text()
    assert " s (interrupted): STORED " in text, text
    assert "Traceback" not in text
