"""Shared pieces of the apache.rocketmq.v2 edge: status replies and protocol errors.

Every unary response carries a ``Status`` and completes with gRPC OK, even for business errors,
as the RocketMQ proxy does and the official clients expect (docs/rocketmq-protocol.md §1).
``ProtocolError`` is how handlers bail out with such a status; the servicer turns it into the
response. A fault no handler expected is answered the same way, INTERNAL_SERVER_ERROR in the Status
(``fault_reply``, used by the server's guard), except on the Telemetry stream, which ends with gRPC
INTERNAL (docs/rocketmq-protocol.md §1).

A status message never grows with the request: values quoted from it are cut
(rocketbox_api.message_rules.shown, the one quoting of every error text) and the whole message is
bounded (``STATUS_MESSAGE_CHARS_MAX``), so that an answer with one status per entry stays far
below the server's message size limit whatever the request held.
"""

from __future__ import annotations

from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

Code = pb.Code
MESSAGING_SERVICE_NAME = spb.DESCRIPTOR.services_by_name["MessagingService"].full_name
STATUS_MESSAGE_CHARS_MAX = 1024


def status(code: int, message: str | None = None) -> pb.Status:
    text = message if message is not None else Code.Name(code)
    if len(text) > STATUS_MESSAGE_CHARS_MAX:
        text = text[: STATUS_MESSAGE_CHARS_MAX - 1] + "…"
    return pb.Status(code=code, message=text)


OK_STATUS = status(Code.OK)


class ProtocolError(Exception):
    """A request refused with a protocol status code; ``message`` names the field and limit."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{Code.Name(code)}: {message}")

    def to_status(self) -> pb.Status:
        return status(self.code, self.message)


def fault_reply(method: MethodDescriptor, reason: str) -> Message | None:
    """The answer to a fault of a MessagingService handler: its response with
    INTERNAL_SERVER_ERROR in the Status; None (gRPC INTERNAL) for the Telemetry stream and for
    the broker's other services."""
    if method.containing_service.full_name != MESSAGING_SERVICE_NAME or method.client_streaming:
        return None
    if "status" not in method.output_type.fields_by_name:
        return None
    reply: Message = message_factory.GetMessageClass(method.output_type)()
    reply.status.CopyFrom(status(Code.INTERNAL_SERVER_ERROR, reason))  # type: ignore[attr-defined]  # a message class made at run time: its fields are not typed
    return reply
