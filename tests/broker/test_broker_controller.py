"""The broker's background tasks live in one root TaskGroup (broker/background.py): one that dies
stops the whole broker, loudly, at once, instead of being found at shutdown.

Proves, on a real ``rocketbox broker`` process: when the pull offsets' state writer dies (a
directory stands where its temporary file goes, so its write fails, for root too), the broker
logs the task's name and traceback and exits non-zero by itself, without being signalled; the
offset committed before is answered OK (the fault is the writer's, not the request's).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.consumer_offset import OFFSETS_FILE_NAME
from tests.broker.broker_process import BrokerProcess
from tests.rocketbox_process import STOP_DEADLINE_S

pytestmark = pytest.mark.slow

CALL_DEADLINE_S = 15.0
METADATA = (("x-mq-client-id", "controller-test"),)


def commit_offset(endpoint: str, topic: str, offset: int) -> int:
    request = spb.UpdateOffsetRequest(
        group=pb.Resource(name="Pullers"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        offset=offset,
    )
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply = stub.UpdateOffset(request, metadata=METADATA, timeout=CALL_DEADLINE_S)
    return int(reply.status.code)


def test_a_background_task_that_dies_stops_the_broker_with_its_traceback(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, "--topic", "Log:1")
    try:
        config_dir = tmp_path / "config"
        assert config_dir.is_dir(), list(tmp_path.iterdir())
        (config_dir / f"{OFFSETS_FILE_NAME}.tmp").mkdir()
        assert commit_offset(broker.endpoint, "Log", 1) == Code.OK
        code = broker.wait_exit(STOP_DEADLINE_S)
    finally:
        if broker.running():
            broker.kill()
    output = broker.output()
    assert code != 0, output
    assert f"broker task 'state-writer {OFFSETS_FILE_NAME}' died" in output, output
    # Logged once when the task died; the command's own error is one line, not a second copy.
    assert output.count("Traceback (most recent call last)") == 1, output
    assert "IsADirectoryError" in output, output
    assert "its traceback is logged above" in output, output
    assert "rocketbox stopped cleanly" not in output, output
