"""Shared pieces of the apache.rocketmq.v2 edge: status replies and protocol errors.

Every unary response carries a ``Status`` and completes with gRPC OK, even for business errors,
as the RocketMQ proxy does and the official clients expect (spec §1). ``ProtocolError`` is how
handlers bail out with such a status; the servicer turns it into the response.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

Code = pb.Code


def status(code: int, message: str | None = None) -> pb.Status:
    return pb.Status(code=code, message=message if message is not None else Code.Name(code))


OK_STATUS = status(Code.OK)


class ProtocolError(Exception):
    """A request refused with a protocol status code; ``message`` names the field and limit."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{Code.Name(code)}: {message}")

    def to_status(self) -> pb.Status:
        return status(self.code, self.message)
