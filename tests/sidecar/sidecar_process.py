"""A real ``rocketbox sidecar`` process, and a client of it through the generated stubs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from google.protobuf import timestamp_pb2

from chaos.processes import FAST_RESEND_ARGS
from chaos.processes import SIDECAR_READY_LINE as READY_LINE
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from tests.broker.broker_process import BrokerProcess
from tests.rocketbox_process import RocketboxProcess, wait_until

CALL_DEADLINE_S = 30.0
# The banner line of the RocketMQ front (--rocketmq-listen), printed before the ready line.
ROCKETMQ_FRONT_LINE = re.compile(r"sidecar RocketMQ front on [^\s]+:(\d+)")


# The brokers the sidecar tests send to: topics created on first use, and a FIFO topic.
BROKER_ARGS = ("--auto-create-topic", "--topic", "Fifo:4:FIFO")


def restart(broker: BrokerProcess) -> BrokerProcess:
    """The broker back on its old port, over its old store."""
    return BrokerProcess(broker.data_dir, *BROKER_ARGS, "--listen", f"127.0.0.1:{broker.port}")


class SidecarProcess(RocketboxProcess):
    def __init__(
        self, broker_endpoint: str, outbox_url: str, *args: str, options: tuple[str, ...] = ()
    ) -> None:
        """``options`` are rocketbox's own (``--log-format``), given before ``sidecar``."""
        self.outbox_url = outbox_url
        super().__init__(
            "sidecar",
            READY_LINE,
            [*options, "sidecar", "--broker", broker_endpoint, "--outbox", outbox_url,
             "--listen", "127.0.0.1:0", *FAST_RESEND_ARGS, *args],
        )  # fmt: skip

    @property
    def rocketmq_endpoint(self) -> str:
        """The RocketMQ front's address (started with ``--rocketmq-listen 127.0.0.1:0``), as
        its latest start printed it."""
        for line in reversed(self.lines):
            found = ROCKETMQ_FRONT_LINE.search(line)
            if found:
                return f"127.0.0.1:{found.group(1)}"
        raise AssertionError(f"the sidecar printed no RocketMQ front line:\n{self.output()}")

    @contextmanager
    def client(self) -> Iterator[sidecar_pb2_grpc.SidecarServiceStub]:
        with grpc.insecure_channel(self.endpoint) as channel:
            yield sidecar_pb2_grpc.SidecarServiceStub(channel)


def message(topic: str, body: bytes = b"payload", **fields: object) -> api.Message:
    return api.Message(topic=topic, body=body, **fields)  # type: ignore[arg-type]  # fields by name, checked by protobuf at run time


def send(stub: sidecar_pb2_grpc.SidecarServiceStub, m: api.Message) -> api.SendResult:
    response: api.SendResponse = stub.Send(api.SendRequest(message=m), timeout=CALL_DEADLINE_S)
    return response.result


def outcome(result: api.SendResult) -> str:
    return result.WhichOneof("outcome") or ""


def timestamp_ms(ms: int) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromMilliseconds(ms)
    return t


def stored_copies(broker_endpoint: str, message_id: str) -> list[broker_admin_pb2.StoredMessage]:
    """Every copy of ``message_id`` the broker holds (its index by message id)."""
    with grpc.insecure_channel(broker_endpoint) as channel:
        stub = broker_admin_pb2_grpc.BrokerAdminStub(channel)
        try:
            response = stub.GetMessage(
                broker_admin_pb2.GetMessageRequest(message_id=message_id),
                timeout=CALL_DEADLINE_S,
            )
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return list(response.messages)


def wait_stored(broker_endpoint: str, message_id: str) -> list[broker_admin_pb2.StoredMessage]:
    """The copies of a message the broker answered STORED for. Its index is built just after the
    store answers (the dispatcher), so a query right after a send may come too early."""
    copies: list[broker_admin_pb2.StoredMessage] = []

    def found() -> bool:
        copies[:] = stored_copies(broker_endpoint, message_id)
        return bool(copies)

    wait_until(found, CALL_DEADLINE_S, f"{message_id} in the broker's index")
    return copies


def set_flow_control(broker_endpoint: str, on: bool) -> None:
    with grpc.insecure_channel(broker_endpoint) as channel:
        broker_admin_pb2_grpc.BrokerAdminStub(channel).SetFlowControl(
            broker_admin_pb2.SetFlowControlRequest(on=on), timeout=CALL_DEADLINE_S
        )
