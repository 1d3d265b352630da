"""An application written in Node, knowing nothing of rocketbox but
``proto/rocketbox/v1/sidecar.proto``, sends through a real ``rocketbox sidecar`` with a plain
gRPC client (@grpc/grpc-js and @grpc/proto-loader, pinned in package.json; send_via_sidecar.mjs):

- Send of a message with tag, keys and user properties is answered STORED with a V1 message id,
  and the broker holds exactly one copy, under that id, with what the app set;
- Send with an app-given ``message_id`` is STORED under exactly that id;
- Send of a message with an empty body fails with INVALID_ARGUMENT, whose status message and
  google.rpc.BadRequest name the field ``body``, and nothing of it reaches the broker;
- SendBatch of 3 answers each message, in request order, STORED;
- SendStream of 5 answers each request by its request id (uint64, also beyond 2^53), STORED;
- every id answered STORED is in the broker exactly once, with the body of the request it
  answered, and the topic holds those 10 messages and no others.

So the .proto alone is enough for another language: its well-known-type imports resolve, its
names, oneof, map, optional and uint64 fields work over the wire, and the rich error details
decode. ``make test`` installs the Node packages (``npm ci`` in tests/node). A machine without
``node`` or without those packages fails this test: it never skips.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import grpc
import pytest

from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from tests.broker.broker_process import BrokerProcess
from tests.node.node_script import run_node_script
from tests.sidecar.sidecar_process import CALL_DEADLINE_S, SidecarProcess, wait_stored

pytestmark = pytest.mark.slow

NODE_DIR = Path(__file__).resolve().parent
SCRIPT = NODE_DIR / "send_via_sidecar.mjs"
# The packages the script imports; their installed versions must be package.json's pins.
PACKAGES = ("@grpc/grpc-js", "@grpc/proto-loader")
TOPIC = "NodeSidecarTopic"
APP_MESSAGE_ID = "node-app-order-42"
V1_MESSAGE_ID = re.compile(r"^01[0-9A-F]{32}$")
BATCH_SIZE = 3
STREAM_REQUEST_IDS = ("1", "2", "3", "9007199254740993", "18446744073709551615")
STORED_COUNT = 1 + 1 + BATCH_SIZE + len(STREAM_REQUEST_IDS)
# The script has its own 60 s deadline; this one only guards against the script's failing to.
SCRIPT_DEADLINE_S = 90.0


def node_executable() -> str:
    """``node``, with tests/node's packages installed at their pinned versions; else fail."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "`node` is not on PATH: the Node sidecar test needs Node.js >= 18 and npm "
            "(then `make test` installs tests/node's packages)"
        )
    pins = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
    for name in PACKAGES:
        manifest = NODE_DIR / "node_modules" / name / "package.json"
        if not manifest.exists():
            pytest.fail(
                f"{manifest.parent} is missing: run `make test`, or `cd tests/node && npm ci`, "
                "to install the Node packages"
            )
        installed = json.loads(manifest.read_text())["version"]
        assert installed == pins[name], (
            f"installed {name} {installed}, pinned {pins[name]}: run `cd tests/node && npm ci`"
        )
    return node


def run_script(node: str, sidecar: SidecarProcess) -> dict[str, Any]:
    """Run send_via_sidecar.mjs against the sidecar; its JSON report."""
    stdout, report = run_node_script(
        [node, str(SCRIPT), sidecar.endpoint, TOPIC, APP_MESSAGE_ID], SCRIPT_DEADLINE_S
    )
    try:
        got = json.loads(stdout)
    except ValueError:
        pytest.fail(f"not one JSON object on stdout\n{report}")
    assert isinstance(got, dict), report
    assert sorted(got) == ["appId", "bad", "batch", "send", "stream"], report
    return got


def assert_stored(result: dict[str, Any], what: str) -> str:
    """``result`` is a STORED answer, as the first attempt, durable; its message id."""
    assert result["outcome"] == "stored", f"{what}: {result}"
    assert result["spooled"] is None, f"{what}: {result}"
    assert result["rejected"] is None, f"{what}: {result}"
    stored = result["stored"]
    assert stored["broker_name"], f"{what}: {result}"
    assert stored["durable"] is True, f"{what}: {result}"
    assert stored["attempts"] == 1, f"{what}: {result}"
    assert result["messageId"], f"{what}: {result}"
    return str(result["messageId"])


def only_copy(
    broker: BrokerProcess, result: dict[str, Any], what: str
) -> broker_admin_pb2.StoredMessage:
    """The one copy the broker holds of a STORED answer's message, at the offset answered."""
    message_id = result["messageId"]
    copies = wait_stored(broker.endpoint, message_id)
    assert len(copies) == 1, f"{what}: {len(copies)} copies of {message_id}, expected 1"
    copy = copies[0]
    assert copy.message_id == message_id, what
    assert copy.topic == TOPIC, what
    # The answer's queue_offset is the broker's (its queue_id is -1: the broker picked the queue).
    assert copy.queue_offset == int(result["stored"]["queue_offset"]), f"{what}: {copy}"
    return copy


def messages_in_topic(broker: BrokerProcess) -> int:
    with grpc.insecure_channel(broker.endpoint) as channel:
        described = broker_admin_pb2_grpc.BrokerAdminStub(channel).DescribeTopic(
            broker_admin_pb2.DescribeTopicRequest(topic=TOPIC), timeout=CALL_DEADLINE_S
        )
    return sum(q.max_queue_offset - q.min_queue_offset for q in described.queues)


def test_a_node_app_sends_through_the_sidecar_with_only_the_proto(tmp_path: Path) -> None:
    node = node_executable()
    broker = BrokerProcess(tmp_path / "broker", "--auto-create-topic")
    sidecar: SidecarProcess | None = None
    try:
        sidecar = SidecarProcess(broker.endpoint, "memory://")
        got = run_script(node, sidecar)

        # Send, with tag, keys and user properties: STORED under a stamped V1 id.
        send_id = assert_stored(got["send"], "Send")
        assert V1_MESSAGE_ID.match(send_id), send_id
        copy = only_copy(broker, got["send"], "Send")
        assert copy.body == b"node-sidecar send"
        assert copy.HasField("tag")
        assert copy.tag == "TagNodeSidecar"
        assert list(copy.keys) == ["node-sidecar-key-1", "node-sidecar-key-2"]
        assert dict(copy.user_properties) == {"origin": "node", "via": "sidecar"}

        # Send with the app's own id: STORED under exactly that id.
        assert assert_stored(got["appId"], "Send with message_id") == APP_MESSAGE_ID
        copy = only_copy(broker, got["appId"], "Send with message_id")
        assert copy.body == b"node-sidecar app id"

        # Send of an empty body: the call's status, naming the field, in words and in details.
        bad = got["bad"]
        assert "unexpectedSuccess" not in bad, f"an empty body was accepted: {bad}"
        assert bad["codeName"] == "INVALID_ARGUMENT", bad
        assert bad["code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0], bad
        assert "body" in bad["details"], bad
        assert [v["field"] for v in bad["fieldViolations"]] == ["body"], bad
        assert bad["fieldViolations"][0]["description"], bad

        # SendBatch: one result per message, in request order.
        assert len(got["batch"]) == BATCH_SIZE, got["batch"]
        for i, result in enumerate(got["batch"]):
            assert V1_MESSAGE_ID.match(assert_stored(result, f"SendBatch[{i}]")), result
            copy = only_copy(broker, result, f"SendBatch[{i}]")
            assert copy.body == f"node-sidecar batch {i}".encode(), f"SendBatch[{i}]: {copy}"
            assert list(copy.keys) == [f"node-sidecar-batch-{i}"], f"SendBatch[{i}]: {copy}"

        # SendStream: one result per request, matched by its request id (in any order).
        stream = {result["requestId"]: result for result in got["stream"]}
        assert sorted(stream) == sorted(STREAM_REQUEST_IDS), got["stream"]
        assert len(got["stream"]) == len(STREAM_REQUEST_IDS), got["stream"]
        for request_id, result in stream.items():
            what = f"SendStream request {request_id}"
            assert V1_MESSAGE_ID.match(assert_stored(result, what)), result
            copy = only_copy(broker, result, what)
            assert copy.body == f"node-sidecar stream {request_id}".encode(), f"{what}: {copy}"

        stored_ids = [
            got["send"]["messageId"],
            got["appId"]["messageId"],
            *(r["messageId"] for r in got["batch"]),
            *(r["messageId"] for r in got["stream"]),
        ]
        assert len(set(stored_ids)) == STORED_COUNT, f"an id answered twice: {stored_ids}"
        # Those, once each, and nothing else: not the rejected message, no duplicate.
        assert messages_in_topic(broker) == STORED_COUNT
    except BaseException as e:
        if sidecar is not None:
            e.add_note(f"sidecar output:\n{sidecar.output()}")  # shown by pytest with the failure
        e.add_note(f"broker output:\n{broker.output()}")
        raise
    finally:
        try:
            if sidecar is not None:
                sidecar.stop()
        finally:
            broker.stop()
